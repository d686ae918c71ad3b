"""What one GRPO micro-batch update of the Gemma 3 270M shape asks XLA for: the compiled program's
temporary buffers, by rows per micro-batch, log-prob chunk and rematerialisation (LoRA rank 16).

XLA's own memory analysis of the compiled `_accumulate_grad` (what `Trainer.update` runs once per
micro-batch): deterministic, no timing, ~1 min on 2 cores. Random weights (the shape is what counts).

    .venv/bin/python bench/update_memory.py                      # the table below, 18 layers
    .venv/bin/python bench/update_memory.py --layers 2 6 --remat  # per-layer growth, remat on/off
    .venv/bin/python bench/update_memory.py --engine              # the sampler's prefill instead

With --engine: the same for one call of the sampler (`generate_tokens`, as the run's engine calls it:
a 16-token prefix in cascade, 64 new tokens) by rows prefilled at a time (`engine.prefill_rows`).
"""
import argparse, dataclasses, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_memory import gemma3_270m_config, grpo_trajectories  # noqa: E402


def temp_gb(layers: int, rows: int, seq: int, chunk: int, remat: bool) -> float:
    import jax, jax.numpy as jnp
    from flax import nnx
    from tunix_agentic.models.gemma3 import Gemma3
    from tunix_agentic.learn.lora import LoraConfig
    from tunix_agentic.learn.trainer import (Trainer, TrainerConfig, LOSS_FNS, _accumulate_grad,
                                             _device_batch, _DEVICE_KEYS)
    c = gemma3_270m_config('float32')
    cfg = dataclasses.replace(c, num_layers=layers, layer_types=c.layer_types[:layers])
    tc = TrainerConfig(learning_rate=1e-5, buckets=(seq,), logit_chunk=chunk, remat=remat,
                       lora=LoraConfig(rank=16, alpha=32.0), shared_prefix=16)
    tr = Trainer(Gemma3(cfg, rngs=nnx.Rngs(0)), tc)
    micro = _device_batch(tr, tr.batch_from(grpo_trajectories(rows, seq, c.vocab_size), 'grpo'),
                          _DEVICE_KEYS)
    loss = lambda: LOSS_FNS['grpo'](tr._params, tr.graphdef, tr.rest, micro, tc, tr.ref_params)
    acc = (jax.tree.map(jnp.zeros_like, tr._params),
           jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(loss)[1]))
    compiled = _accumulate_grad.lower(acc, jnp.float32(1), tr._params, tr.rest, tr.ref_params,
                                      micro, graphdef=tr.graphdef, kind='grpo', cfg=tc).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 1e9


def engine_temp_gb(rows: int, prompt: int, prefill_rows: int) -> float:
    import jax, jax.numpy as jnp
    from flax import nnx
    from tunix_agentic.models.gemma3 import Gemma3
    from tunix_agentic.engines.jax_engine import generate_tokens
    model = nnx.eval_shape(lambda: Gemma3(gemma3_270m_config('float32'), rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    S = jax.ShapeDtypeStruct
    i32 = lambda *s: S(s, jnp.int32)
    f32 = lambda *s: S(s, jnp.float32)
    compiled = generate_tokens.lower(
        graphdef, state, i32(rows, prompt), i32(rows, prompt), f32(rows), i32(rows), f32(rows),
        i32(rows), i32(rows, 8), S((rows, 2), jnp.uint32), i32(1, 16), max_new=64, use_filter=False,
        chunk=8, cascade=True, prefill_rows=prefill_rows).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 1e9


def engine_table(a):
    print(f'Sampler call, Gemma 3 270M shape (random), {a.engine_rows} rows, 16-token cascade '
          'prefix, 64 new tokens: XLA temporary buffers of the compiled program')
    print(f"{'prompt':>6} {'prefill_rows':>12} {'temp GB':>8}")
    for prompt in a.prompts:
        for pr in a.prefill_rows:
            t = engine_temp_gb(a.engine_rows, prompt, pr)
            print(f'{prompt:>6} {pr if pr else "all":>12} {t:>8.2f}', flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--layers', type=int, nargs='+', default=[18])
    p.add_argument('--rows', type=int, nargs='+', default=[4, 2, 1], help='rows per micro-batch')
    p.add_argument('--seq', type=int, default=1024, help='tokens per row (the bucket)')
    p.add_argument('--chunks', type=int, nargs='+', default=[256, 128], help='logit_chunk values')
    p.add_argument('--remat', action='store_true', help='also with remat on')
    p.add_argument('--engine', action='store_true', help="the sampler's call instead")
    p.add_argument('--engine-rows', type=int, default=32, help='rows of the sampler call')
    p.add_argument('--prompts', type=int, nargs='+', default=[704, 1024], help='prompt tokens')
    p.add_argument('--prefill-rows', type=int, nargs='+', default=[0, 16, 8, 4])
    a = p.parse_args()
    if a.engine: return engine_table(a)
    print(f'GRPO micro-batch update, Gemma 3 270M shape (random), LoRA rank 16, {a.seq} tokens a '
          'row: XLA temporary buffers of the compiled program')
    print(f"{'layers':>6} {'rows':>4} {'chunk':>5} {'remat':>5} {'temp GB':>8}")
    for layers in a.layers:
        for rows in a.rows:
            for chunk in a.chunks:
                for remat in ((False, True) if a.remat else (False,)):
                    t = temp_gb(layers, rows, a.seq, chunk, remat)
                    print(f'{layers:>6} {rows:>4} {chunk:>5} {str(remat):>5} {t:>8.2f}', flush=True)


if __name__ == '__main__':
    main()
