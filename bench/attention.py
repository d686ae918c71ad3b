"""Attention for a block of queries on CPU: the dense form against `attend_rowwise` (one batch row at a
time, backward recomputing the scores), side by side in one run, forward and forward+backward, at the
demo's shapes (8 query heads and 4 key/value heads of width 32): an SFT batch (32 rows of 160 tokens)
and a GRPO micro-batch (8 rows of 200 tokens after a 540-token prefix copied into the rows).

    JAX_PLATFORMS=cpu .venv/bin/python bench/attention.py [--iters 10]
"""
import argparse, math, time, statistics
import jax, jax.numpy as jnp, numpy as np
from tunix_agentic.models.attention import attend_rowwise

p = argparse.ArgumentParser()
p.add_argument('--iters', type=int, default=10)
a = p.parse_args()

def dense(q, k, v, mask):  # what `decoder.attend` computes off the CPU backend
    s = jnp.einsum('btkgd,bskd->bkgts', q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    p = jax.nn.softmax(jnp.where(mask[:, None, None], s, jnp.finfo(jnp.float32).min), -1)
    return jnp.einsum('bkgts,bskd->btkgd', p, v, preferred_element_type=jnp.float32)

def timed(f, *args):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(a.iters):
        t = time.perf_counter(); jax.block_until_ready(f(*args)); ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts)

r = np.random.default_rng(0)
for name, b, t, s in (('SFT batch', 32, 160, 160), ('GRPO micro-batch', 8, 200, 740)):
    q = jnp.asarray(r.standard_normal((b, t, 4, 2, 32)), jnp.float32)
    k, v = (jnp.asarray(r.standard_normal((b, s, 4, 32)), jnp.float32) for _ in range(2))
    lens = jnp.asarray(r.integers(t // 2, t + 1, b)) + (s - t)
    mask = (jnp.arange(s)[None, None] <= jnp.arange(t)[None, :, None] + (s - t)) & (jnp.arange(s) < lens[:, None, None])
    w = jnp.asarray(r.standard_normal(q.shape), jnp.float32)
    row = {}
    for label, f in (('dense', dense), ('rowwise', attend_rowwise)):
        fwd = jax.jit(lambda q, k, v: f(q, k, v, mask))
        grad = jax.jit(jax.grad(lambda q, k, v: (f(q, k, v, mask) * w).sum(), (0, 1, 2)))
        row[label] = (timed(fwd, q, k, v), timed(grad, q, k, v))
    (fd, gd), (fr, gr) = row['dense'], row['rowwise']
    print(f'{name} [{b} rows, {t} queries, {s} keys]: forward dense {fd:.1f} ms, rowwise {fr:.1f} ms '
          f'({fd / fr:.2f}x); forward+backward dense {gd:.1f} ms, rowwise {gr:.1f} ms ({gd / gr:.2f}x)')
