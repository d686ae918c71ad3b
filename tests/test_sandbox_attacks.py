"""Attack suite for tunix_agentic.tools.sandbox.LocalSandbox: every attack must be contained, this (trainer)
process must stay alive, and the next call must still print 2.

Runs as whoever runs pytest; `test_attacks_as_unprivileged_user` (root only) runs this same file again
as a throwaway unprivileged user made with `useradd`, so CI covers both privilege levels. Attacks
whose defence needs something this machine lacks (user namespaces, ...) skip and say what.
"""
import asyncio, ctypes, dataclasses, json, os, pwd, resource, shutil, socket, stat, subprocess, sys, tempfile, time, uuid

import pytest

from tunix_agentic.tools.sandbox import LocalSandbox, SandboxConfig

CFG = SandboxConfig.tiny(timeout_s=10.0, memory_mb=256, max_output_bytes=8192, disk_mb=32)
DOCKER = bool(os.environ.get('TUNIX_SBX_DOCKER'))  # set by test_attacks_under_docker_profile
WHO = ('root' if os.geteuid() == 0 else 'unprivileged') + (' docker-like' if DOCKER else '')


def run(coro):
    return asyncio.run(coro)


def _userns_changes_nothing() -> bool:
    "Do calls get just the same isolation whether or not the sandbox asks for user namespaces?"
    boxes = [LocalSandbox(dataclasses.replace(CFG, userns=u, isolation='best_effort'))
             for u in (True, False)]
    isos = [run(b.run('pass')).isolation for b in boxes]
    same = lambda d: {k: v for k, v in d.items() if k != 'memory_peak_mb'}
    return same(isos[0]) == same(isos[1])


# under the Docker-like profile seccomp refuses every namespace: where asking for user namespaces
# then changes nothing, the attacks run once (as 'no_userns'), not twice over the same calls
USERNS = [False] if DOCKER and _userns_changes_nothing() else [True, False]


@pytest.fixture(scope='module', params=USERNS, ids=lambda u: 'userns' if u else 'no_userns')
def sbx(request):
    "The sandbox, with user namespaces and as on a machine without them (weaker isolation accepted)."
    if request.param and not DOCKER:  # docker-like: the default refuses
        s = LocalSandbox(CFG)  # so does it without a memory bound (a non-root trainer, no cgroup)
        if 'cgroup' not in run(s.run('pass')).isolation.get('missing', []): return s
    return LocalSandbox(dataclasses.replace(CFG, userns=request.param, isolation='best_effort'))


@pytest.fixture(scope='module')
def iso(sbx):
    "What a call gets on this machine."
    return run(sbx.run('pass')).isolation


def needs(iso, *keys):
    "Skip unless the calls get every key (a tuple: any one of its keys, e.g. a namespace or Landlock)."
    missing = [k for k in keys if not any(iso.get(a) for a in (k if isinstance(k, tuple) else (k,)))]
    if missing: pytest.skip(f'{WHO}, userns={bool(iso.get("userns"))}: calls get no {missing} '
                            f'({iso.get("errors")})')


def next_call_works(sbx):
    os.kill(os.getpid(), 0)  # we are alive
    r = run(sbx.run('print(1 + 1)'))
    assert (r.status, r.stdout) == ('ok', '2\n'), r


def host_comms(tag):
    "Host pids whose process name is `tag`."
    out = []
    for p in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{p}/comm') as f:
                if f.read().strip() == tag: out.append(int(p))
        except OSError: pass
    return out


def no_survivors(tag, wait=5.0):
    t0 = time.monotonic()
    while host_comms(tag) and time.monotonic() - t0 < wait: time.sleep(0.05)
    return host_comms(tag) == []


NAME = 'import ctypes\nctypes.CDLL(None).prctl(15, b"{tag}", 0, 0, 0)\n'  # PR_SET_NAME


@pytest.mark.timeout(60)
def test_infinite_loop(sbx):
    r = run(sbx.run('while True: pass', timeout=1.0))
    assert (r.status, r.message) == ('timeout', 'timed out after 1 s'), r
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_fork_bomb(sbx, iso):
    needs(iso, 'reaper' if not iso.get('subreaper') else 'subreaper')
    tag = 'tx' + uuid.uuid4().hex[:10]
    code = NAME.format(tag=tag) + 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n'
    r = run(sbx.run(code, timeout=2.0))
    assert r.status in ('timeout', 'killed', 'error'), r
    assert no_survivors(tag), 'fork bomb processes survived the call'
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_setsid_survivor(sbx, iso):
    "A grandchild in its own session, parent-death signal cleared, sleeping: dies with the call."
    needs(iso, 'reaper' if not iso.get('subreaper') else 'subreaper')
    tag = 'tx' + uuid.uuid4().hex[:10]
    code = ('import ctypes, os, time\nif os.fork() == 0:\n    os.setsid(); ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n'
            '    if os.fork() == 0:\n' + ''.join('        ' + l + '\n' for l in NAME.format(tag=tag).splitlines())
            + '        time.sleep(60)\n    os._exit(0)\nprint("parent done")')
    r = run(sbx.run(code))
    assert (r.status, r.stdout) == ('ok', 'parent done\n'), r
    assert no_survivors(tag), 'a detached grandchild outlived the call'
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_abort_reported(sbx):
    r = run(sbx.run('import os\nprint("x", flush=True)\nos.abort()'))
    assert (r.status, r.message, r.return_code, r.stdout) == ('killed', 'killed by SIGABRT', 134, 'x\n'), r
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_memory_bomb(sbx):
    r = run(sbx.run('a = []\nwhile True: a.append(bytearray(16 * 2**20))', timeout=30))
    assert r.status in ('error', 'killed'), r
    if r.status == 'error': assert 'MemoryError' in r.stderr
    next_call_works(sbx)


@pytest.mark.timeout(240)
def test_100mb_output(sbx):
    # 0.2 s here; the generous limits are for slow CI machines (one timed out at 60 s)
    t0 = time.monotonic()
    r = run(sbx.run('import sys\nfor _ in range(100):\n    sys.stdout.write("x" * 1_000_000)\n'
                    'sys.stdout.write("THE END")', timeout=120.0))
    print(f'100 MB of output took {time.monotonic() - t0:.1f} s')
    assert r.status == 'ok', r
    assert r.stdout_bytes == 100_000_007 and len(r.stdout) < CFG.max_output_bytes + 100
    assert r.stdout.startswith('xxxx') and r.stdout.endswith('THE END') and 'bytes cut' in r.stdout
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_network(sbx, iso):
    needs(iso, ('netns', 'landlock_tcp', 'net_filter'))
    srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(8); srv.setblocking(False)
    port = srv.getsockname()[1]
    code = (f'import socket\nres = []\nfor addr in [("127.0.0.1", {port}), ("8.8.8.8", 53), ("1.1.1.1", 443)]:\n'
            '    try: socket.create_connection(addr, timeout=1); res.append("CONNECTED")\n'
            '    except OSError as e: res.append(type(e).__name__)\nprint(res)')
    r = run(sbx.run(code))
    assert r.status == 'ok' and 'CONNECTED' not in r.stdout, r
    with pytest.raises(BlockingIOError): srv.accept()  # nobody reached our listener
    srv.close()
    next_call_works(sbx)


@pytest.fixture
def visible_dir(tmp_path):
    "A world-writable dir that the sandbox's read-only view of the host shows (not under /tmp)."
    d = os.environ.get('TUNIX_SBX_VISIBLE_DIR')
    if d:
        yield d
        return
    if os.geteuid() == 0:
        d = tempfile.mkdtemp(prefix='tunix_sbx_visible_', dir='/var/lib')
        os.chmod(d, 0o1777)
        yield d
        shutil.rmtree(d, ignore_errors=True)
        return
    yield str(tmp_path)


@pytest.mark.timeout(60)
def test_host_unix_socket(sbx, iso, visible_dir):
    needs(iso, 'seccomp')
    path = os.path.join(visible_dir, f's{uuid.uuid4().hex[:8]}')
    abstract = f'\0tunix_{uuid.uuid4().hex[:8]}'
    servers = []
    for addr in (path, abstract):
        s = socket.socket(socket.AF_UNIX); s.bind(addr); s.listen(4); s.setblocking(False)
        servers.append(s)
    os.chmod(path, 0o777)
    code = (f'import os, socket\nprint("visible", os.path.exists({path!r}))\n'
            f'for addr in [{path!r}, {abstract!r}]:\n'
            '    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):\n'
            '        try: s = socket.socket(socket.AF_UNIX, kind); s.connect(addr); print("CONNECTED")\n'
            '        except OSError as e: print("refused", type(e).__name__)\n'
            'try:\n    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"x", '
            f'{path!r}); print("SENT")\nexcept OSError as e: print("refused", type(e).__name__)\n'
            'a, b = socket.socketpair(); a.send(b"ok"); print("pair", b.recv(2))')
    r = run(sbx.run(code))
    assert r.status == 'ok' and 'CONNECTED' not in r.stdout and 'SENT' not in r.stdout, r
    assert "pair b'ok'" in r.stdout, r  # connected stream pairs (asyncio, multiprocessing) still work
    for s in servers:
        with pytest.raises(BlockingIOError): s.accept()
        s.close()
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_write_outside_scratch(sbx, iso, tmp_path, visible_dir):
    needs(iso, ('fs_view', 'landlock'), ('private_tmp', 'landlock'))
    tag = uuid.uuid4().hex
    targets = [f'/tmp/tunix_evil_{tag}', str(tmp_path / f'evil_{tag}'), f'/dev/shm/tunix_evil_{tag}',
               os.path.join(os.getcwd(), f'evil_{tag}'), f'/var/tmp/tunix_evil_{tag}',
               os.path.join(visible_dir, f'evil_{tag}'), os.path.expanduser(f'~/evil_{tag}')]
    code = (f'import os\nfor p in {targets!r}:\n'
            '    try:\n        open(p, "w").write("x"); print("wrote", p)\n'
            '    except OSError as e: print("refused", p, type(e).__name__)\n'
            'open("inside.txt", "w").write("ok"); print("inside", open("inside.txt").read())')
    r = run(sbx.run(code))
    assert r.status == 'ok' and 'inside ok' in r.stdout, r
    assert [p for p in targets if os.path.exists(p)] == []  # /tmp etc. were the call's own tmpfs
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_signal_trainer(sbx, iso):
    needs(iso, ('pidns', 'landlock_scope', 'process_guard'), ('own_proc', 'landlock_scope', 'process_guard'))
    me, pg = os.getpid(), os.getpgid(0)
    code = ('import os, signal\nres = []\n'
            f'for f, a in [(os.kill, {me}), (os.killpg, {pg}), (os.kill, os.getppid()), (os.kill, 1), (os.kill, -1)]:\n'
            '    try: f(a, signal.SIGKILL); res.append("sent")\n'
            '    except OSError as e: res.append(type(e).__name__)\nprint(res, flush=True)')
    r = run(sbx.run(code))
    os.kill(me, 0)  # still here
    assert r.status in ('ok', 'killed'), r  # kill(-1) may take the code itself down
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_read_trainer_secrets(sbx, iso, monkeypatch):
    "A planted HF_TOKEN: not in the code's environment, not readable through /proc."
    needs(iso, ('own_proc', 'landlock'))
    secret = 'hf_' + uuid.uuid4().hex
    monkeypatch.setenv('HF_TOKEN', secret)
    code = ('import os\nprint(dict(os.environ))\n'  # only preloaded modules (pyenv under /root)
            'try: procs = [f"/proc/{q}/environ" for q in os.listdir("/proc") if q.isdigit()]\n'
            'except OSError as e: procs = []; print("/proc", type(e).__name__)\n'
            f'for p in procs + ["/proc/{os.getpid()}/environ", "/proc/{os.getpid()}/cmdline"]:\n'
            '    try: print(p, open(p, "rb").read())\n'
            '    except OSError as e: print(p, type(e).__name__)\n'
            f'try: print(open("/proc/{os.getpid()}/mem", "rb").read(16))\nexcept OSError as e: print(type(e).__name__)')
    r = run(sbx.run(code))
    assert r.status == 'ok', r
    assert secret not in r.stdout + r.stderr and 'HF_TOKEN' not in r.stdout
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_concurrent_calls_cannot_read_each_other(sbx, iso):
    needs(iso, 'private_tmp', 'pidns')
    tag = uuid.uuid4().hex
    writer = (f'import os, time\nfor d in ("/tmp", "/var/tmp", "/dev/shm"): open(f"{{d}}/secret_{tag}", "w").write("{tag}")\n'
              'time.sleep(2.5)\nprint(sorted(os.listdir("/tmp")))')
    reader = ('import glob, os, time\ntime.sleep(0.8)\nfound = []\n'
              'for pat in ["/tmp/*", "/var/tmp/*", "/dev/shm/*", "/proc/*/cwd/*", "/proc/*/root/tmp/*", "/tmp/../*/*"]:\n'
              f'    found += [p for p in glob.glob(pat) if "{tag}" in p]\n'
              'print("FOUND" if found else "nothing", found)')
    async def go():
        return await asyncio.gather(sbx.run(writer), sbx.run(reader))
    w, rd = run(go())
    assert w.status == 'ok' and f'secret_{tag}' in w.stdout, w
    assert rd.status == 'ok' and rd.stdout.startswith('nothing'), rd
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_sysv_ipc_does_not_persist(sbx, iso):
    "A SysV segment dies with its IPC namespace; without one, seccomp refuses SysV IPC."
    needs(iso, ('ipcns', 'seccomp'))
    key = 0x7a000000 + int(uuid.uuid4().hex[:5], 16)
    shm = ('import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n'
           f'sid = libc.shmget({key}, 4096, {{flags}})\n')
    put = shm.format(flags='0o1000 | 0o666') + (
        'p = libc.shmat(sid, None, 0)\nctypes.memmove(p, b"left behind", 11)\nlibc.shmdt(ctypes.c_void_p(p))\n'
        'print("created", sid >= 0)')
    get = shm.format(flags='0') + (
        'if sid < 0: print("gone", ctypes.get_errno())\nelse:\n'
        '    p = libc.shmat(sid, None, 0); print("FOUND", ctypes.string_at(p, 11))')
    a, b = run(sbx.run(put)), run(sbx.run(get))
    if not iso.get('ipcns'): assert 'created True' not in a.stdout, a
    else: assert (a.status, a.stdout) == ('ok', 'created True\n'), a
    assert b.status == 'ok' and b.stdout.startswith('gone'), b
    with open('/proc/sysvipc/shm') as f: assert f'{key:>10}' not in f.read()
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_fill_scratch(sbx, iso):
    "2 GB into the scratch dir and /dev/shm: stops at the call's disk_mb, host disk untouched."
    if not iso.get('private_tmp'):  # no tmpfs of its own: only RLIMIT_FSIZE per file, and it says so
        assert 'disk_bound' in iso['missing'], iso
    needs(iso, 'private_tmp')
    code = ('import os\nn = 0\nchunk = b"x" * (1 << 20)\ntry:\n    for i in range(2048):\n'
            '        d = "/dev/shm" if i % 2 else "."\n'
            '        with open(f"{d}/f{i // 60}", "ab") as f: f.write(chunk); f.flush()\n'
            '        n += 1\nexcept OSError as e: print("stopped", e.errno, n)\nelse: print("WROTE 2 GB")')
    r = run(sbx.run(code, timeout=20))
    assert r.status == 'ok' and r.stdout.startswith('stopped 28'), r  # ENOSPC
    assert int(r.stdout.split()[-1]) <= CFG.disk_mb
    next_call_works(sbx)


@pytest.mark.timeout(90)
def test_process_limit_is_per_call(sbx, iso):
    "One call holding its whole process limit does not stop other calls from forking or threading."
    needs(iso, 'nproc_per_call')
    sbx = LocalSandbox(dataclasses.replace(sbx.config, memory_mb=1024))  # threads reserve stacks
    hog = ('import os, time\nn = 0\nwhile True:\n    try:\n        if os.fork() == 0: time.sleep(30); os._exit(0)\n'
           '        n += 1\n    except OSError: break\nprint("hog", n, flush=True)\ntime.sleep(4)')
    other = ('import _thread, os, time\ntime.sleep(1.0)\nlock = _thread.allocate_lock(); lock.acquire()\n'
             '_thread.start_new_thread(lock.release, ()); lock.acquire()\n'
             'for _ in range(4): _thread.start_new_thread(time.sleep, (0.5,))\n'
             'r, w = os.pipe(); pid = os.fork()\n'
             'if pid == 0: os.dup2(w, 1); os.execv("/bin/echo", ["echo", "sub"])\n'
             'os.close(w); os.waitpid(pid, 0); print(os.read(r, 100).decode().strip())')
    # built-in modules only: where Landlock is the filesystem bound, a Python under a dir others
    # cannot enter (pyenv in /root) offers the call nothing but what the server preloaded
    async def go():
        return await asyncio.gather(sbx.run(hog), *(sbx.run(other) for _ in range(4)))
    h, *rest = run(go())
    assert h.status == 'ok' and h.stdout.startswith('hog ') and int(h.stdout.split()[1]) >= sbx.config.max_processes - 3, h
    assert [(r.status, r.stdout) for r in rest] == [('ok', 'sub\n')] * 4, rest
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_calls_get_their_own_uid(sbx, iso):
    "Root without a user namespace: concurrent calls run as distinct uids of the pool, never root."
    if not iso.get('uid_pool'): needs(iso, 'userns')  # with one: its own count per namespace
    code = 'import os, time\ntime.sleep(0.5)\nprint(os.getuid(), os.getgid(), os.environ["USER"])'
    async def go():
        return await asyncio.gather(*(sbx.run(code) for _ in range(3)))
    rs = run(go())
    assert [r.status for r in rs] == ['ok'] * 3, rs
    uids = [int(r.stdout.split()[0]) for r in rs]
    assert {r.stdout.split()[2] for r in rs} == {'sandbox'}  # getpass.getuser() without a passwd entry
    if iso.get('uid_pool'):
        assert len(set(uids)) == 3 and min(uids) >= sbx.config.uid_pool, uids
    else: assert set(uids) == {sbx.config.uid}, uids  # inside its own user namespace
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_hidden_dirs(sbx, iso):
    needs(iso, 'fs_view')
    r = run(sbx.run('import os\nfor d in ("/root", "/home", "/run"):\n    print(d, sorted(os.listdir(d)) if os.path.isdir(d) else None)'))
    assert r.status == 'ok', r
    lines = dict(l.split(' ', 1) for l in r.stdout.splitlines())
    assert lines['/home'] in ('[]', 'None') and lines['/run'] in ('[]', 'None'), r.stdout
    assert all(n in ('.pyenv', '.local') for n in eval(lines['/root'] or '[]') or []), r.stdout
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_strict_runs(sbx, iso):
    "isolation='strict' runs wherever the fork server got everything (root or not)."
    r = run(LocalSandbox(dataclasses.replace(sbx.config, isolation='strict')).run('print(3)'))
    if iso.get('missing'): assert r.status == 'sandbox_error' and 'strict' in r.message, r
    else: assert (r.status, r.stdout) == ('ok', '3\n'), r


# ---- the same file again, as a throwaway unprivileged user -------------------------------------
def _untraversable_top(path):
    "The topmost ancestor of `path` that others cannot enter (e.g. /root holding pyenv), or None."
    parts = os.path.realpath(path).split('/')[1:]
    for i in range(1, len(parts) + 1):
        d = '/' + '/'.join(parts[:i])
        if not os.stat(d).st_mode & stat.S_IXOTH: return d, '/' + '/'.join(parts[:i + 1])
    return None


def _pids_of(uid):
    out = []
    for p in filter(str.isdigit, os.listdir('/proc')):
        try:
            if os.stat(f'/proc/{p}').st_uid == uid: out.append(int(p))
        except OSError: pass
    return out


def _kill_uid(uid):
    "Stop, then kill, every process of `uid` (the throwaway user's, should an attack escape)."
    seen = set()
    for _ in range(50):
        new = [p for p in _pids_of(uid) if p not in seen]
        if not new: break
        for p in new:
            try: os.kill(p, 19)  # SIGSTOP: a stopped process cannot fork
            except OSError: pass
        seen.update(new)
    for p in seen:
        try: os.kill(p, 9)
        except OSError: pass
    return len(seen)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_attacks_as_unprivileged_user(docker_profile_run):
    if os.environ.get('TUNIX_SBX_UNPRIV') or DOCKER: pytest.skip('already a nested run')
    if os.geteuid() != 0: pytest.skip('needs root to create a throwaway user; this run already is one')
    tools = [shutil.which(t) for t in ('useradd', 'userdel', 'runuser', 'unshare')]
    if not all(tools): pytest.skip(f'needs useradd, userdel, runuser and unshare, found {tools}')
    # the nested run under the Docker-like profile (its own test below) goes on meanwhile: both
    # mostly wait on the attacks' timeouts, so together they take the time of the longer one
    docker_profile_run.start()
    user = 'tsbx' + uuid.uuid4().hex[:8]
    subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', user],
                   check=True, capture_output=True)
    visible = tempfile.mkdtemp(prefix='tunix_sbx_visible_', dir='/var/lib'); os.chmod(visible, 0o1777)
    home = tempfile.mkdtemp(prefix='tunix_sbx_user_'); os.chmod(home, 0o777)  # pytest's are 0700
    try:
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', 'HOME': home,
               'TUNIX_SBX_UNPRIV': '1', 'TUNIX_SBX_VISIBLE_DIR': visible, 'JAX_PLATFORMS': 'cpu',
               'PYTHONPATH': os.environ.get('PYTHONPATH', '')}  # this checkout, not an installed one
        cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-x', '-rA',
               '--basetemp', os.path.join(home, 'bt'), os.path.abspath(__file__)]
        # the interpreter may live under a dir others cannot enter (pyenv in /root): in a private
        # mount namespace, cover that dir with a tmpfs that holds only the interpreter's tree
        top = _untraversable_top(sys.base_prefix)
        pre = ''
        if top:
            d, keep = top
            pre = (f'k=$(mktemp -d); mount --bind {keep} "$k"; mount -t tmpfs -o mode=755,size=1m tmpfs {d}; '
                   f'mkdir -p {keep}; mount --move "$k" {keep}; ')
        script = pre + 'exec runuser -u "$0" -- "$@"'
        p = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script, user, *cmd],
                           capture_output=True, text=True, env=env, cwd=home, timeout=280)
        print(p.stdout[-12000:], p.stderr[-2000:])
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        skips = [l for l in p.stdout.splitlines() if l.startswith('SKIPPED')]
        # with user namespaces nothing but a cgroup (none is delegated to a normal user) may be
        # missing; without them, skips say what is missing
        assert all('userns=False' in l or 'nested run' in l or "no ['cgroup']" in l for l in skips), skips
        uid, t0 = pwd.getpwnam(user).pw_uid, time.monotonic()
        while _pids_of(uid) and time.monotonic() - t0 < 10: time.sleep(0.1)  # exits take a moment
        assert _kill_uid(uid) == 0, 'processes of the unprivileged run survived'

    finally:
        left = _kill_uid(pwd.getpwnam(user).pw_uid)
        subprocess.run(['userdel', user], capture_output=True)
        shutil.rmtree(visible, ignore_errors=True); shutil.rmtree(home, ignore_errors=True)
        docker_profile_run.wait()  # no test of this file runs beside a nested run


# ---- issue 26: least privilege by allowlist, memory per call, no silent fallback -----------------
NR = {'x86_64': dict(keyctl=250, add_key=248), 'aarch64': dict(keyctl=219, add_key=217)}.get(os.uname().machine)


@pytest.mark.timeout(60)
def test_default_refuses_without_isolation():
    "No silent fallback: without network/PID/mount isolation the default refuses, naming the setting."
    sbx = LocalSandbox(dataclasses.replace(CFG, userns=False))
    r = run(sbx.run('print(1)'))
    gaps = [k for k in ('mountns', 'netns', 'pidns', 'fs_view', 'private_tmp', 'own_proc', 'cgroup')
            if k in r.isolation.get('missing', [])]
    if not gaps:
        assert (r.status, r.stdout) == ('ok', '1\n'), r
        return
    assert r.status == 'sandbox_error' and r.stdout == '', r
    assert "isolation='best_effort'" in r.message and all(g in r.message for g in gaps), r.message


@pytest.mark.timeout(60)
def test_keyring(sbx, iso):
    "The trainer's session keyring: not readable, nothing planted in it, its key not revoked."
    needs(iso, 'seccomp')
    if NR is None: pytest.skip(f'no syscall numbers for {os.uname().machine}')
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(NR['keyctl'], 1, b'tunix_test_session') < 0:  # JOIN_SESSION_KEYRING
        pytest.skip(f'no keyrings here: errno {ctypes.get_errno()}')
    secret = b'hf_KEYRING_' + uuid.uuid4().hex.encode()
    kid = libc.syscall(NR['add_key'], b'user', b'hf_token', secret, len(secret), -3)
    assert kid > 0, ctypes.get_errno()
    fresh = LocalSandbox(dataclasses.replace(sbx.config, pool_size=1))  # a server started now
    code = (f'import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nb = ctypes.create_string_buffer(256)\n'
            f'for k in ({kid}, -3, -4, -5):\n'
            f'    n = libc.syscall({NR["keyctl"]}, 11, k, b, 256); print("read", k, n, ctypes.get_errno(), b.raw[:max(n, 0)])\n'
            f'print("add", libc.syscall({NR["add_key"]}, b"user", b"planted", b"x", 1, -3), ctypes.get_errno())\n'
            f'print("revoke", libc.syscall({NR["keyctl"]}, 3, {kid}), ctypes.get_errno())\n'
            'try: print(open("/proc/keys").read())\nexcept OSError as e: print("keys", e.errno)')
    r = run(fresh.run(code))
    assert r.status == 'ok', r
    assert secret not in (r.stdout + r.stderr).encode(), r.stdout
    b = ctypes.create_string_buffer(256)
    n = libc.syscall(NR['keyctl'], 11, kid, b, 256)
    assert b.raw[:n] == secret, 'the trainer lost its key'
    assert libc.syscall(NR['keyctl'], 10, -3, b'user', b'planted', 0) < 0, 'a key was planted'


@pytest.mark.timeout(60)
def test_socket_families_allowlist(sbx, iso):
    "Only INET, INET6 and NETLINK sockets; AF_VSOCK, AF_PACKET, AF_ALG, AF_UNIX refused."
    needs(iso, 'seccomp')
    code = ('import socket\nfor fam, kind in [(2, 1), (10, 1), (16, 3), (40, 1), (17, 3), (38, 5), (1, 1), (1, 2)]:\n'
            '    try: socket.socket(fam, kind).close(); print("CREATED", fam)\n'
            '    except OSError as e: print("refused", fam, e.errno)')
    r = run(sbx.run(code))
    assert r.status == 'ok', r
    created = sorted(int(l.split()[1]) for l in r.stdout.splitlines() if l.startswith('CREATED'))
    assert set(created) <= {2, 10, 16}, r.stdout  # 40 = AF_VSOCK
    assert 'refused 40 13' in r.stdout, r.stdout
    next_call_works(sbx)


MEMORY_ATTACKS = {
    'memfd': 'import os\nfds = []\nfor i in range(20):\n    fd = os.memfd_create("m"); os.write(fd, b"\\1" * (32 << 20)); fds.append(fd)\n'
             '    print("held", 32 * (i + 1), flush=True)\n',
    'sysv': 'import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n'
            'for i in range(20):\n    sid = libc.shmget(0, 32 << 20, 0o1600)\n    p = libc.shmat(sid, None, 0)\n'
            '    ctypes.memset(p, 1, 32 << 20); libc.shmdt(ctypes.c_void_p(p))\n    print("held", 32 * (i + 1), flush=True)\n',
    'fork_tree': 'import os, select, time\nr, w = os.pipe(); kids, wrote, dead = [], set(), set()\nfor i in range(8):\n'
                 '    pid = os.fork()\n    if pid == 0:\n'
                 '        b = bytearray(b"\\1") * (80 << 20); os.write(w, bytes([i])); time.sleep(30); os._exit(0)\n'
                 '    kids.append(pid)\nwhile select.select([r], [], [], 3)[0]:\n    wrote.add(kids[os.read(r, 1)[0]])\n'
                 '    dead |= {p for p in kids if p not in dead and os.waitpid(p, os.WNOHANG)[0]}\n'
                 '    print("held", 80 * len(wrote - dead), flush=True)\n',
    'tmpfs_and_memfd': 'import os\nn = 0\ntry:\n    with open("/dev/shm/f", "wb") as f:\n        for _ in range(64): f.write(b"\\1" * (1 << 20)); n += 1\n'
                       'except OSError: pass\nprint("held", n, flush=True)\nfds = []\n'
                       'for i in range(20):\n    fd = os.memfd_create("m"); os.write(fd, b"\\1" * (32 << 20)); fds.append(fd)\n'
                       '    print("held", n + 32 * (i + 1), flush=True)\n',
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize('kind', list(MEMORY_ATTACKS))
def test_memory_bound_per_call(sbx, iso, kind):
    """640 MiB through memfds, SysV segments, a fork tree or tmpfs + memfd: the call's cgroup peak
    (what the bound promises: every page charged to the call) stays <= its bound.

    The code's own count ('held') is also checked where one process holds everything. A fork tree's
    count is not memory at one instant: when a child's allocation hits the bound, the OOM killer
    picks a victim and the oom_reaper frees its memory before the victim exits, so the child that
    waited completes and reports while the parent still sees the victim alive (one fresh-clone run
    printed 320 MiB 'held' = 4 x 80 against 288: 3 children resident plus one already reaped)."""
    needs(iso, 'cgroup', *(['ipcns'] if kind == 'sysv' else []))  # no SysV at all without one
    bound = CFG.memory_mb + CFG.disk_mb
    r = run(sbx.run(MEMORY_ATTACKS[kind], timeout=20))
    held = [int(l.split()[1]) for l in r.stdout.splitlines() if l.startswith('held')]
    peak = r.isolation.get('memory_peak_mb')
    print(f'{WHO} {kind}: cgroup peak {peak} MiB, the code counted at most {max(held or [0])} MiB '
          f'of 640 tried, bound {bound} MiB, status {r.status} {r.message}')
    assert r.status in ('killed', 'error') or kind == 'fork_tree', r  # there: children die
    assert peak is not None and peak <= bound, r
    if kind != 'fork_tree': assert max(held or [0]) <= bound, r
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_env_does_not_leak_across_configs(sbx, iso):
    "One config's env never reaches a call of another config on the same fork server (memory incl.)."
    secret = 'tunix_env_' + uuid.uuid4().hex
    a = LocalSandbox(dataclasses.replace(sbx.config, env=(('TUNIX_SECRET', secret),)))
    b = LocalSandbox(sbx.config)
    assert a.server() is b.server()
    assert run(a.run('import os; print(os.environ["TUNIX_SECRET"])')).stdout == secret + '\n'
    r = run(b.run('import os; print("TUNIX_SECRET" in os.environ)'))
    assert (r.status, r.stdout) == ('ok', 'False\n'), r
    pid, found = a.server().proc.pid, []  # the server (every later call is forked from it)
    with open(f'/proc/{pid}/maps') as m, open(f'/proc/{pid}/mem', 'rb') as mem:
        for line in m:
            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
            if 'r' not in line.split()[1] or hi - lo > 1 << 28: continue
            try: mem.seek(lo); found += [line] if secret.encode() in mem.read(hi - lo) else []
            except OSError: pass
    assert found == [], found


@pytest.mark.timeout(60)
def test_isolation_none_has_its_own_server(sbx, iso):
    "An isolation='none' call runs on a server of its own: it cannot remount the shared view."
    needs(iso, 'fs_view')
    none = LocalSandbox(dataclasses.replace(sbx.config, isolation='none'))
    assert none.server() is not sbx.server()
    run(none.run('print(1)'))
    tag = uuid.uuid4().hex
    r = run(sbx.run(f'try: open("/usr/tunix_evil_{tag}", "w"); print("WROTE")\nexcept OSError as e: print(e.errno)'))
    assert r.status == 'ok' and 'WROTE' not in r.stdout and not os.path.exists(f'/usr/tunix_evil_{tag}'), r


@pytest.mark.timeout(90)
def test_deep_directories(sbx, iso):
    "1,500 nested dirs in a stateful scratch dir: the episode goes on, release removes the host dir."
    from tunix_agentic.tools.code_interpreter import CodeInterpreterTool
    tool = CodeInterpreterTool(sbx)
    deep = ('import os\nfd = os.open(".", os.O_RDONLY)\nfor _ in range(1500):\n'
            '    os.mkdir("d", dir_fd=fd); n = os.open("d", os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n\n'
            'print("made")')
    async def go():
        a = await tool.execute('ep', {'code': deep})
        b = await tool.execute('ep', {'code': 'print(2)'})
        wd = tool.instances['ep']['workdir']
        await tool.release('ep')
        return a, b, wd
    a, b, wd = run(go())
    assert a[0].startswith('made') and b[0] == '2\n', (a, b)
    assert not os.path.exists(wd), 'the host workdir was left behind'


@pytest.mark.timeout(60)
def test_host_files_not_visible(sbx, iso, tmp_path):
    "Work folder, answer keys, /sys (net, cgroups), /opt, /var/lib, container metadata: not visible."
    needs(iso, ('fs_view', 'landlock'))
    key = tmp_path / 'answer_key.txt'; key.write_text('42'); key.chmod(0o644)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [str(key), os.path.abspath(__file__), os.path.join(here, 'settings.ini'), '/.dockerenv',
             '/etc/hostname', '/etc/shadow', '/etc/machine-id', '/proc/1/environ']
    dirs = [os.path.join(here, '.git'), '/sys/class/net', '/sys/fs/cgroup', '/run/secrets', '/opt',
            '/var/lib', '/root/.ssh', '/home', os.path.join(here, 'tunix_agentic')]
    code = (f'import os\nfor p in {files!r}:\n    try: open(p).read(1); print("SEEN", p)\n    except OSError: pass\n'
            f'for p in {dirs!r}:\n    try: print("SEEN", p, *os.listdir(p))\n    except OSError: pass')
    r = run(sbx.run(code))
    assert r.status == 'ok', r
    # a dir on the way to what the view shows (an interpreter under /opt) lists only that way
    view = iso.get('view') or []
    def route(d): return {v[len(d) + 1:].split('/')[0] for v in view if v.startswith(d + '/')}
    seen = [l.split()[1] for l in r.stdout.splitlines()
            if l.startswith('SEEN') and not (route(l.split()[1]) and set(l.split()[2:]) <= route(l.split()[1]))]
    assert seen == [] or (seen == ['/proc/1/environ'] and iso.get('own_proc')), seen
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_other_workdirs_invisible(sbx, iso, tmp_path):
    "A call with one episode's workdir cannot see another episode's workdir under the same root."
    needs(iso, ('fs_view', 'landlock'))
    s = LocalSandbox(dataclasses.replace(sbx.config, scratch_root=str(tmp_path)))
    os.chmod(tmp_path, 0o755)
    mine, other = s.make_workdir(), s.make_workdir()
    with open(os.path.join(other, 'answer.txt'), 'w') as f: f.write('secret')
    os.chmod(os.path.join(other, 'answer.txt'), 0o644)
    code = (f'import os\nfor p in [{other!r}, {str(tmp_path)!r}]:\n'
            '    try: print("LISTED", p, os.listdir(p))\n    except OSError: pass\n'
            f'try: print("READ", open({os.path.join(other, "answer.txt")!r}).read())\nexcept OSError: pass')
    r = run(s.run(code, workdir=mine))
    assert r.status == 'ok' and 'LISTED' not in r.stdout and 'READ' not in r.stdout, r


@pytest.mark.timeout(90)
def test_interpreter_under_tmp(sbx, iso):
    "A venv under /tmp (interpreter and fork server there) works inside its calls."
    needs(iso, 'fs_view')
    venv = tempfile.mkdtemp(prefix='tunix_venv_', dir='/tmp')
    try:
        subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True, capture_output=True)
        os.chmod(venv, 0o755)
        s = LocalSandbox(dataclasses.replace(sbx.config, python=os.path.join(venv, 'bin', 'python')))
        r = run(s.run('import sys, decimal, json\nprint(sys.prefix)'))
        assert (r.status, r.stdout) == ('ok', venv + '\n'), r
        site = subprocess.run([os.path.join(venv, 'bin', 'python'), '-c', 'import site; print(site.getsitepackages()[0])'],
                              capture_output=True, text=True, check=True).stdout.strip()
        mod = 'tunix_probe_' + uuid.uuid4().hex[:8]
        with open(os.path.join(site, mod + '.py'), 'w') as f: f.write('X = 42\n')
        wd = s.make_workdir()  # a stateful call: its /tmp is copied back, the venv shown in it is not
        r = run(s.run(f'import {mod}\nprint({mod}.X)', workdir=wd))
        copied = os.listdir(wd); shutil.rmtree(wd, ignore_errors=True)
        assert (r.status, r.stdout, copied) == ('ok', '42\n', []), (r, copied)
        os.symlink(venv, venv + '_link')  # a symlinked venv under /tmp (a fresh clone's .venv)
        s = LocalSandbox(dataclasses.replace(sbx.config, python=os.path.join(venv + '_link', 'bin', 'python')))
        r = run(s.run('import sys, decimal, json\nprint(sys.prefix)'))
        assert (r.status, r.stdout) == ('ok', venv + '_link\n'), r
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        if os.path.islink(venv + '_link'): os.unlink(venv + '_link')


# ---- the same file again, under a simulated Docker default profile --------------------------------
DOCKER_CAPS = ('chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,'
               'sys_chroot,mknod,audit_write,setfcap')
BLOCK_NAMESPACES = r"""
import ctypes, os, struct, sys
# Docker's default seccomp profile without CAP_SYS_ADMIN: no namespaces, mounts or keyrings (x86_64)
EPERM, ENOSYS, ALLOW = 0x00050001, 0x00050026, 0x7fff0000
NS = 0x7E020000  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}
deny = [272, 308, 165, 166, 155, 250, 248, 249, 428, 429, 430, 431, 432, 442]
prog = [(0x20, 4, 0, 0), (0x15, 0xC000003E, 1, 0), (0x06, 0, 0, 0), (0x20, 0, 0, 0)]
for nr in deny: prog += [(0x15, nr, 0, 1), (0x06, EPERM, 0, 0)]
prog += [(0x15, 435, 0, 1), (0x06, ENOSYS, 0, 0), (0x15, 56, 0, 3), (0x20, 16, 0, 0),
         (0x45, NS, 0, 1), (0x06, EPERM, 0, 0), (0x06, ALLOW, 0, 0)]
buf = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', c, jt, jf, k) for c, k, jt, jf in prog))
fprog = struct.pack('HxxxxxxQ', len(prog), ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0
os.execv(sys.argv[1], sys.argv[1:])
"""


class DockerProfileRun:
    "This file again as root under the Docker-like profile, in a subprocess started at most once."
    def __init__(self, tmp: str): self.tmp, self.p, self.out = tmp, None, None

    def why_not(self) -> str | None:
        if os.environ.get('TUNIX_SBX_UNPRIV') or DOCKER: return 'already a nested run'
        if os.geteuid() != 0 or not shutil.which('setpriv'): return 'needs root and setpriv'
        if os.uname().machine != 'x86_64': return 'the simulated seccomp profile is x86_64 only'

    def start(self):
        if self.p or self.why_not(): return
        blocker = os.path.join(self.tmp, 'block_namespaces.py')
        with open(blocker, 'w') as f: f.write(BLOCK_NAMESPACES)
        env = {**os.environ, 'TUNIX_SBX_DOCKER': '1'}
        caps = '--bounding-set=-all,+' + DOCKER_CAPS.replace(',', ',+')
        cmd = ['setpriv', caps, '--inh-caps=-all', sys.executable, blocker, sys.executable, '-m',
               'pytest', '-q', '-p', 'no:cacheprovider', '-rA', '-s',
               '--basetemp', os.path.join(self.tmp, 'bt'), os.path.abspath(__file__)]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)
        self.t0 = time.monotonic()

    def wait(self):
        "The finished run (returncode, stdout, stderr); killed 280 s after its start."
        if self.p and not self.out:
            try: out, err = self.p.communicate(timeout=max(1.0, 280 - (time.monotonic() - self.t0)))
            except subprocess.TimeoutExpired:
                self.p.kill(); out, err = self.p.communicate()
                err += '\nthe nested run under the Docker-like profile timed out after 280 s'
            self.out = self.p.returncode, out, err
        return self.out


@pytest.fixture(scope='module')
def docker_profile_run(tmp_path_factory):
    run_ = DockerProfileRun(str(tmp_path_factory.mktemp('docker_profile')))
    yield run_
    if run_.p and run_.p.poll() is None: run_.p.kill(); run_.p.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_attacks_under_docker_profile(docker_profile_run):
    "Root with Docker's default capabilities and namespaces blocked by seccomp: refused, or contained."
    if why := docker_profile_run.why_not(): pytest.skip(why)
    docker_profile_run.start()   # (already started, or run, by the unprivileged test)
    rc, stdout, stderr = docker_profile_run.wait()
    p = subprocess.CompletedProcess([], rc, stdout, stderr)
    print(p.stdout[-12000:], p.stderr[-2000:])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert 'PASSED tests/test_sandbox_attacks.py::test_default_refuses_without_isolation' in p.stdout
    assert 'PASSED tests/test_sandbox_attacks.py::test_infinite_loop[no_userns]' in p.stdout
    skips = [l for l in p.stdout.splitlines() if l.startswith('SKIPPED')]
    assert all('calls get no' in l or 'nested run' in l or 'no keyrings' in l for l in skips), skips


# ---- issue 43: every mode honest -------------------------------------------------------------------
PROCESS_CONTROL = r'''
import ctypes, os, resource, signal
libc = ctypes.CDLL(None, use_errno=True)
v = {victim}
def attempt(name, f):
    try: f(); print("DONE", name)
    except OSError as e: print("DONE" if e.errno == 14 else "refused", name, e.errno)  # EFAULT: allowed
def ptrace():
    if libc.ptrace(16, v, None, None) != 0: raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, v, None, None)
def vm_read():
    buf = ctypes.create_string_buffer(8)
    local, remote = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8), (ctypes.c_void_p * 2)(4096, 8)
    if libc.process_vm_readv(v, local, 1, remote, 1, 0) < 0: raise OSError(ctypes.get_errno(), "vm")
def proc_dir_signal():
    signal.pidfd_send_signal(os.open(f"/proc/{{v}}", os.O_RDONLY | os.O_DIRECTORY), signal.SIGKILL)
for name, f in [("prlimit", lambda: resource.prlimit(v, resource.RLIMIT_NOFILE, (7, 7))),
                ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, v, 19)),
                ("setpriority_user", lambda: os.setpriority(os.PRIO_USER, {uid}, 19)),
                ("affinity", lambda: os.sched_setaffinity(v, {{0}})),
                ("kill", lambda: os.kill(v, signal.SIGKILL)), ("killpg", lambda: os.killpg(v, signal.SIGKILL)),
                ("pidfd", lambda: signal.pidfd_send_signal(os.pidfd_open(v), signal.SIGKILL)),
                ("proc_dir_signal", proc_dir_signal), ("ptrace", ptrace), ("process_vm_readv", vm_read)]:
    attempt(name, f)
kid = os.fork()
if kid == 0: signal.pause(); os._exit(0)
attempt("own child", lambda: os.kill(kid, signal.SIGKILL))
print("child", os.waitpid(kid, 0)[1])
'''


@pytest.mark.timeout(60)
def test_process_control_of_trainer_processes(sbx, iso):
    "A process of the trainer's uid outside the call keeps its limits, priority, affinity and life; the call's own child is the call's."
    victim = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
    try:
        before = (resource.prlimit(victim.pid, resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, victim.pid),
                  os.sched_getaffinity(victim.pid), os.getpriority(os.PRIO_PROCESS, 0))
        r = run(sbx.run(PROCESS_CONTROL.format(victim=victim.pid, uid=os.getuid())))
        after = (resource.prlimit(victim.pid, resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, victim.pid),
                 os.sched_getaffinity(victim.pid), os.getpriority(os.PRIO_PROCESS, 0))
        alive = victim.poll() is None
    finally: victim.kill(); victim.wait()
    print(WHO, iso.get('process_guard'), r.stdout)
    assert r.status == 'ok' and 'DONE own child' in r.stdout and 'child 9' in r.stdout, r
    mine = ('own child',) + ('setpriority_user',) * (os.getuid() == 0)  # as root, user 0 means the caller's own uid
    assert [l for l in r.stdout.splitlines() if l.startswith('DONE') and l[5:] not in mine] == [], r.stdout
    assert alive and after == before, (before, after)
    if not iso.get('pidns') and not iso.get('uid_pool'): assert iso.get('process_guard'), iso
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_code_cannot_fake_a_sandbox_error(sbx):
    "Exit 71 with 'sandbox setup failed' on stderr is the code's own error: failures travel on the status pipe."
    r = run(sbx.run('import os, sys\nsys.stderr.write("sandbox setup failed: OSError(28)\\n")\nsys.stderr.flush()\nos._exit(71)'))
    assert (r.status, r.return_code, r.message) == ('error', 71, ''), r


@pytest.mark.timeout(60)
def test_udp_and_netlink(sbx, iso):
    "Without a network namespace: no UDP datagram reaches a host socket, no netlink dump lists host listeners."
    needs(iso, ('netns', 'net_filter'))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(('127.0.0.1', 0)); udp.setblocking(False)
    tcp = socket.socket(); tcp.bind(('127.0.0.1', 0)); tcp.listen(1)
    code = (f'import socket, struct\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {udp.getsockname()[1]})); print("SENT")\n'
            'except OSError as e: print("udp refused", e.errno)\n'
            'try:\n    n = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)\n'
            '    n.send(struct.pack("=IHHII", 72, 20, 0x301, 1, 0) + struct.pack("=BBBxI", 2, 6, 0, 0xffffffff) + bytes(48))\n'
            '    ports, done = [], False\n    while not done:\n        data, off = n.recv(65536), 0\n'
            '        while off < len(data):\n            ln, typ = struct.unpack_from("=IH", data, off)\n'
            '            if typ in (2, 3): done = True; break\n'
            '            ports.append(struct.unpack_from(">H", data, off + 20)[0]); off += (ln + 3) & ~3\n'
            f'    print("LISTED" if {tcp.getsockname()[1]} in ports else "not listed", len(ports))\n'
            'except OSError as e: print("netlink refused", e.errno)')
    r = run(sbx.run(code))
    try:
        assert r.status == 'ok' and 'LISTED' not in r.stdout, r
        with pytest.raises(BlockingIOError): udp.recv(16)  # nothing arrived
    finally: udp.close(); tcp.close()
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_posix_mqueue_does_not_persist(sbx, iso):
    "A POSIX message queue dies with the call's IPC namespace; without one, seccomp refuses mq_open."
    needs(iso, ('ipcns', 'seccomp'))
    name = f'/tunix_{uuid.uuid4().hex[:10]}'.encode()
    mq = f'import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nq = libc.mq_open({name!r}, {{flags}}, 0o666, None)\n'
    a = run(sbx.run(mq.format(flags=0o102) + 'print("created", q >= 0, ctypes.get_errno())'))
    b = run(sbx.run(mq.format(flags=2) + 'print("FOUND" if q >= 0 else "gone", ctypes.get_errno())'))
    libc = ctypes.CDLL(None, use_errno=True)
    on_host = libc.mq_open(name, 2) >= 0
    if on_host: libc.mq_unlink(name)
    if not iso.get('ipcns'): assert 'created True' not in a.stdout, a
    else: assert (a.status, a.stdout.split()[:2]) == ('ok', ['created', 'True']), a
    assert b.status == 'ok' and b.stdout.startswith('gone') and not on_host, (b, on_host)
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_landlock_in_missing(sbx, iso):
    "Without a filesystem view, `missing` names Landlock where the kernel (or the config) has none."
    off = LocalSandbox(dataclasses.replace(sbx.config, landlock=False, isolation='best_effort'))
    r = run(off.run('print(1)'))
    assert (r.status, r.stdout) == ('ok', '1\n'), r
    if iso.get('fs_view'): assert 'landlock' not in r.isolation['missing'] + iso['missing'], (r.isolation, iso)
    else:
        assert 'landlock' in r.isolation['missing'] and not r.isolation.get('landlock'), r.isolation
        assert ('landlock' in iso['missing']) == (not iso.get('landlock')), iso


@pytest.mark.timeout(60)
def test_workdir_written_in_place_keeps_no_links(sbx, iso):
    "Copied back, or written in place (no private /tmp): the workdir keeps no symlinks or setuid/setgid bits after the call."
    wd = sbx.make_workdir()
    code = ('import os\nos.makedirs("a/b")\nos.symlink("/etc/passwd", "a/b/link")\nopen("a/suid", "w").write("x")\n'
            'os.chmod("a/suid", 0o6755)\nos.chmod("a/b", 0o2777)\nprint("made")')
    try:
        r = run(sbx.run(code, workdir=wd))
        left = sorted(os.path.relpath(os.path.join(d, n), wd) for d, ds, fs in os.walk(wd) for n in ds + fs)
        modes = [os.lstat(os.path.join(wd, n)).st_mode & 0o7777 for n in ('a/suid', 'a/b')]
    finally: shutil.rmtree(wd, ignore_errors=True)
    assert (r.status, r.stdout) == ('ok', 'made\n'), r
    assert left == ['a', 'a/b', 'a/suid'] and modes == [0o755, 0o777], (left, modes)


@pytest.mark.timeout(90)
def test_copy_back_keeps_holes_drops_links(sbx, iso):
    "30 sparse files of 60 MiB, 50 hard links to 8 MiB, a symlink, setuid/setgid bits: the host workdir stays within disk_mb."
    needs(iso, 'private_tmp')
    wd = sbx.make_workdir()
    code = ('import os\nfor i in range(30):\n    with open(f"sparse{i}", "wb") as f: f.truncate(60 << 20); f.write(b"x")\n'
            'open("dense", "wb").write(b"y" * (8 << 20))\nfor i in range(50): os.link("dense", f"h{i}")\n'
            'os.symlink("/etc/passwd", "link")\nopen("suid", "w").write("x"); os.chmod("suid", 0o6755)\n'
            'os.mkdir("sgid"); os.chmod("sgid", 0o2777)\nprint("made")')
    try:
        a = run(sbx.run(code, workdir=wd))
        used = sum(os.lstat(os.path.join(d, n)).st_blocks * 512 for d, ds, fs in os.walk(wd) for n in ds + fs)
        names, sp = sorted(os.listdir(wd)), os.stat(os.path.join(wd, 'sparse29'))
        modes = [os.stat(os.path.join(wd, n)).st_mode & 0o7777 for n in ('suid', 'sgid')]
        b = run(sbx.run('import os\nprint(os.path.getsize("sparse29"), os.path.getsize("dense"))', workdir=wd))
    finally: shutil.rmtree(wd, ignore_errors=True)
    print(f'{WHO}: host workdir {used >> 10} KiB allocated, {names}')
    assert (a.status, a.stdout) == ('ok', 'made\n'), a
    assert names == sorted(['dense', 'sgid', 'suid'] + [f'sparse{i}' for i in range(30)]), names
    assert used <= CFG.disk_mb << 20 and sp.st_size == 60 << 20 and sp.st_blocks * 512 < 1 << 20, (used, sp)
    assert modes == [0o755, 0o777], modes
    assert (b.status, b.stdout) == ('ok', f'{60 << 20} {8 << 20}\n'), b  # the episode's tool goes on


@pytest.mark.timeout(120)
def test_memory_total_bounds_concurrent_calls(sbx, iso):
    "Two calls of 200 MiB each under a 352 MiB total: both cannot hold it at once."
    needs(iso, 'cgroup')
    total = CFG.memory_mb + CFG.disk_mb + 64
    s = LocalSandbox(dataclasses.replace(sbx.config, memory_total_mb=total))
    hold = ('import os, time\nfds = [os.memfd_create("m") for _ in range(10)]\n'  # RLIMIT_FSIZE bounds one memfd
            'for fd in fds: os.write(fd, b"\\1" * (20 << 20))\nprint("held 200", flush=True)\ntime.sleep(8)')
    async def go(): return await asyncio.gather(s.run(hold, timeout=30), s.run(hold, timeout=30))
    rs = run(go())
    print(WHO, [(r.status, r.stdout.strip(), r.isolation.get('memory_peak_mb')) for r in rs])
    assert all(r.isolation.get('memory_total_mb') == total for r in rs), rs[0].isolation
    assert all(r.status == 'killed' or 'held 200' in r.stdout for r in rs), rs  # held, or OOM-killed: nothing else
    assert sum(r.status == 'ok' and 'held 200' in r.stdout for r in rs) <= 1, rs
    next_call_works(s)


@pytest.mark.timeout(60)
def test_no_memory_bound_refused_by_default(sbx, iso):
    "Without a cgroup (a non-root trainer with nothing delegated) the default refuses, naming it."
    r = run(LocalSandbox(dataclasses.replace(sbx.config, isolation='auto')).run('print(1)'))
    if 'cgroup' in iso['missing']:
        assert r.status == 'sandbox_error' and 'cgroup' in r.message, r
        why = [e for e in r.isolation.get('errors', []) if e.startswith('cgroup: ')]
        assert why, r.isolation  # the errors say why
        if 'none is delegated' in why[0] and os.geteuid() != 0:  # and how to get one
            assert 'systemd-run --user --scope -p Delegate=yes' in why[0], why
    else: assert r.isolation.get('cgroup') and r.isolation.get('memory_total_mb'), r.isolation


DELEGATED = r"""
import asyncio, json, os, sys
for leaf in sys.argv[1:]:  # the runtime's own leaf, inside a cgroup delegated to this user
    with open(os.path.join(leaf, 'cgroup.procs'), 'w') as f: f.write('0')
from tunix_agentic.tools.sandbox import LocalSandbox, SandboxConfig
sbx = LocalSandbox(SandboxConfig.tiny(timeout_s=20.0, memory_mb=256, disk_mb=32))
code = ("import os\nfds = []\nfor i in range(20):\n    fds.append(os.memfd_create('x'))\n"
        "    os.write(fds[-1], b'\\1' * (32 << 20)); print('held', 32 * (i + 1), flush=True)")
r = asyncio.run(sbx.run(code))
print(json.dumps([os.geteuid(), r.status, r.isolation.get('cgroup'), r.isolation.get('memory_peak_mb'), r.isolation.get('missing')]))
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_delegated_cgroup_bounds_a_non_root_trainer(tmp_path):
    "A non-root trainer in a leaf of a cgroup delegated to it (what systemd's Delegate=yes gives): default isolation, bounded."
    if os.environ.get('TUNIX_SBX_UNPRIV') or DOCKER: pytest.skip('already a nested run')
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ('useradd', 'runuser', 'unshare')):
        pytest.skip('needs root, useradd, runuser and unshare')
    from tunix_agentic.tools.cgroups import cgroup_bases
    bases = cgroup_bases()
    if not bases: pytest.skip('no writable cgroup here')
    dirs = {k: os.readlink(f'/proc/self/fd/{fd}') for k, fd in bases.items()}
    for fd in bases.values(): os.close(fd)
    user = 'tsbx' + uuid.uuid4().hex[:8]
    subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', user], check=True)
    uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
    tops = [os.path.join(d, 'tunix_deleg_' + uuid.uuid4().hex[:8]) for d in dirs.values()]
    home = tempfile.mkdtemp(prefix='tunix_sbx_user_'); os.chmod(home, 0o777)
    try:
        for top in tops:  # delegate: the dir and its files to the user, its runtime leaf inside
            os.mkdir(top); os.mkdir(top + '/runtime')
            for d in (top, top + '/runtime'):
                for n in [''] + os.listdir(d): os.chown(os.path.join(d, n), uid, gid)
        script = os.path.join(home, 'deleg.py'); open(script, 'w').write(DELEGATED); os.chmod(script, 0o644)
        top_pyenv, pre = _untraversable_top(sys.base_prefix), ''
        if top_pyenv:
            d, keep = top_pyenv
            pre = (f'k=$(mktemp -d); mount --bind {keep} "$k"; mount -t tmpfs -o mode=755,size=1m tmpfs {d}; '
                   f'mkdir -p {keep}; mount --move "$k" {keep}; ')
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', 'HOME': home,
               'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': os.environ.get('PYTHONPATH', '')}
        p = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', pre + 'exec runuser -u "$0" -- "$@"',
                            user, sys.executable, script, *[t + '/runtime' for t in tops]],
                           capture_output=True, text=True, env=env, cwd=home, timeout=100)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        euid, status, cgroup, peak, missing = json.loads(p.stdout.splitlines()[-1])
        print(f'non-root in a delegated cgroup: status {status}, cgroup {cgroup}, peak {peak} MiB, missing {missing}')
        assert euid == uid and cgroup and missing == [], p.stdout
        assert status in ('killed', 'error') and peak is not None and peak <= 256 + 32, p.stdout
    finally:
        _kill_uid(uid)
        time.sleep(0.2)
        for top in tops:
            for d in sorted((os.path.join(top, n) for n in os.listdir(top) if os.path.isdir(os.path.join(top, n))), reverse=True):
                for sub in [s for s in os.listdir(d) if os.path.isdir(os.path.join(d, s))]:
                    try: os.rmdir(os.path.join(d, sub))
                    except OSError: pass
                try: os.rmdir(d)
                except OSError: pass
            try: os.rmdir(top)
            except OSError: pass
        subprocess.run(['userdel', user], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
