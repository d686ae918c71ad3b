"""How fast this machine multiplies matrices: numpy float32 matmul GFLOP/s over about one second.

Timings in README.md and the docs name this figure, so a reader can scale them to their machine:
`python bench/calibrate.py` prints one line, e.g.
`matmul f32 1024x1024: 131 GFLOP/s (numpy, 2 cores)`.
"""
import argparse, os, time

import numpy as np


def matmul_gflops(n: int = 1024, seconds: float = 1.0) -> float:
    "GFLOP/s of `n`x`n` float32 matmuls repeated for about `seconds` (after one warm-up product)."
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    a @ b
    reps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        a @ b
        reps += 1
    return 2 * n**3 * reps / elapsed / 1e9


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--n', type=int, default=1024, help='matrix side')
    p.add_argument('--seconds', type=float, default=1.0, help='how long to multiply')
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f'matmul f32 {args.n}x{args.n}: {matmul_gflops(args.n, args.seconds):.0f} GFLOP/s '
          f'(numpy, {cores} cores)')
