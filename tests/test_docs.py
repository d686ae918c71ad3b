"""README.md, nbs/index.ipynb and the docs site agree; the docs check, the widget snapshots and the
skip guards do what they say; the README's Python example runs as written.

The docs build itself (every notebook run in a kernel, then nbdev_docs with Quarto) takes minutes,
so it runs only when asked: TUNIX_AGENTIC_DOCS=1.
"""
import configparser, json, os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / 'README.md'
sys.path.insert(0, str(ROOT / '.ci'))
import docs, quarto_hooks, run_notebooks  # noqa: E402  (in .ci/)


def _cfg():
    cfg = configparser.ConfigParser(delimiters=['='], interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    return cfg['DEFAULT']


def _words(markdown: str) -> list[str]:
    "The words of `markdown`, link targets, escapes and formatting aside."
    return re.findall(r'[A-Za-z0-9]+', re.sub(r'\]\([^)]*\)', ']', markdown))


def test_readme_carries_index():
    "README.md is nbs/index.ipynb rendered (nbdev_readme): every markdown cell's words, in order."
    cells = json.loads((ROOT / 'nbs' / 'index.ipynb').read_text())['cells']
    texts = [''.join(c['source']) for c in cells if c['cell_type'] == 'markdown']
    texts[0] = re.sub(r'^> .*$', '', texts[0], count=1, flags=re.M)  # the summary: page metadata
    want = [w for t in texts for w in _words(t)]
    have = iter(_words(README.read_text()))
    missing = [w for w in want if not any(h == w for h in have)]
    assert not missing, f'README.md lacks (in order) {missing[:10]}: run nbdev_readme'


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
    for path in ['.ci/setup', '.ci/test', '.ci/docs.py', 'bench/calibrate.py',
                 '.ci/constraints.txt', 'docker/README.md', '.python-version']:
        assert path in text and (ROOT / path).exists(), path


def test_readme_install_extras_exist():
    "The extras the README names are settings.ini's."
    cfg = _cfg()
    extras = {k[:-len('_requirements')] for k in cfg if k.endswith('_requirements')}
    rows = re.findall(r'^\| (`[^|]+) \|', README.read_text(), re.M)  # the extras table
    named = {e for row in rows for e in re.findall(r'`(\w+)`', row)}
    assert {'cpu', 'tpu', 'gpu', 'server', 'ray', 'tensorboard', 'notebook', 'dev'} <= named
    assert named <= extras, named
    assert 'tensorboard' in cfg['tensorboard_requirements'].split()
    assert {'jupyterlab', 'ipykernel', 'ipywidgets'} <= set(cfg['notebook_requirements'].split())


def test_sidebar_lists_every_notebook_tutorials_first():
    "nbs/sidebar.yml lists every notebook, tutorials first, the reference pages last."
    sidebar = (ROOT / 'nbs' / 'sidebar.yml').read_text()
    listed = re.findall(r'^\s+- ([\w/.]+\.(?:ipynb|md))$', sidebar, re.M)
    nbs = sorted(str(p.relative_to(ROOT / 'nbs')) for p in (ROOT / 'nbs').rglob('*.ipynb')
                 if not any(q.startswith(('_', '.')) for q in p.parts))
    assert sorted(l for l in listed if l.endswith('.ipynb')) == nbs
    for l in listed:  # the container guide is docker/README.md, copied in at each build
        assert (ROOT / 'nbs' / l).exists() or l == quarto_hooks.DOCKER_PAGE, l
    assert listed[0] == 'index.ipynb' and listed[1].startswith('11_tutorials/')
    assert listed[-3:] == ['12_reference/modules.md', '12_reference/benchmarks.md',
                           quarto_hooks.DOCKER_PAGE]


def test_module_map_names_every_module():
    "The module map .ci/docs.py writes (at every build) names every module, with its summary."
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
    return re.search(r'``` ?python\n(.*?)```', section, re.S).group(1)


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


def _site(tmp_path, pages: dict) -> Path:
    for name, body in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f'<html><body>{body}</body></html>')
    return tmp_path


def test_docs_check_counts_outputs_and_fails_on_localhost_links(tmp_path):
    "The docs check counts pages with outputs; localhost links, tracebacks, dead links fail it."
    good = _site(tmp_path / 'good', {
        'index.html': '<a href="a/x.html#y">x</a> <img src="/assets/p.png">',
        'a/x.html': '<div class="cell-output cell-output-display">42</div>'
                    '<a href="../index.html">up</a>',
        'assets/p.png': ''})
    found = docs.check(good)
    assert (found['pages'], found['with_outputs'], found['problems']) == (2, 1, [])
    bad = _site(tmp_path / 'bad', {
        'index.html': '<a href="http://localhost:8000/a/x.html">x</a> <a href="gone.html">g</a>',
        'a/x.html': '<div class="cell-output cell-output-error">ZeroDivisionError</div>'
                    '<pre>Traceback (most recent call last): printed, not an error</pre>'})
    found = docs.check(bad)
    assert found['localhost_links'] == 1 and len(found['problems']) == 3, found
    assert docs.main(['--check']) in (0, 1)  # runs on whatever _docs/ there is (none: 1)


def test_widget_outputs_become_static_html():
    "A saved widget tree becomes HTML: HTML widgets as is, boxes, buttons, a dropdown's choice."
    state = {'box': {'_model_name': 'VBoxModel', 'children': ['IPY_MODEL_h', 'IPY_MODEL_row']},
             'h': {'_model_name': 'HTMLModel', 'value': '<b>strip</b>'},
             'row': {'_model_name': 'HBoxModel', 'children': ['IPY_MODEL_b', 'IPY_MODEL_d',
                                                               'IPY_MODEL_gone']},
             'b': {'_model_name': 'ButtonModel', 'description': 'Step'},
             'd': {'_model_name': 'DropdownModel', 'description': 'task', 'index': 1,
                   '_options_labels': ['a', 'b']},
             'gone': {'_model_name': 'HTMLModel', 'value': 'hidden', 'layout': 'IPY_MODEL_l'},
             'l': {'_model_name': 'LayoutModel', 'display': 'none'},
             'out': {'_model_name': 'OutputModel', 'outputs': [
                 {'output_type': 'display_data', 'data': {'image/png': 'iVBO'}}]}}
    html = run_notebooks.widget_html(state, 'IPY_MODEL_box')
    assert '<b>strip</b>' in html and '<button disabled>Step</button>' in html
    assert 'task <code>b</code>' in html and 'hidden' not in html and 'flex-direction:row' in html
    assert run_notebooks.widget_html(state, 'out') == '<img src="data:image/png;base64,iVBO">'
    state['img'] = {'_model_name': 'ImageModel', 'format': 'png'}  # the viewer's plot
    assert run_notebooks.widget_html(state, 'img') == ''  # no picture yet
    state = run_notebooks.pictures(state, {'img': {('value',): {'data': 'iVBO', 'path': ['value']}}})
    assert run_notebooks.widget_html(state, 'img') == ('<img style="max-width:100%" '
                                                       'src="data:image/png;base64,iVBO">')


def test_skip_guards_name_real_extras():
    "Each notebook's skip guard is one `require(extra, *modules)` naming an extra of settings.ini."
    cfg, guarded = _cfg(), 0
    for nb in sorted((ROOT / 'nbs').rglob('*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            src = ''.join(c['source'])
            if nb.name == '04_extras.ipynb': continue  # require's own notebook
            assert '_render_traceback_' not in src, f'{nb.name}: a guard of its own, not require'
            call = re.search(r'^require\((.*)\)$', src, re.M)
            if not call: continue
            guarded += 1
            extra, *mods = re.findall(r"'(\w+)'", call.group(1))
            reqs = {re.split(r'[\[<>=]', r)[0].replace('-', '_')
                    for r in cfg[f'{extra}_requirements'].split()}
            assert set(mods or [extra]) <= reqs, (nb.name, mods, reqs)
    assert guarded >= 10


def test_run_all_stops_where_an_extra_is_missing(tmp_path, monkeypatch):
    "The kernel runner stops at a MissingExtra as Run All does: not an error; later cells not run."
    import nbformat
    monkeypatch.setattr(run_notebooks, 'ROOT', tmp_path)
    monkeypatch.setattr(run_notebooks, 'skip_flags', lambda: set())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [
        'x = 1', 'from tunix_agentic.core.extras import require', "require('server', 'no_such_mod')",
        'undefined_name']])
    nbformat.write(nb, tmp_path / 'guarded.ipynb')
    monkeypatch.setenv('PYTHONPATH', str(ROOT))
    row = run_notebooks.run_one(tmp_path / 'guarded.ipynb', 120, None, set())
    assert (row['run'], row['errors']) == (3, []), row
    assert row['stopped'] == ("cell 2: this notebook needs the server extra (no_such_mod missing): "
                              "pip install -e '.[server]'"), row


def test_deploy_workflow_builds_with_the_docs_script():
    "The Pages workflow (nbdev's usual form) builds with .ci/docs.py and publishes _docs."
    text = (ROOT / '.github' / 'workflows' / 'deploy.yaml').read_text()
    for part in ['quarto-dev/quarto-actions/setup', 'bash .ci/setup', '.ci/docs.py',
                 'peaceiris/actions-gh-pages', 'publish_dir: ./_docs']:
        assert part in text, part


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get('TUNIX_AGENTIC_DOCS') != '1',
                    reason='runs every notebook, builds the site (minutes): TUNIX_AGENTIC_DOCS=1')
def test_docs_site_builds_with_outputs():
    if not shutil.which('quarto'): pytest.skip('no quarto on PATH (.ci/quarto_offline.sh)')
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'docs.py')], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = docs.check()
    assert found['localhost_links'] == 0 and found['with_outputs'] >= 40, found
