"""Chat and tokens: tool-call parsers, chat templates, tokenizers and the episode encoder."""
