"""GRPO train step (Trainer.update: batch transfer, PPO-clip loss, grads, clip, AdamW, metrics) vs a
bare jitted forward+backward of the same model on the same batch. One run, side by side, as a ratio.

    JAX_PLATFORMS=cpu .venv/bin/python bench/learner.py [--batch 16] [--seq 256] [--iters 10]
"""
import argparse, time, statistics, numpy as np, jax, jax.numpy as jnp
from flax import nnx
from tunix_agentic.models.default import load_default
from tunix_agentic.models.qwen2 import Qwen2
from tunix_agentic.core.trajectory import Trajectory
from tunix_agentic.learn.losses import LossConfig, token_logprobs
from tunix_agentic.learn.trainer import Trainer, TrainerConfig

p = argparse.ArgumentParser()
p.add_argument('--batch', type=int, default=16)
p.add_argument('--seq', type=int, default=256)
p.add_argument('--iters', type=int, default=10)
p.add_argument('--kl', type=float, default=0.0, help='kl_coef (adds a reference forward)')
a = p.parse_args()

model, mcfg, tok = load_default()
rng = np.random.default_rng(0)
trajs = []
for i in range(a.batch):
    n = a.seq - int(rng.integers(0, 8))
    trajs.append(Trajectory(input_ids=rng.integers(0, mcfg.vocab_size, n).tolist(),
                            response_mask=[0] * 32 + [1] * (n - 32),
                            logprobs=[0.0] * 32 + (-rng.random(n - 32)).tolist(),
                            reward=float(i % 2), group_id=str(i // 4)))
tr = Trainer(model, TrainerConfig(learning_rate=1e-5, buckets=(a.seq,),
                                  loss=LossConfig(kl_coef=a.kl)))
batch = tr.batch_from(trajs, 'grpo')

graphdef, params, rest = nnx.split(model, nnx.Param, ...)
dev = {k: jnp.asarray(batch[k]) for k in ('tokens', 'positions', 'targets', 'mask')}
@jax.jit
def fwd_bwd(params, b):
    def f(p):
        logits = nnx.merge(graphdef, p, rest)(b['tokens'], b['positions'])
        lp, _ = token_logprobs(logits, b['targets'])
        return -(lp * b['mask']).sum() / b['mask'].sum()
    return jax.value_and_grad(f)(params)

def timeit(fn, n):
    fn()  # compile
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

def bare(): jax.block_until_ready(fwd_bwd(params, dev))
def grpo(): tr.update(batch, 'grpo')   # returns python floats: synchronises

# interleave to share machine noise fairly
t_bare = timeit(bare, a.iters); t_grpo = timeit(grpo, a.iters)
t_bare2 = timeit(bare, a.iters); t_grpo2 = timeit(grpo, a.iters)
t_bare, t_grpo = min(t_bare, t_bare2), min(t_grpo, t_grpo2)
toks = a.batch * a.seq
print(f'{"":28s}{"median s/step":>14s}{"tokens/s":>12s}')
print(f'{"bare jit fwd+bwd":28s}{t_bare:14.4f}{toks / t_bare:12.0f}')
print(f'{"GRPO train step (Trainer)":28s}{t_grpo:14.4f}{toks / t_grpo:12.0f}')
print(f'device={jax.devices()[0].platform} x{len(jax.devices())} model=default tiny '
      f'({sum(x.size for x in jax.tree.leaves(params)) / 1e6:.2f}M params) batch={a.batch}x{a.seq} '
      f'kl_coef={a.kl}')
print(f'RESULT: GRPO step {t_grpo * 1e3:.1f} ms vs bare fwd+bwd {t_bare * 1e3:.1f} ms -> '
      f'ratio {t_grpo / t_bare:.2f}x (batch {a.batch}x{a.seq}, {jax.devices()[0].platform})')
