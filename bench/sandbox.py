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

CPU per call counts the trainer, the fork server and every process of the call (W, R, U) for the
sandbox, the trainer and the child for the bare spawn; the kernel's deferred work (network namespace
teardown) is not in it (nor, for bwrap, the processes its PID namespace's pid 1 leaves to the kernel,
so its CPU column is not comparable). Throughput phases are interleaved in chunks of 10 calls per kind, so load
from other processes on the machine hits both alike. `--bwrap` adds bubblewrap (spawn per call:
`bwrap --unshare-all ... python -c`), for comparison only.

Usage: python bench/sandbox.py [--n 60] [--concurrency 4] [--rounds 3] [--pool 4] [--bwrap]
The last line states the figures.
"""
import argparse, asyncio, os, shutil, statistics, sys, time

from tunix_agentic.tools.sandbox import LocalSandbox, SandboxConfig

CODE = 'print(1+1)'


async def raw_once():
    p = await asyncio.create_subprocess_exec(sys.executable, '-c', CODE, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, _ = await p.communicate()
    assert out == b'2\n', out


BWRAP = ['bwrap', '--unshare-all', '--die-with-parent', '--new-session', '--ro-bind', '/', '/',
         '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--cap-drop', 'ALL']


async def bwrap_once():
    p = await asyncio.create_subprocess_exec(*BWRAP, sys.executable, '-c', CODE, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, err = await p.communicate()
    assert out == b'2\n', (out, err)


async def sbx_once(sbx):
    r = await sbx.run(CODE)
    assert (r.status, r.stdout) == ('ok', '2\n'), r


async def latencies(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); await fn(); ts.append(time.perf_counter() - t0)
    return ts


async def throughput(fn, n, c):
    "Seconds for n calls at concurrency c."
    sem = asyncio.Semaphore(c)
    async def one():
        async with sem: await fn()
    t0 = time.perf_counter(); await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - t0


def cpu_ms(server_pid=None):
    "CPU ms so far of this process, its reaped children, and the fork server with its children."
    t = os.times(); ms = (t.user + t.system + t.children_user + t.children_system) * 1e3
    if server_pid:
        f = open(f'/proc/{server_pid}/stat').read().rsplit(')', 1)[1].split()
        ms += sum(int(x) for x in f[11:15]) * 1e3 / os.sysconf('SC_CLK_TCK')
    return ms


def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def main(a):
    sbx = LocalSandbox(SandboxConfig(timeout_s=30, pool_size=a.pool))
    t0 = time.perf_counter(); srv = await asyncio.to_thread(sbx.server)
    print(f'fork server start: {(time.perf_counter() - t0) * 1e3:.0f} ms')
    iso = (await sbx.run('pass')).isolation
    print(f'sandbox isolation: {iso}')
    kinds = {'raw': raw_once, 'sandbox': lambda: sbx_once(sbx)}
    if a.bwrap and shutil.which('bwrap'): kinds['bwrap'] = bwrap_once
    lat, secs, cpu = ({k: [] for k in kinds} for _ in range(3))
    for _ in range(3):
        for fn in kinds.values(): await fn()  # warm the page cache
    for rnd in range(a.rounds):
        for _ in range(a.n):  # latency: alternate the kinds call by call
            for k, fn in kinds.items(): lat[k] += await latencies(fn, 1)
        for _ in range(max(1, a.n // 10)):  # throughput: alternate chunks of 10 calls
            for k, fn in kinds.items():
                c0 = cpu_ms(srv.proc.pid)
                secs[k].append(await throughput(fn, 10, a.concurrency))
                cpu[k].append((cpu_ms(srv.proc.pid) - c0) / 10)
        for k in kinds:
            print(f'round {rnd} {k:8s}: p50 {pct(lat[k][-a.n:], 50) * 1e3:6.1f} ms, p95 '
                  f'{pct(lat[k][-a.n:], 95) * 1e3:6.1f} ms, {10 * len(secs[k]) / sum(secs[k]):6.1f} '
                  f'exec/s at concurrency {a.concurrency} (so far), {statistics.median(cpu[k]):5.1f} '
                  'ms CPU per call')
    s = {k: (pct(lat[k], 50) * 1e3, pct(lat[k], 95) * 1e3, 10 * len(secs[k]) / sum(secs[k]),
             statistics.median(cpu[k])) for k in kinds}
    (rp50, rp95, rtp, rcpu), (sp50, sp95, stp, scpu) = s['raw'], s['sandbox']
    extra = ''
    if 'bwrap' in s:
        bp50, bp95, btp, bcpu = s['bwrap']
        extra = f'; bwrap spawn p50 {bp50:.1f} ms, {btp:.1f} exec/s ({btp / rtp:.2f}x)'
    print(f'RESULT bench/sandbox.py: print(1+1), {a.rounds}x{a.n} sequential + {a.rounds}x{a.n} at '
          f'concurrency {a.concurrency}, cpus={os.cpu_count()}: sandbox p50 {sp50:.1f} ms / p95 '
          f'{sp95:.1f} ms, {stp:.1f} exec/s, {scpu:.1f} ms CPU per call; raw python -c p50 '
          f'{rp50:.1f} ms / p95 {rp95:.1f} ms, {rtp:.1f} exec/s, {rcpu:.1f} ms CPU; ratio '
          f'sandbox/raw: p50 {sp50 / rp50:.2f}x, p95 {sp95 / rp95:.2f}x, throughput {stp / rtp:.2f}x, '
          f'CPU {scpu / rcpu:.2f}x{extra}; pool {a.pool}, load {os.getloadavg()[0]:.1f} (targets: p50 <= 15 ms, throughput >= 3x)')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=60)
    ap.add_argument('--concurrency', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--pool', type=int, default=SandboxConfig.pool_size, help='ready launchers')
    ap.add_argument('--bwrap', action='store_true', help='also time bubblewrap (if installed)')
    asyncio.run(main(ap.parse_args()))
