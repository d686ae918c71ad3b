"""README.md, nbs/index.ipynb and the docs site agree; the README's Python example runs as written.

The docs build itself (nbdev processing of every notebook, then Quarto or the fallback renderer,
then headless Chromium) takes minutes, so it runs only when asked: TUNIX_AGENTIC_DOCS=1.
"""
import os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / 'README.md'
sys.path.insert(0, str(ROOT / '.ci'))
import readme  # noqa: E402  (.ci/readme.py)


def test_readme_is_rendered_from_index():
    "One source: README.md is what nbs/index.ipynb renders (python .ci/readme.py writes it)."
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'readme.py'), '--check'],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_readme_check_ignores_quarto_formatting():
    "Rewrapped lines, padded table rulers and `` ``` python`` fences (nbdev_readme's) still match."
    ours = readme.render()
    quarto_like = re.sub(r'^```python', '``` python', ours, flags=re.M)
    quarto_like = quarto_like.replace('|---|---|', '|-----|------|')
    quarto_like = quarto_like.replace('notebooks (Flax NNX,\noptax)',
                                      'notebooks\n(Flax NNX, optax)')
    assert quarto_like != ours and readme.normalized(quarto_like) == readme.normalized(ours)
    assert readme.normalized(ours.replace('two-call', 'three-call')) != readme.normalized(ours)


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    for cmd in ['bash .ci/setup && .venv/bin/tunix-agentic demo',
                'bash .ci/setup && bash .ci/test']:
        assert cmd in text, cmd


def test_readme_links_and_paths_exist():
    "Every relative link and every repository path a README command names exists."
    text = README.read_text()
    links = re.findall(r'\]\(([^)#\s]+)\)', text)
    local = [l for l in links if not re.match(r'[a-z]+://', l)]
    assert len(local) >= 7, local
    for link in local: assert (ROOT / link).exists(), link
    for path in ['.ci/setup', '.ci/test', '.ci/docs.py', '.ci/readme.py', 'bench/calibrate.py',
                 '.ci/constraints.txt', 'docker/README.md', '.python-version']:
        assert path in text and (ROOT / path).exists(), path


def test_readme_install_extras_exist():
    "The extras the README names are settings.ini's."
    import configparser
    cfg = configparser.ConfigParser(delimiters=['='], interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    extras = {k[:-len('_requirements')] for k in cfg['DEFAULT'] if k.endswith('_requirements')}
    rows = re.findall(r'^\| (`[^|]+) \|', README.read_text(), re.M)  # the extras table
    named = {e for row in rows for e in re.findall(r'`(\w+)`', row)}
    assert {'cpu', 'tpu', 'gpu', 'server', 'ray', 'tensorboard', 'dev'} <= named <= extras, named
    assert 'tensorboard' in cfg['DEFAULT']['tensorboard_requirements'].split()


def test_sidebar_lists_every_notebook_tutorials_first():
    "The sidebar .ci/docs.py writes (at every build) lists every notebook, tutorials first."
    import docs
    sidebar = docs.sidebar_yml()
    listed = re.findall(r'^\s+- ([\w/.]+\.(?:ipynb|md))$', sidebar, re.M)
    nbs = sorted(str(p.relative_to(ROOT / 'nbs')) for p in (ROOT / 'nbs').rglob('*.ipynb')
                 if not any(q.startswith(('_', '.')) for q in p.parts))
    assert sorted(l for l in listed if l.endswith('.ipynb')) == nbs
    for l in listed:  # the container guide is docker/README.md, copied in at each build
        assert (ROOT / 'nbs' / l).exists() or l == docs.DOCKER_PAGE, l
    assert listed[0] == 'index.ipynb' and listed[1].startswith('11_tutorials/')
    assert listed[-3:] == ['12_reference/modules.md', '12_reference/benchmarks.md', docs.DOCKER_PAGE]


def test_module_map_names_every_module():
    "The module map .ci/docs.py writes (at every build) names every module, with its summary."
    import docs
    text = docs.module_map()
    mods = {'.'.join(p.relative_to(ROOT).with_suffix('').parts)
            for p in (ROOT / 'tunix_agentic').rglob('*.py')
            if p.name not in ('_modidx.py', '__main__.py', '__init__.py')}
    missing = sorted(m for m in mods if f'`{m}`' not in text)
    assert not missing, f'the module map lacks {missing}'
    assert '| `tunix_agentic.rollout.collector` | `TrajectoryCollector`' in text


def test_nbdev_docs_runs_no_cell_that_needs_a_skipped_one():
    "nbdev_docs runs every cell holding an import: none may use a name only a skipped cell defines."
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'doc_cells.py')], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_show_doc_reads_every_exported_signature():
    "show_doc evaluates annotations: one naming what its module lacks fails nbdev_docs (NameError)."
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'doc_cells.py'), '--signatures'],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _readme_example() -> str:
    text = README.read_text()
    section = text[text.index('## In Python'):]
    return re.search(r'```python\n(.*?)```', section, re.S).group(1)


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path):
    "The README's example, run as written in a fresh interpreter: 8 episodes, 2 GRPO steps."
    code = _readme_example()
    assert 15 <= len(code.strip().splitlines()) <= 30
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': str(ROOT)}
    r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith('8 episodes;') and lines[-1] == 'policy version 2', r.stdout
    assert (tmp_path / 'runs' / 'readme' / 'metrics.jsonl').exists()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get('TUNIX_AGENTIC_DOCS') != '1',
                    reason='builds the whole docs site (minutes); set TUNIX_AGENTIC_DOCS=1')
def test_docs_site_builds_and_loads_in_chromium():
    if not (shutil.which('chromium') or shutil.which('chromium-browser')):
        pytest.skip('no chromium (apt-get install -y chromium chromium-driver)')
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'docs.py'), '--check'], cwd=ROOT,
                       capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'pages, 0 error cells, 0 broken images' in r.stdout, r.stdout[-2000:]
