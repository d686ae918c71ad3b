"""Tools: argument checks, the tool manager, rate limits, the sandbox and built-in tools."""
