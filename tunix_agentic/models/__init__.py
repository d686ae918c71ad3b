"""Flax NNX decoders (Qwen2/Qwen3, Llama 3, Gemma 3), their checkpoint formats and the default model."""
