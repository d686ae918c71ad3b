"""Benchmark: the local sandbox (warm fork server, fresh namespaces per call) against a bare
`python -c` spawn, in the same run.

For each of (a) bare `python -c 'print(1+1)'` subprocesses (same interpreter, asyncio, no isolation)
and (b) `LocalSandbox.run('print(1+1)')` (fork server: a spare reaper cloned by its spawner straight
into new user/mount/net/IPC/UTS/PID namespaces and a cgroup (a launcher process first where clone(2)
with namespace flags is refused), private tmpfs, own /proc, seccomp, rlimits, capped output), N
sequential runs give
p50/p95 latency, and stretches of `--stretch-s` seconds with C calls always in flight give
executions/s. The kinds are interleaved (latency: call by call; throughput: stretch by stretch) so
that load from other processes on the machine hits them alike.
Both are spawned the same way (asyncio, pipes, start_new_session=True for the bare spawn). The fork
server is started before timing (once per process; its start-up is printed). Target (issues 11,
26): throughput at concurrency 4 >= 3x the bare spawn on a quiet machine.

CPU per call counts the trainer, the fork server, its spawner and every process of the call (R and
U; W too where there is a launcher) for the sandbox, the trainer and the child for the bare spawn; the kernel's deferred work (network namespace
teardown) is not in it (nor, for bwrap, the processes its PID namespace's pid 1 leaves to the kernel,
so its CPU column is not comparable). A throughput stretch starts calls until its time is up and
counts the last ones' finish: it measures the steady state, not the ramp of a few calls, and a
warm pool readies at most `--pool` calls between stretches (off the clock), a few percent of a
stretch. (Chunks of 10 calls, before 2026-11-27, were a third ramp and drain, and up to 4 of
their 10 calls had been readied off the clock.) Each adjacent pair of stretches gives a ratio:
their spread is printed beside the overall figure. `--bwrap` adds bubblewrap (spawn per call:
`bwrap --unshare-all ... python -c`), for comparison only. `--nosite` adds `python -S -c`: what a bare spawn
costs without site and .pth files (an editable install's finder alone imports pathlib and re: about 10 of
the 22 ms of a `python -c` in this project's .venv), the floor of any Python spawn.

Usage: python bench/sandbox.py [--n 40] [--concurrency 1 4] [--rounds 2] [--stretches 3] [--stretch-s 1]
       [--pool 4] [--bwrap] [--nosite]
       [--before CHECKOUT]  (e.g. `git worktree add --detach /tmp/before 5254d66`: the same calls
       through that checkout's fork server, interleaved with the others)
The sandbox runs with every protection of issue 26 (allowlist root, seccomp allowlist, fresh keyring,
a cgroup per call where one is delegated); the load average is printed at start and end.
The last line states the figures.
"""
import argparse, asyncio, logging, os, shutil, statistics, sys, time
from pathlib import Path

from tunix_agentic.tools.sandbox import LocalSandbox, SandboxConfig

CODE = 'print(1+1)'


async def raw_once(*flags):
    p = await asyncio.create_subprocess_exec(sys.executable, *flags, '-c', CODE, stdout=asyncio.subprocess.PIPE,
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


async def stretch(fn, c, secs):
    "(calls, seconds): c calls always in flight, new ones started until `secs` have passed."
    n, t0 = 0, time.perf_counter()
    async def worker():
        nonlocal n
        while time.perf_counter() - t0 < secs: await fn(); n += 1
    await asyncio.gather(*(worker() for _ in range(c)))
    return n, time.perf_counter() - t0


def tree_ms(pid):
    "CPU ms of `pid`, its reaped children and, recursively, its live ones (spawner, launchers)."
    try:
        f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
        kids = open(f'/proc/{pid}/task/{pid}/children').read().split()
    except OSError: return 0.0
    return sum(int(x) for x in f[11:15]) * 1e3 / os.sysconf('SC_CLK_TCK') + sum(tree_ms(k) for k in kids)


def cpu_ms(server_pids=()):
    "CPU ms so far of this process, its reaped children, and the fork servers' whole trees."
    t = os.times(); ms = (t.user + t.system + t.children_user + t.children_system) * 1e3
    return ms + sum(tree_ms(p) for p in server_pids)


def before_sandbox(checkout, pool):
    "A sandbox whose fork server runs from another checkout's tools (the code before a change)."
    from tunix_agentic.tools import forkserver
    tools = Path(checkout).resolve() / 'tunix_agentic' / 'tools'
    path = next(p for p in (tools / 'cage_loop.py', tools / 'cage_server.py') if p.exists())
    now, forkserver.SERVER_PATH = forkserver.SERVER_PATH, path
    try:  # `expose` differs, so it gets a fork server of its own
        sbx = LocalSandbox(SandboxConfig(timeout_s=30, pool_size=pool, expose=(str(tools),)))
        sbx.server()
    finally: forkserver.SERVER_PATH = now
    return sbx


def rate(runs):
    "Calls per second over (calls, seconds) stretches."
    return sum(n for n, _ in runs) / sum(t for _, t in runs)


def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def main(a):
    load0 = os.getloadavg()
    sbx = LocalSandbox(SandboxConfig(timeout_s=30, pool_size=a.pool))
    t0 = time.perf_counter(); srv = await asyncio.to_thread(sbx.server)
    print(f'fork server start: {(time.perf_counter() - t0) * 1e3:.0f} ms; load average at start '
          f'{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} cpus (a shared machine: '
          'other sessions load it too, so compare the two kinds within this run only)')
    r = await sbx.run('pass')
    iso = r.isolation
    print(f'sandbox: {r.status}{" " + r.message if r.message else ""}; protections: ' + ', '.join(
        k for k in ('userns', 'mountns', 'netns', 'ipcns', 'utsns', 'pidns', 'fs_view', 'private_tmp',
                    'own_proc', 'seccomp', 'cgroup') if iso.get(k)) + f"; missing {iso.get('missing')}")
    kinds, pids = {'raw': raw_once, 'sandbox': lambda: sbx_once(sbx)}, [srv.proc.pid]
    if a.nosite: kinds['nosite'] = lambda: raw_once('-S')
    if a.before:  # the same calls through the fork server of another checkout
        logging.getLogger('tunix_agentic.tools.sandbox').setLevel(logging.ERROR)  # older 'missing'
        old = await asyncio.to_thread(before_sandbox, a.before, a.pool)
        kinds['before'], pids = (lambda: sbx_once(old)), pids + [old.server().proc.pid]
    if a.bwrap and shutil.which('bwrap'): kinds['bwrap'] = bwrap_once
    lat = {k: [] for k in kinds}
    secs = {(k, c): [] for k in kinds for c in a.concurrency}
    cpu = {k: [] for k in kinds}
    for _ in range(3):
        for fn in kinds.values(): await fn()  # warm the page cache
    for rnd in range(a.rounds):
        for _ in range(a.n):  # latency: alternate the kinds call by call
            for k, fn in kinds.items(): lat[k] += await latencies(fn, 1)
        for c in a.concurrency:
            for _ in range(a.stretches):  # throughput: alternate stretches of a.stretch_s seconds
                for k, fn in kinds.items():
                    c0 = cpu_ms(pids)
                    secs[k, c].append(await stretch(fn, c, a.stretch_s))
                    cpu[k].append((cpu_ms(pids) - c0) / secs[k, c][-1][0])
        for k in kinds:
            tp = ', '.join(f'{rate(secs[k, c]):6.1f} exec/s at {c}' for c in a.concurrency)
            print(f'round {rnd} {k:8s}: p50 {pct(lat[k][-a.n:], 50) * 1e3:6.1f} ms, p95 '
                  f'{pct(lat[k][-a.n:], 95) * 1e3:6.1f} ms, {tp} (so far), '
                  f'{statistics.median(cpu[k]):5.1f} ms CPU per call')
    p50 = {k: pct(lat[k], 50) * 1e3 for k in kinds}
    tput = {(k, c): rate(v) for (k, c), v in secs.items()}
    spread = {c: sorted((s / ss) / (r / rs) for (s, ss), (r, rs) in zip(secs['sandbox', c], secs['raw', c]))
              for c in a.concurrency}  # adjacent stretches: sandbox/raw
    load1 = os.getloadavg()
    parts = [f"sandbox p50 {p50['sandbox']:.1f} ms vs raw python -c {p50['raw']:.1f} ms "
             f"({p50['raw'] / p50['sandbox']:.1f}x faster)"]
    for c in a.concurrency:
        parts.append(f"concurrency {c}: sandbox {tput['sandbox', c]:.1f} vs raw {tput['raw', c]:.1f} "
                     f"exec/s ({tput['sandbox', c] / tput['raw', c]:.2f}x; {len(spread[c])} pairs of "
                     f"stretches {spread[c][0]:.2f}-{spread[c][-1]:.2f}x)")
    if 'before' in kinds:
        parts += [f"before ({a.before}): p50 {p50['before']:.1f} ms, " + ', '.join(
            f"concurrency {c} {tput['before', c]:.1f} exec/s ({tput['before', c] / tput['raw', c]:.2f}x raw)"
            for c in a.concurrency)]
    if 'nosite' in kinds:
        parts += ['against python -S -c (no site: no .pth files, e.g. an editable install\'s finder) ' +
                  ', '.join(f"concurrency {c} {tput['nosite', c]:.1f} exec/s (sandbox {tput['sandbox', c] / tput['nosite', c]:.2f}x)"
                            for c in a.concurrency)]
    parts.append('CPU per call ' + ', '.join(f'{k} {statistics.median(v):.1f} ms' for k, v in cpu.items()))
    if 'bwrap' in kinds: parts.append(f"bwrap p50 {p50['bwrap']:.1f} ms")
    print(f'RESULT bench/sandbox.py: print(1+1), {a.rounds}x{a.n} sequential + {a.rounds}x{a.stretches} '
          f'stretches of {a.stretch_s:g} s per concurrency, '
          f'cpus={os.cpu_count()}, pool {a.pool}: ' + '; '.join(parts) +
          f'; load average {load0[0]:.2f} at start, {load1[0]:.2f} at end (shared machine)')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=40)
    ap.add_argument('--concurrency', type=int, nargs='+', default=[1, 4])
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--stretches', type=int, default=3, help='throughput stretches per kind, round, concurrency')
    ap.add_argument('--stretch-s', type=float, default=1.0, help='seconds of one throughput stretch')
    ap.add_argument('--pool', type=int, default=SandboxConfig.pool_size, help='ready launchers')
    ap.add_argument('--bwrap', action='store_true', help='also time bubblewrap (if installed)')
    ap.add_argument('--nosite', action='store_true', help='also time `python -S -c` (no site, no .pth)')
    ap.add_argument('--before', help="a checkout of the code before a change: its fork server is timed too")
    asyncio.run(main(ap.parse_args()))
