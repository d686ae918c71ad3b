"""Engines: the sampling interface, our JAX engine, sglang-jax and the OpenAI-style server."""
