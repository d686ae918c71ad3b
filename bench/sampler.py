"""Decode throughput: the vanilla JAX sampler vs sglang-jax on the same checkpoint, and the
vanilla decode loop vs bare jitted forward steps of the same shapes.

Run: JAX_PLATFORMS=cpu .venv/bin/python bench/sampler.py [--reps 5] [--batch 8] [--new 64]
Greedy (and T=1 sampling with per-row seeds), no stop ids (every row decodes exactly --new
tokens), f32, default tiny checkpoint,
timings after a warm-up call (compiles excluded), median over --reps. The last line states the
figures.
"""
import argparse, logging, os, statistics, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import jax, jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_agentic.models.default import default_model_dir, load_default
from tunix_agentic.models.decoder import KVCache
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig


def timed(fn, reps):
    "Median wall seconds of `fn()` over `reps` calls (after one warm-up call)."
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--new', type=int, default=64)
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model, cfg, tok = load_default()
    qs = ['What is 2+3?', 'Hi', 'Add 17 and 25.', 'Tell me a story.', 'x',
          'Multiply 6 by 7 please.', 'What is the capital of France?', 'Compute 12 - 5.']
    prompts = [tok.apply_chat_template([{'role': 'user', 'content': qs[i % len(qs)]}],
                                       add_generation_prompt=True) for i in range(a.batch)]
    sp = SamplingParams(temperature=0.0, max_new_tokens=a.new)
    n_tok = a.batch * a.new

    # 1. vanilla sampler, end to end (prefill + decode loop, host in/out)
    vs = JaxEngine(model, config=JaxEngineConfig(max_batch=a.batch, min_batch_bucket=a.batch,
                                                 min_gen_bucket=a.new))
    out_v = vs.generate(prompts, sp)
    assert all(len(o.token_ids) == a.new for o in out_v)
    t_van = timed(lambda: vs.generate(prompts, sp), a.reps)
    t_van1 = timed(lambda: vs.generate(prompts, sp.replace(max_new_tokens=1)), a.reps)
    hot = [sp.replace(temperature=1.0, seed=i) for i in range(a.batch)]   # RL-style sampling
    t_van_hot = timed(lambda: vs.generate(prompts, hot), a.reps)

    # 2. bare jitted forward steps of the decode shapes: [batch, 1] tokens on a cache of P+G slots
    graphdef, state = nnx.split(model)
    P = max(32, 1 << (max(map(len, prompts)) - 1).bit_length())
    S = P + a.new

    @jax.jit
    def step(state, tok_b1, pos_b1, cache, valid_bs):
        return nnx.merge(graphdef, state)(tok_b1, pos_b1, cache, valid_bs)

    def bare():
        cache = KVCache.init(cfg, a.batch, S)
        valid = jnp.ones((a.batch, S), bool)
        t = jnp.zeros((a.batch, 1), jnp.int32)
        for i in range(a.new - 1):
            logits, cache = step(state, t, jnp.full((a.batch, 1), P + i), cache, valid)
        jax.block_until_ready(logits)
    t_bare = timed(bare, a.reps)

    # 3. sglang-jax on the same checkpoint
    from tunix_agentic.engines.sglang_config import SglangConfig
    from tunix_agentic.engines.sglang_engine import SglangJaxEngine
    sg = SglangJaxEngine(default_model_dir(), SglangConfig.cpu(timeout_s=600))
    out_s = sg.generate(prompts, sp)
    same = sum(o.token_ids == p.token_ids for o, p in zip(out_s, out_v))
    t_sg = timed(lambda: sg.generate(prompts, sp), a.reps)
    t_sg_hot = timed(lambda: sg.generate(prompts, hot), a.reps)
    sg.close()

    van_tps, sg_tps = n_tok / t_van, n_tok / t_sg
    loop_step = (t_van - t_van1) / (a.new - 1)
    bare_step = t_bare / (a.new - 1)
    print(f'checkpoint: {default_model_dir()} ({cfg.num_layers} layers, hidden {cfg.hidden_size}, '
          f'vocab {cfg.vocab_size}), batch {a.batch}, {a.new} new tokens, greedy, f32, '
          f'median of {a.reps} after warm-up, JAX {jax.__version__} on {jax.devices()[0].platform}')
    print(f'{"engine":<28}{"seconds":>10}{"tokens/s":>12}')
    print(f'{"vanilla JaxEngine":<28}{t_van:>10.3f}{van_tps:>12.0f}')
    print(f'{"sglang-jax Engine":<28}{t_sg:>10.3f}{sg_tps:>12.0f}')
    print(f'{"vanilla, T=1 sampling":<28}{t_van_hot:>10.3f}{n_tok / t_van_hot:>12.0f}')
    print(f'{"sglang-jax, T=1 sampling":<28}{t_sg_hot:>10.3f}{n_tok / t_sg_hot:>12.0f}')
    print(f'greedy outputs identical in {same}/{a.batch} rows')
    print(f'{"decode step":<28}{"ms/step":>10}')
    print(f'{"vanilla while_loop":<28}{loop_step * 1e3:>10.3f}   (generate(64) - generate(1)) / 63')
    print(f'{"bare jitted forward":<28}{bare_step * 1e3:>10.3f}   63 python-dispatched steps')
    print(f'RESULT greedy: vanilla {van_tps:.0f} tok/s vs sglang-jax {sg_tps:.0f} tok/s, ratio '
          f'{van_tps / sg_tps:.2f}x; T=1 sampling: {n_tok / t_van_hot:.0f} vs '
          f'{n_tok / t_sg_hot:.0f} tok/s, ratio {t_sg_hot / t_van_hot:.2f}x; vanilla decode loop '
          f'{loop_step * 1e3:.2f} ms/step vs bare jitted forward {bare_step * 1e3:.2f} ms/step '
          f'(ratio {loop_step / bare_step:.2f}); batch {a.batch}, {a.new} new tokens, CPU')


if __name__ == '__main__':
    main()
    sys.stdout.flush()
    os._exit(0)   # skip sglang-jax's noisy interpreter teardown so the RESULT line stays last
