"""Episodes/s of Ray rollout workers (1, 2, 4, ...) on a workload whose tools take 50 ms.

Each episode: the scripted policy calls a `multiply` tool that takes `--tool-ms` (a blocking call,
as a synchronous sandbox or HTTP client is: it runs in the tool thread pool), then answers; 2
model turns, 1 tool call. Each worker keeps `--concurrency` episodes in flight (a rollout engine
bounds its batch the same way), so one worker's rate is bounded by its tool latency and adding
workers adds episodes in flight. Worker start-up is excluded (a warm-up batch runs first).

The single-process line is the same collector without Ray, for the overhead of going through it.
This machine has 2 CPU cores: Ray's logical CPUs (--num-cpus) are not cores, and the framework's
own CPU work per episode (chat template, tokenizer, parsing) competes for those 2 cores, so the
ratios are capped by the machine, not by the collector.

Usage: python bench/ray_workers.py [--episodes 256] [--workers 1 2 4] [--tool-ms 50]
                                   [--concurrency 8] [--cpu-tool]
"""
import argparse, os, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import logging; logging.basicConfig(level=os.environ.get('BENCH_LOG', 'ERROR'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--episodes', type=int, default=256)
    ap.add_argument('--workers', type=int, nargs='+', default=[1, 2, 4])
    ap.add_argument('--tool-ms', type=float, default=50.0)
    ap.add_argument('--concurrency', type=int, default=8, help='episodes in flight per worker')
    ap.add_argument('--cpu-tool', action='store_true', help='tools burn CPU instead of sleeping')
    ap.add_argument('--repeats', type=int, default=2)
    a = ap.parse_args()
    import functools, ray
    from tunix_agentic.rollout.ray_workers import RayCollector, scripted_calculator
    tasks = [{'question': f'What is {n}*{n + 7}?', 'answer': str(n * (n + 7))}
             for n in range(11, 11 + a.episodes // 2)]
    make = functools.partial(scripted_calculator, 2, tool_ms=a.tool_ms, cpu_tool=a.cpu_tool,
                             max_concurrency=a.concurrency)

    def timed(run):
        best = None
        for _ in range(a.repeats):
            t = time.perf_counter(); trajs = run(); dt = time.perf_counter() - t
            assert len(trajs) == 2 * len(tasks) and all(x.reward == 1.0 for x in trajs)
            best = dt if best is None else min(best, dt)
        return len(tasks) * 2 / best

    base = make(); base.run(tasks[:4])
    rows = [('1 process, no Ray', timed(lambda: base.run(tasks)))]
    ray.init(address='local', num_cpus=max(a.workers), include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False)
    try:
        for n in a.workers:
            rc = RayCollector(make, num_workers=n, groups_per_worker=max(a.concurrency // 2, 1))
            rc.run(tasks[:4 * n])  # warm-up: worker start-up and imports are not counted
            rows.append((f'{n} Ray worker{"s" * (n > 1)}', timed(lambda: rc.run(tasks))))
            rc.close()
    finally: ray.shutdown()
    one = next(r for name, r in rows if name.startswith('1 Ray'))
    kind = 'burn CPU' if a.cpu_tool else 'sleep (blocking)'
    print(f'{len(tasks) * 2} episodes, tools {kind} {a.tool_ms:g} ms, {a.concurrency} episodes '
          f'in flight per worker, {os.cpu_count()} CPU cores on this machine')
    print(f'{"":22s} {"episodes/s":>10s} {"vs 1 worker":>12s}')
    for name, r in rows: print(f'{name:22s} {r:10.1f} {r / one:11.2f}x')
    print('ray_workers: ' + ', '.join(f'{name}: {r:.1f} eps/s ({r / one:.2f}x)' for name, r in rows))


if __name__ == '__main__':
    main()
