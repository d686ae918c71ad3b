"""The top of the package serves exactly its written list of public names (`tunix_agentic._PUBLIC`), each
from the module that defines it, in any import order; other names fail naming their module. Each check
runs in a fresh interpreter, so what an earlier test imported cannot make it pass."""
import json, os, re, subprocess, sys
from pathlib import Path

import tunix_agentic
from tunix_agentic._modidx import d as MODIDX

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = tunix_agentic._PUBLIC


def fresh(code: str) -> dict:
    "Run `code` in a fresh interpreter; it prints one JSON value, returned here."
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_each_listed_name_is_defined_by_its_module():
    "The list names the defining module (nbdev's index), not a module that re-imports the name."
    wrong = {n: m for n, m in PUBLIC.items() if f'tunix_agentic.{m}.{n}' not in
             MODIDX['syms'].get(f'tunix_agentic.{m}', {})}
    assert not wrong, f'names whose listed module does not define them: {wrong}'


def test_every_listed_name_imports_and_dir_is_the_list():
    code = ('import json, sys, importlib, tunix_agentic as t\n'
            'jax_at_import = "jax" in sys.modules\n'
            'bad = [n for n, m in t._PUBLIC.items()\n'
            '       if getattr(t, n) is not getattr(importlib.import_module("tunix_agentic." + m), n)]\n'
            'ns = {}\n'
            'exec("from tunix_agentic import " + ", ".join(t._PUBLIC), ns)\n'
            'print(json.dumps(dict(jax=jax_at_import, bad=bad, dir=dir(t), all=t.__all__,\n'
            '                      star=sorted(set(ns) - {"__builtins__"}))))\n')
    got = fresh(code)
    assert got['jax'] is False, 'importing the top of the package loaded JAX'
    assert got['bad'] == [], got['bad']
    assert got['dir'] == sorted(PUBLIC) == got['all'] == got['star']


def test_documented_names_are_listed():
    "What README.md, the tutorials and the tests import from the top is in the list."
    texts = [ROOT / 'README.md', *sorted((ROOT / 'nbs' / '11_tutorials').glob('*.ipynb')),
             *sorted((ROOT / 'tests').glob('*.py'))]
    used = set()
    for p in texts:
        text = p.read_text()
        if p.suffix == '.ipynb':
            text = '\n'.join(''.join(c['source']) for c in json.loads(text)['cells'])
        for m in re.finditer(r'^\s*from tunix_agentic import (?:\(([^)]*)\)|([\w, ]+))', text, re.M):
            used |= {n.strip() for n in (m.group(1) or m.group(2)).split(',') if n.strip()}
    used -= {'__version__'}
    assert {'FunctionTool', 'TrajectoryCollector', 'JaxEngine', 'Trainer'} <= used  # README's example
    assert used <= set(PUBLIC), f'imported from the top but not listed: {sorted(used - set(PUBLIC))}'


def test_an_unlisted_name_fails_naming_its_module():
    code = ('import json, tunix_agentic as t\n'
            'out = {}\n'
            'for n in ["start", "stop", "ask", "user", "load_hf", "no_such_name"]:\n'
            '    try: getattr(t, n); out[n] = None\n'
            '    except AttributeError as e: out[n] = str(e)\n'
            'print(json.dumps(out))\n')
    got = fresh(code)
    for name in ('start', 'stop', 'ask'):   # fork-server internals are not public
        assert got[name] and 'tunix_agentic.tools.cage_loop' in got[name], got[name]
    assert got['user'] and 'tunix_agentic.tools.cage_server' in got['user']
    assert 'tunix_agentic.models.qwen2' in got['load_hf'] and 'models.gemma3' in got['load_hf']
    assert got['no_such_name'] == "module 'tunix_agentic' has no public name 'no_such_name'"


def test_no_name_depends_on_import_order():
    "Resolved first, or after every module was imported, each name is the same object."
    code = ('import json, sys, importlib, pkgutil, tunix_agentic as t\n'
            'first = {n: getattr(t, n) for n in reversed(t.__all__)}\n'
            'serve_first = t.serve.__name__\n'
            'for m in pkgutil.walk_packages(t.__path__, "tunix_agentic."):\n'
            '    if m.name.rsplit(".", 1)[-1].startswith("_"): continue\n'
            '    try: importlib.import_module(m.name)\n'
            '    except ImportError: pass  # an optional extra; test_smoke reports it\n'
            'again = {n: t.__getattr__(n) for n in t.__all__}\n'
            'print(json.dumps(dict(differ=[n for n in first if first[n] is not again[n]],\n'
            '    serve=[serve_first, t.serve.__name__], dir=dir(t) == t.__all__)))\n')
    got = fresh(code)
    assert got == {'differ': [], 'serve': ['tunix_agentic.serve'] * 2, 'dir': True}, got


def test_subpackages_import_as_subpackages():
    code = ('import json, tunix_agentic as t\n'
            'print(json.dumps([getattr(t, p).__name__ for p in t._SUBPACKAGES]))\n')
    assert fresh(code) == [f'tunix_agentic.{p}' for p in tunix_agentic._SUBPACKAGES]
