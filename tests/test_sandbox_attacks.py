"""Attack suite for tunix_agentic.tools.sandbox.LocalSandbox: every attack must be contained, this (trainer)
process must stay alive, and the next call must still print 2.

Runs as whoever runs pytest; `test_attacks_as_unprivileged_user` (root only) runs this same file again
as a throwaway unprivileged user made with `useradd`, so CI covers both privilege levels. Attacks
whose defence needs something this machine lacks (user namespaces, ...) skip and say what.
"""
import asyncio, dataclasses, os, pwd, shutil, socket, stat, subprocess, sys, tempfile, time, uuid

import pytest

from tunix_agentic.tools.sandbox import LocalSandbox, SandboxConfig

CFG = SandboxConfig.tiny(timeout_s=10.0, memory_mb=256, max_output_bytes=8192, disk_mb=32)
WHO = 'root' if os.geteuid() == 0 else 'unprivileged'


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope='module', params=[True, False], ids=['userns', 'no_userns'])
def sbx(request):
    "The sandbox, with user namespaces and as on a machine without them (weaker isolation accepted)."
    if request.param: return LocalSandbox(CFG)
    return LocalSandbox(dataclasses.replace(CFG, userns=False, isolation='best_effort'))


@pytest.fixture(scope='module')
def iso(sbx):
    "What a call gets on this machine."
    return run(sbx.run('pass')).isolation


def needs(iso, *keys):
    missing = [k for k in keys if not iso.get(k)]
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
    needs(iso, 'netns')
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
    needs(iso, 'fs_view', 'private_tmp')
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
    needs(iso, 'pidns', 'own_proc')
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
    needs(iso, 'own_proc')
    secret = 'hf_' + uuid.uuid4().hex
    monkeypatch.setenv('HF_TOKEN', secret)
    code = ('import os, glob\nprint(dict(os.environ))\n'
            f'for p in glob.glob("/proc/*/environ") + ["/proc/{os.getpid()}/environ", "/proc/{os.getpid()}/cmdline"]:\n'
            '    try: print(p, open(p, "rb").read())\n'
            '    except OSError as e: print(p, type(e).__name__)\n'
            f'try: print(open("/proc/{os.getpid()}/mem", "rb").read(16))\nexcept OSError as e: print(type(e).__name__)\n'
            'print(sorted(os.listdir("/proc"))[:40])')
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
    needs(iso, 'ipcns')
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
    assert (a.status, a.stdout) == ('ok', 'created True\n'), a
    assert b.status == 'ok' and b.stdout.startswith('gone'), b
    with open('/proc/sysvipc/shm') as f: assert f'{key:>10}' not in f.read()
    next_call_works(sbx)


@pytest.mark.timeout(60)
def test_fill_scratch(sbx, iso):
    "2 GB into the scratch dir and /dev/shm: stops at the call's disk_mb, host disk untouched."
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
    other = ('import subprocess, sys, threading, time\ntime.sleep(1.0)\nt = threading.Thread(target=lambda: None)\n'
             't.start(); t.join()\nfor _ in range(4): threading.Thread(target=time.sleep, args=(0.5,)).start()\n'
             'print(subprocess.run(["/bin/echo", "sub"], capture_output=True, text=True).stdout.strip())')
    async def go():
        return await asyncio.gather(sbx.run(hog), *(sbx.run(other) for _ in range(4)))
    h, *rest = run(go())
    assert h.status == 'ok' and h.stdout.startswith('hog ') and int(h.stdout.split()[1]) >= sbx.config.max_processes - 3, h
    assert [(r.status, r.stdout) for r in rest] == [('ok', 'sub\n')] * 4, rest
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


@pytest.mark.timeout(300)
def test_attacks_as_unprivileged_user():
    if os.environ.get('TUNIX_SBX_UNPRIV'): pytest.skip('already the unprivileged run')
    if os.geteuid() != 0: pytest.skip('needs root to create a throwaway user; this run already is one')
    tools = [shutil.which(t) for t in ('useradd', 'userdel', 'runuser', 'unshare')]
    if not all(tools): pytest.skip(f'needs useradd, userdel, runuser and unshare, found {tools}')
    user = 'tsbx' + uuid.uuid4().hex[:8]
    subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', user],
                   check=True, capture_output=True)
    visible = tempfile.mkdtemp(prefix='tunix_sbx_visible_', dir='/var/lib'); os.chmod(visible, 0o1777)
    home = tempfile.mkdtemp(prefix='tunix_sbx_user_'); os.chmod(home, 0o777)  # pytest's are 0700
    try:
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', 'HOME': home,
               'TUNIX_SBX_UNPRIV': '1', 'TUNIX_SBX_VISIBLE_DIR': visible, 'JAX_PLATFORMS': 'cpu',
               'PYTHONPATH': os.environ.get('PYTHONPATH', '')}  # this checkout, not an installed one
        cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-x', '-rs',
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
        print(p.stdout[-4000:], p.stderr[-2000:])
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        skips = [l for l in p.stdout.splitlines() if l.startswith('SKIPPED')]
        # with user namespaces nothing may be missing; without them, skips say what is missing
        assert all('userns=False' in l or 'already the unprivileged run' in l for l in skips), skips
        uid, t0 = pwd.getpwnam(user).pw_uid, time.monotonic()
        while _pids_of(uid) and time.monotonic() - t0 < 10: time.sleep(0.1)  # exits take a moment
        assert _kill_uid(uid) == 0, 'processes of the unprivileged run survived'

    finally:
        left = _kill_uid(pwd.getpwnam(user).pw_uid)
        subprocess.run(['userdel', user], capture_output=True)
        shutil.rmtree(visible, ignore_errors=True); shutil.rmtree(home, ignore_errors=True)
