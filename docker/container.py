"""Checks the container's entrypoint asks Python to make (standard library only; runs in the image).

    python3 container.py python-ok               exit 1 unless this is Python 3.12 (sglang-jax's)
    python3 container.py requirements INI EXTRAS  print settings.ini's base requirements and EXTRAS'
    python3 container.py installed PROJECT_DIR    exit 0 only if PROJECT_DIR is installed editable
                                                  and `import tunix_agentic` loads it from there
    python3 container.py delegate ROOT PID UID GID  give the runtime (process PID, then user UID)
                                                  a cgroup of its own under the cgroup root ROOT

`installed` cannot be fooled by the folder `PROJECT_DIR/tunix_agentic` alone: seen from the parent
folder (the container's working directory) that folder imports as an empty namespace package, which
an `import tunix_agentic` check accepts. So the check asks pip's metadata for an editable install of
PROJECT_DIR, then imports the package in a fresh interpreter started in PROJECT_DIR's parent and
requires its `__file__` to be PROJECT_DIR/tunix_agentic/__init__.py.
"""
import configparser, json, os, subprocess, sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

PACKAGE = 'tunix_agentic'
PYTHON = (3, 12)


def python_problem(version=sys.version_info) -> str | None:
    "Why this Python cannot run the package, or None when it can."
    if tuple(version[:2]) == PYTHON: return None
    return (f'tunix_agentic needs Python {PYTHON[0]}.{PYTHON[1]} '
            '(sglang-jax 0.1.0rc0 supports no other); '
            f'this image has {".".join(map(str, version[:3]))}: pick a base image with 3.12')


def requirements(ini: str, extras: list[str]) -> list[str]:
    "settings.ini's base requirements followed by those of each extra, in order, without repeats."
    cfg = configparser.ConfigParser(delimiters=['='], interpolation=None)
    cfg.read(ini, encoding='utf-8')
    sect = cfg['DEFAULT']
    keys = ['requirements'] + [f'{e}_requirements' for e in extras if e]
    unknown = [k for k in keys[1:] if k not in sect]
    if unknown: raise SystemExit(f'{ini} defines no extra for {unknown}; it has '
                                 f'{sorted(k[:-13] for k in sect if k.endswith("_requirements"))}')
    out: list[str] = []
    for k in keys:
        for req in sect[k].split():
            if req not in out: out.append(req)
    return out


def editable_location(dist_name: str = PACKAGE) -> Path | None:
    "The folder pip installed `dist_name` from in editable mode, or None if it is not so installed."
    try: dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError: return None
    raw = dist.read_text('direct_url.json')
    if not raw: return None
    info = json.loads(raw)
    if not info.get('dir_info', {}).get('editable'): return None
    url = urlparse(info.get('url', ''))
    return Path(unquote(url.path)) if url.scheme == 'file' else None


def install_problem(project_dir: str) -> str | None:
    "Why PROJECT_DIR is not (yet) what `import tunix_agentic` loads here, or None when it is."
    project = Path(project_dir).resolve()
    where = editable_location()
    if where is None:
        return f'{PACKAGE} is not installed editable (pip metadata has no such install)'
    if where.resolve() != project:
        return f'{PACKAGE} is installed editable from {where}, not {project}'
    want = project / PACKAGE / '__init__.py'
    probe = 'import tunix_agentic as m; print(getattr(m, "__file__", None))'
    r = subprocess.run([sys.executable, '-c', probe], cwd=project.parent,
                       capture_output=True, text=True)
    got = r.stdout.strip()
    if r.returncode != 0: return f'`import {PACKAGE}` fails: {r.stderr.strip().splitlines()[-1:]}'
    if got == 'None': return f'`import {PACKAGE}` gives an empty namespace package (no __init__.py)'
    if Path(got).resolve() != want: return f'`import {PACKAGE}` loads {got}, not {want}'
    return None


CONTROLLERS = ('memory', 'pids')  # what the code sandbox bounds each call with


def _write(path: Path, text: str) -> None:
    "One write to a cgroup file (cgroup.procs takes one pid per write)."
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try: os.write(fd, text.encode())
    finally: os.close(fd)


def _hand(group: Path, pid: int, uid: int, gid: int, controllers: str = '') -> None:
    "Make `group` and its leaf `runtime`, owned by uid:gid, and move process `pid` into the leaf."
    leaf = group / 'runtime'
    leaf.mkdir(parents=True, exist_ok=True)
    if controllers: _write(group / 'cgroup.subtree_control', controllers)  # before any process
    for d in (group, leaf):  # the delegation: the folder and the files that move processes
        for name in ('', 'cgroup.procs', 'cgroup.subtree_control', 'cgroup.threads', 'tasks'):
            if (d / name).exists(): os.chown(d / name, uid, gid)
    _write(leaf / 'cgroup.procs', f'{pid}\n')


def delegate_cgroup(root: str, pid: int, uid: int, gid: int) -> str:
    "Delegate ROOT/tunix to uid:gid with process `pid` in its leaf; what was done (or SystemExit)."
    top = Path(root)
    if (top / 'cgroup.controllers').exists():  # cgroup v2, Docker's own namespace of it
        have = (top / 'cgroup.controllers').read_text().split()
        if 'memory' not in have: raise SystemExit(f'{root} offers no memory controller ({have})')
        on = ' '.join(f'+{c}' for c in CONTROLLERS if c in have)
        if 'memory' not in (top / 'cgroup.subtree_control').read_text().split():
            (top / 'init').mkdir(exist_ok=True)  # a cgroup holding processes hands nothing down
            for p in (top / 'cgroup.procs').read_text().split():
                try: _write(top / 'init' / 'cgroup.procs', p + '\n')
                except ProcessLookupError: pass  # gone meanwhile
            _write(top / 'cgroup.subtree_control', on)
        _hand(top / 'tunix', pid, uid, gid, on)
        os.setxattr(top / 'tunix', 'trusted.delegate', b'1')  # systemd's mark, which root needs
        return f'cgroup {top / "tunix"} delegated to uid {uid} ({on})'
    v1 = [top / c for c in CONTROLLERS if (top / c / 'cgroup.procs').exists()]
    if not any(d.name == 'memory' for d in v1): raise SystemExit(f'no cgroup hierarchy at {root}')
    for d in v1: _hand(d / 'tunix', pid, uid, gid)
    return f'cgroups {", ".join(str(d / "tunix") for d in v1)} delegated to uid {uid}'


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ('', [])
    if cmd == 'python-ok':
        problem = python_problem()
    elif cmd == 'requirements' and args:
        print('\n'.join(requirements(args[0], ','.join(args[1:]).split(','))))
        return 0
    elif cmd == 'installed' and len(args) == 1:
        problem = install_problem(args[0])
    elif cmd == 'delegate' and len(args) == 4:
        try: print(delegate_cgroup(args[0], *map(int, args[1:])))
        except OSError as e: raise SystemExit(f'{e.filename or args[0]}: {e.strerror}') from None
        return 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if problem: print(problem, file=sys.stderr)
    return 1 if problem else 0


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
