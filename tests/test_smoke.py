"""Every exported module imports in a fresh interpreter (catches imports that live only in hidden cells)."""
import os, pkgutil, subprocess, sys
from pathlib import Path

import pytest

import tunix_agentic

MODULES = sorted(m.name for m in pkgutil.iter_modules(tunix_agentic.__path__) if not m.name.startswith('_'))


def test_package_has_modules():
    assert 'types' in MODULES, MODULES


@pytest.mark.timeout(120)
@pytest.mark.parametrize('name', MODULES)
def test_module_imports_in_fresh_interpreter(name):
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
    r = subprocess.run([sys.executable, '-c', f'import tunix_agentic.{name}'], capture_output=True, text=True,
                       env=env, timeout=110)
    assert r.returncode == 0, f'import tunix_agentic.{name} failed:\n{r.stderr[-3000:]}'


def test_every_notebook_module_is_exported():
    "Each `#| default_exp X` notebook has a matching tunix_agentic/X.py."
    import json
    root = Path(__file__).resolve().parents[1]
    missing = []
    for nb in sorted((root / 'nbs').glob('*.ipynb')):
        for cell in json.loads(nb.read_text())['cells']:
            src = ''.join(cell['source'])
            if cell['cell_type'] == 'code' and src.startswith('#| default_exp'):
                mod = src.split()[2]
                if not (root / 'tunix_agentic' / f'{mod}.py').exists(): missing.append((nb.name, mod))
    assert not missing, f'notebooks whose module is missing (run nbdev_export): {missing}'
