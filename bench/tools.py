"""Benchmark: concurrency of one ToolSession turn.

256 calls in one turn, each sleeping a seeded 10-100 ms. Perfect overlap makes the turn take as long as
its longest call, so the figure is wall time / longest single call (1.0 is ideal; sequential execution
would be sum / max, about 120 here). Measured for an async tool (asyncio.sleep) and, for contrast, for
a blocking sync tool (time.sleep) that ToolManager runs in asyncio's default worker threads (their
number is min(32, cpus + 4), so blocking tools overlap only that far).

Usage: python bench/tools.py [--calls 256] [--repeats 5] [--seed 0]
The last line states the figures.
"""
import argparse, asyncio, os, random, statistics, sys, time

from tunix_agentic.tools.base import FunctionTool, ToolManager
from tunix_agentic.core.trajectory import ToolCall


async def nap(ms: int) -> str:
    """Sleep asynchronously.

    Args:
        ms: Milliseconds.
    """
    await asyncio.sleep(ms / 1000)
    return 'ok'


def block(ms: int) -> str:
    """Sleep in a thread.

    Args:
        ms: Milliseconds.
    """
    time.sleep(ms / 1000)
    return 'ok'


async def one_turn(mgr, name, sleeps):
    async with mgr.session() as s:
        t0 = time.perf_counter()
        outs = await s.execute([ToolCall(name, {'ms': ms}) for ms in sleeps])
        wall = time.perf_counter() - t0
    assert all(o.ok for o in outs), [o.error for o in outs if not o.ok][:3]
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--calls', type=int, default=256)
    ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    mgr = ToolManager([nap, FunctionTool.from_function(block, blocking=True)], call_timeout=60)
    res = {}
    for name in ('nap', 'block'):
        ratios = []
        for rep in range(a.repeats if name == 'nap' else 1):
            sleeps = [rng.randint(10, 100) for _ in range(a.calls)]
            wall = asyncio.run(one_turn(mgr, name, sleeps))
            ratios.append(wall / (max(sleeps) / 1000))
            print(f'{name:5s} rep {rep}: {a.calls} calls, sum {sum(sleeps) / 1000:.2f} s, longest '
                  f'{max(sleeps)} ms, wall {wall * 1000:.1f} ms, wall/longest {ratios[-1]:.3f}')
        res[name] = ratios
    med = statistics.median(res['nap'])
    print(f'RESULT bench/tools.py: {a.calls} concurrent calls sleeping 10-100 ms, async tool: wall / '
          f'longest call = {med:.3f} (median of {a.repeats}; best {min(res["nap"]):.3f}, worst '
          f'{max(res["nap"]):.3f}); blocking sync tool in worker threads: {res["block"][0]:.2f} '
          f'(cpus={os.cpu_count()})')


if __name__ == '__main__':
    main()
