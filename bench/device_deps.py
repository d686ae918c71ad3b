"""The pure-Python and small binary packages the accelerator check needs beyond JAX, flax and optax,
carried to a machine without network as wheels and unpacked there without pip.

    python bench/device_deps.py download .device_wheels     # here (network): wheels for CPython 3.10-3.13
    python bench/device_deps.py install .device_wheels .device_deps   # there: unpack what is missing

`install` unpacks the missing modules, and always the tokenizer stack (transformers, tokenizers,
huggingface_hub: the package needs transformers < 5, and the GPU image ships 5.x), choosing the wheel
whose tag fits this interpreter (`py3-none-any`, `cp3X-abi3` with X at most the running minor
version, or `cpXY-cpXY`). device_check.sh puts the folder first on the path; the device's own numpy,
jax and flax are never carried, so never shadowed. Versions are those of .ci/constraints.txt where
it pins them, so the device runs what CI tested.
"""
import importlib.util, re, subprocess, sys, zipfile
from pathlib import Path

# (module to import, distribution): what the demo, the trainer and the tokenizers import
NEEDED = [('fastcore', 'fastcore'), ('omegaconf', 'omegaconf'), ('yaml', 'PyYAML'),
          ('transformers', 'transformers'), ('tokenizers', 'tokenizers'),
          ('huggingface_hub', 'huggingface_hub'), ('safetensors', 'safetensors'), ('regex', 'regex'),
          ('tqdm', 'tqdm'), ('filelock', 'filelock'), ('fsspec', 'fsspec'), ('requests', 'requests'),
          ('urllib3', 'urllib3'), ('idna', 'idna'), ('certifi', 'certifi'),
          ('charset_normalizer', 'charset_normalizer'), ('packaging', 'packaging'),
          ('jinja2', 'Jinja2'), ('markupsafe', 'MarkupSafe'), ('jsonschema', 'jsonschema'),
          ('attrs', 'attrs'), ('referencing', 'referencing'), ('rpds', 'rpds_py'),
          ('jsonschema_specifications', 'jsonschema_specifications'),
          ('typing_extensions', 'typing_extensions')]
ALWAYS = ('transformers', 'tokenizers', 'huggingface_hub')  # CI's versions, whatever is there
PYTHONS = ('3.11', '3.12', '3.13')


def pinned(dist: str) -> str:
    "`dist==version` from .ci/constraints.txt, else the bare name."
    f = Path(__file__).resolve().parents[1] / '.ci' / 'constraints.txt'
    norm = lambda s: re.sub(r'[-_.]+', '-', s).lower()
    for line in f.read_text().splitlines() if f.exists() else []:
        name, _, ver = line.strip().partition('==')
        if ver and norm(name) == norm(dist): return f'{name}=={ver}'
    return dist


def download(folder: str):
    "Each pinned wheel for each CPython of PYTHONS; a version with no wheel for one Python is named."
    specs, absent = [pinned(d) for _, d in NEEDED], []
    for py in PYTHONS:
        for spec in specs:
            r = subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps',
                                '--only-binary=:all:', '--python-version', py, '--implementation', 'cp',
                                '--platform', 'manylinux2014_x86_64', '--platform', 'manylinux_2_17_x86_64',
                                '--platform', 'manylinux_2_28_x86_64', '-d', folder, spec],
                               capture_output=True, text=True)
            if r.returncode: absent.append(f'{spec} (Python {py})')
    wheels = list(Path(folder).glob('*.whl'))
    print(f'{len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**20:.1f} MiB in {folder}'
          + (f'; no wheel: {", ".join(absent)}' if absent else ''))


def fits(wheel: str) -> bool:
    "Whether a wheel's (python, abi) tags fit this interpreter (x86-64 Linux assumed)."
    py, abi = wheel[:-4].split('-')[-3:-1]
    minor = sys.version_info.minor
    if abi == 'none': return py.startswith('py3') or py == f'cp3{minor}'
    if abi == 'abi3': return int(py[3:]) <= minor
    return abi == f'cp3{minor}'


def install(folder: str, target: str):
    missing = [d for m, d in NEEDED if d in ALWAYS or importlib.util.find_spec(m) is None]
    norm = lambda s: re.sub(r'[-_.]+', '_', s).lower()
    done = []
    for dist in missing:
        wheels = sorted(w.name for w in Path(folder).glob('*.whl')
                        if norm(w.name.split('-')[0]) == norm(dist) and fits(w.name))
        if not wheels: raise SystemExit(f'device_deps: no wheel of {dist} for Python {sys.version.split()[0]} '
                                        f'in {folder}')
        zipfile.ZipFile(Path(folder) / wheels[-1]).extractall(target)
        done.append(wheels[-1])
    print(f'device_deps: {len(NEEDED) - len(missing)} used as found, unpacked {len(done)} into {target}: '
          + ', '.join(done))


if __name__ == '__main__':
    cmd, *args = sys.argv[1:] or ['help']
    if cmd == 'download' and len(args) == 1: download(*args)
    elif cmd == 'install' and len(args) == 2: install(*args)
    else: raise SystemExit(__doc__)
