"""Flax NNX decoders (Qwen2/3, Llama 3, Gemma 3), their checkpoint formats, the default model."""
