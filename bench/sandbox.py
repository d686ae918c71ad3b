"""Benchmark: the local sandbox (warm fork server, fresh namespaces per call) against a bare
`python -c` spawn, in the same run.

For each of (a) bare `python -c 'print(1+1)'` subprocesses (same interpreter, asyncio, no isolation)
and (b) `LocalSandbox.run('print(1+1)')` (fork server: fork, new user/mount/net/IPC/UTS/PID
namespaces, private tmpfs, own /proc, seccomp, rlimits, capped output), N sequential runs give
p50/p95 latency, and N runs at concurrency C give executions/s. The two kinds are interleaved in
rounds (latency: call by call) so that load from other processes on the machine hits both alike.
Both are spawned the same way (asyncio, pipes, start_new_session=True for the bare spawn). The fork
server is started before timing (once per process; its start-up is printed). Targets of issue 11:
sandbox p50 <= 15 ms and throughput at concurrency 4 >= 3x the bare spawn.

Usage: python bench/sandbox.py [--n 60] [--concurrency 4] [--rounds 3]
The last line states the figures.
"""
import argparse, asyncio, os, statistics, sys, time

from tunix_agentic.sandbox import LocalSandbox, SandboxConfig

CODE = 'print(1+1)'


async def raw_once():
    p = await asyncio.create_subprocess_exec(sys.executable, '-c', CODE, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, _ = await p.communicate()
    assert out == b'2\n', out


async def sbx_once(sbx):
    r = await sbx.run(CODE)
    assert (r.status, r.stdout) == ('ok', '2\n'), r


async def latencies(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); await fn(); ts.append(time.perf_counter() - t0)
    return ts


async def throughput(fn, n, c):
    sem = asyncio.Semaphore(c)
    async def one():
        async with sem: await fn()
    t0 = time.perf_counter(); await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def main(a):
    sbx = LocalSandbox(SandboxConfig(timeout_s=30))
    t0 = time.perf_counter(); await asyncio.to_thread(sbx.server)
    print(f'fork server start: {(time.perf_counter() - t0) * 1e3:.0f} ms')
    iso = (await sbx.run('pass')).isolation
    print(f'sandbox isolation: {iso}')
    kinds = {'raw': raw_once, 'sandbox': lambda: sbx_once(sbx)}
    lat, tp = {k: [] for k in kinds}, {k: [] for k in kinds}
    for _ in range(3): await raw_once(); await sbx_once(sbx)  # warm the page cache
    for rnd in range(a.rounds):
        for _ in range(a.n):  # latency: alternate the kinds call by call
            for k, fn in kinds.items(): lat[k] += await latencies(fn, 1)
        for k, fn in kinds.items(): tp[k].append(await throughput(fn, a.n, a.concurrency))
        for k in kinds:
            print(f'round {rnd} {k:8s}: p50 {pct(lat[k][-a.n:], 50) * 1e3:6.1f} ms, p95 '
                  f'{pct(lat[k][-a.n:], 95) * 1e3:6.1f} ms, {tp[k][-1]:6.1f} exec/s at concurrency '
                  f'{a.concurrency}')
    s = {k: (pct(lat[k], 50) * 1e3, pct(lat[k], 95) * 1e3, statistics.median(tp[k])) for k in kinds}
    (rp50, rp95, rtp), (sp50, sp95, stp) = s['raw'], s['sandbox']
    print(f'RESULT bench/sandbox.py: print(1+1), {a.rounds}x{a.n} sequential + {a.rounds}x{a.n} at '
          f'concurrency {a.concurrency}, cpus={os.cpu_count()}: sandbox p50 {sp50:.1f} ms / p95 '
          f'{sp95:.1f} ms, {stp:.1f} exec/s; raw python -c p50 {rp50:.1f} ms / p95 {rp95:.1f} ms, '
          f'{rtp:.1f} exec/s; ratio sandbox/raw: p50 {sp50 / rp50:.2f}x, p95 {sp95 / rp95:.2f}x, '
          f'throughput {stp / rtp:.2f}x (targets: p50 <= 15 ms, throughput >= 3x)')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=60)
    ap.add_argument('--concurrency', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=3)
    asyncio.run(main(ap.parse_args()))
