"""Tools: argument checks, the tool manager, rate limits, the subprocess sandbox and built-in tools."""
