"""Build the docs site into _docs/ from the notebooks, nbdev's way, and check it in headless Chromium.

    python .ci/docs.py                 build _docs/ (a few minutes: nbdev runs every show_doc)
    python .ci/docs.py --check         build, then open every page in headless Chromium
    python .ci/docs.py --check --no-build      check the _docs/ there is (after `nbdev_docs`)
    python .ci/docs.py --check --screenshots   also save three pages as assets/docs_*.png
    python .ci/docs.py --fallback      use the fallback renderer even where Quarto is installed
    python .ci/docs.py --module-map    only rewrite nbs/12_reference/modules.md and nbs/sidebar.yml

With Quarto on PATH the build is plain `nbdev_docs`: nbdev's processing into _proc/ (directives
applied, `#| hide` cells dropped, a `show_doc` signature for every exported name, for which it runs
the exported cells, the show_doc cells and every cell holding an import: `.ci/doc_cells.py` checks
that each of those runs alone), then `quarto render` with nbs/_quarto.yml, whose pre- and post-
render steps (.ci/quarto_hooks.py) add assets/, the container guide and the links GitHub needs, in
the page order of nbs/sidebar.yml (tutorials first, then the layers in data-flow order). Without
Quarto (its PyPI package, quarto-cli, downloads the binary when it installs, which fails offline)
the same processing and steps, then each page rendered with nbconvert beside the same sidebar.
README.md: `nbdev_docs` re-renders it from nbs/index.ipynb when the notebook is newer, as
`.ci/readme.py` does without Quarto; `python .ci/readme.py --check` holds for both."""
import argparse, base64, html, json, os, re, shutil, subprocess, sys, threading, time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / '.ci'))
import quarto_hooks  # noqa: E402  (the steps Quarto runs before and after rendering)
from quarto_hooks import DOCKER_PAGE, html_name  # noqa: E402
DOCS = ROOT / '_docs'
SHOTS = {'index.html': 'docs_index.png', '11_tutorials/stepper.html': 'docs_tutorial.png',
         '06_rollout/collector.html': 'docs_collector.png'}


def process() -> Path:
    "nbdev's processing of nbs/ into _proc/, then the pre-render step Quarto runs (quarto_hooks)."
    os.chdir(ROOT)
    from nbdev.config import get_config
    from nbdev.quarto import refresh_quarto_yml
    from nbdev.serve import proc_nbs
    refresh_quarto_yml()
    cache = proc_nbs(get_config().nbs_path)
    quarto_hooks.pre_render(cache)
    return cache


def sidebar() -> list[tuple[str, list[str]]]:
    "(section, pages) in nbs/sidebar.yml's order; the first section is '' (the home page)."
    import yaml
    out = [('', [])]
    doc = yaml.safe_load((ROOT / 'nbs' / 'sidebar.yml').read_text())
    for item in doc['website']['sidebar']['contents']:
        if isinstance(item, str): out[0][1].append(item)
        else: out.append((item['section'], list(item['contents'])))
    return out


SECTIONS = {'11_tutorials': 'Tutorials', '00_core': 'Core: trajectories and registries', '01_tools': 'Tools',
            '02_chat': 'Chat: parsers, templates, tokens', '03_envs': 'Environments, agents, rewards',
            '04_models': 'Models', '05_engines': 'Rollout engines',
            '06_rollout': 'Rollout: episodes and collection', '07_learn': 'Learning: losses, trainer, loop',
            '08_ui': 'Notebook UI', '09_serve': 'Serving rollouts',
            '10_app': 'The demo and the command line', '12_reference': 'Reference'}


def sidebar_yml() -> str:
    "nbs/sidebar.yml: the home page, tutorials, the layers in data-flow order, reference pages."
    nbs = ROOT / 'nbs'
    folders = sorted(p.name for p in nbs.iterdir() if p.is_dir() and re.match(r'\d+_', p.name))
    folders = [f for f in folders if f == '11_tutorials'] + [f for f in folders if f != '11_tutorials']
    out = ["# The docs site's sidebar (settings.ini custom_sidebar = True), written by",
           '# `python .ci/docs.py --module-map`: tutorials first, then the layers in data-flow order.',
           'website:', '  sidebar:', '    contents:', '      - index.ipynb']
    for f in folders:
        pages = sorted(p.relative_to(nbs).as_posix() for p in (nbs / f).iterdir()
                       if p.suffix in ('.ipynb', '.md') and not p.name.startswith(('_', '.')))
        if not pages: continue
        if f == '12_reference': pages = sorted(pages, key=lambda p: 'modules' not in p) + [DOCKER_PAGE]
        out += [f'      - section: "{SECTIONS.get(f, f.split("_", 1)[1])}"', '        contents:',
                *[f'          - {p}' for p in pages]]
    return '\n'.join(out) + '\n'


def module_map() -> str:
    "nbs/12_reference/modules.md: each notebook, the module it exports and its summary line."
    out = ['---', 'title: Module map', 'description: Every notebook, the module it exports, and what it '
           'holds, in the order data flows.', '---', '',
           'Each notebook in `nbs/` exports one module of `tunix_agentic/`; a module imports only modules',
           'above it (`.ci/house.py` checks this). The public names (06_package lists them) also import',
           'from the top: `from tunix_agentic import Trajectory`. Written by `python .ci/docs.py --module-map`.', '']
    folder = None
    for nb_path in sorted((ROOT / 'nbs').glob('[0-9]*/[0-9]*.ipynb')):
        cells = json.loads(nb_path.read_text(encoding='utf-8'))['cells']
        srcs = [(c['cell_type'], ''.join(c['source'])) for c in cells]
        exp = next((m.group(1) for _, s in srcs if (m := re.search(r'#\|\s*default_exp\s+(\S+)', s))), None)
        summary = next((m.group(1).strip() for t, s in srcs
                        if t == 'markdown' and (m := re.search(r'^>\s*(.+)$', s, re.M))), '')
        if nb_path.parent.name != folder:
            folder = nb_path.parent.name
            out += ['', f'## {folder.split("_", 1)[1]}', '', '| notebook | module | what it holds |',
                    '|---|---|---|']
        page = f'../{folder}/{nb_path.name}'  # the page's source: Quarto and the fallback link it
        out.append(f'| [{nb_path.stem}]({page}) | {f"`tunix_agentic.{exp}`" if exp else "—"} | {summary} |')
    extra = sorted('.'.join(p.relative_to(ROOT).with_suffix('').parts)
                   for p in (ROOT / 'tunix_agentic').rglob('*.py')
                   if p.name not in ('__init__.py', '__main__.py', '_modidx.py')
                   and not any(f'`{".".join(p.relative_to(ROOT).with_suffix("").parts)}`' in l
                               for l in out))
    if extra:
        out += ['', '## Modules not exported from a notebook', '',
                *[f'- `{m}`: {_docstring(ROOT / (m.replace(".", "/") + ".py"))}' for m in extra]]
    return '\n'.join(out) + '\n'


def _docstring(path: Path) -> str:
    import ast
    return (ast.get_docstring(ast.parse(path.read_text(encoding='utf-8'))) or '').split('\n')[0]


def write_pages():
    "Write nbs/12_reference/modules.md and nbs/sidebar.yml from the notebooks in nbs/."
    (ROOT / 'nbs' / '12_reference' / 'modules.md').write_text(module_map(), encoding='utf-8')
    (ROOT / 'nbs' / 'sidebar.yml').write_text(sidebar_yml(), encoding='utf-8')


def quarto_build():
    "`nbdev_docs`: nbdev's processing, then `quarto render` (with .ci/quarto_hooks.py's steps)."
    exe = Path(sys.executable).with_name('nbdev_docs')
    subprocess.run([str(exe) if exe.exists() else 'nbdev_docs'], cwd=ROOT, check=True)


def _front_matter(nb: dict) -> dict:
    "nbdev turns a notebook's `# title` / `> summary` cell into a raw YAML cell at the top."
    import yaml
    for c in nb.cells[:2]:
        src = c.source
        if c.cell_type == 'raw' and src.startswith('---'):
            c.source = ''
            return yaml.safe_load(src.strip().strip('-')) or {}
    return {}


def _page_body(src: Path) -> tuple[str, str, str]:
    "(title, description, body html) of a processed notebook or markdown page."
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.filters import markdown2html
    if src.suffix == '.md':
        text = src.read_text(encoding='utf-8')
        meta = {}
        if text.startswith('---'):
            import yaml
            head, text = text[3:].split('\n---', 1)
            meta = yaml.safe_load(head) or {}
        return meta.get('title', src.stem), meta.get('description', ''), markdown2html(text)
    from nbconvert.preprocessors import TagRemovePreprocessor
    nb = nbformat.reads(src.read_text(encoding='utf-8'), as_version=4)
    meta = _front_matter(nb)
    for c in nb.cells:  # Quarto's cell options, which nbconvert does not read
        if c.cell_type != 'code': continue
        if re.search(r'^#\|\s*include:\s*false', c.source, re.M): c.metadata['tags'] = ['remove_cell']
        elif re.search(r'^#\|\s*echo:\s*false', c.source, re.M): c.metadata['tags'] = ['remove_input']
        c.source = re.sub(r'^#\|.*\n?', '', c.source, flags=re.M)
    exporter = HTMLExporter(template_name='basic', exclude_input_prompt=True,
                            exclude_output_prompt=True)
    exporter.register_preprocessor(TagRemovePreprocessor(
        remove_cell_tags={'remove_cell'}, remove_input_tags={'remove_input'}, enabled=True), True)
    body, _ = exporter.from_notebook_node(nb)
    body = re.sub(r'\{target="_blank"[^}]*\}', '', body)  # pandoc link attributes of show_doc
    return meta.get('title', src.stem), meta.get('description', ''), body


_CSS = """body{margin:0;font:15px/1.5 system-ui,sans-serif;color:#222;display:flex}
nav{width:260px;flex:none;height:100vh;overflow:auto;position:sticky;top:0;background:#f6f7f9;
padding:12px;box-sizing:border-box;font-size:13px}nav h2{font-size:15px;margin:4px 0 10px}
nav h3{font-size:12px;text-transform:uppercase;color:#666;margin:14px 0 4px}
nav a{display:block;padding:2px 4px;color:#234;text-decoration:none;border-radius:3px}
nav a.here{background:#dde6f3;font-weight:600}main{max-width:980px;padding:16px 32px;min-width:0}
pre{background:#f4f4f4;padding:8px;overflow:auto;font-size:13px}code{font-size:13px}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top}
img{max-width:100%}.description{color:#555;font-size:17px;margin-top:-8px}
.jp-InputPrompt,.jp-OutputPrompt{display:none}"""


def fallback_build(cache: Path) -> int:
    "Every page of the sidebar rendered from _proc/ into _docs/; the number of pages."
    shutil.rmtree(DOCS, ignore_errors=True)
    shutil.copytree(cache / 'assets', DOCS / 'assets')
    sections, titles, bodies = sidebar(), {}, {}
    for _, pages in sections:
        for page in pages:
            titles[page], desc, body = _page_body(cache / page)
            bodies[page] = (desc, body)
    for _, pages in sections:
        for page in pages:
            depth = page.count('/')
            up = '../' * depth
            nav = [f'<h2><a href="{up}index.html">tunix_agentic</a></h2>']
            for name, items in sections:
                if name: nav.append(f'<h3>{html.escape(name)}</h3>')
                nav += [f'<a href="{up}{html_name(p)}"{" class=here" if p == page else ""}>'
                        f'{html.escape(str(titles[p]))}</a>' for p in items]
            desc, body = bodies[page]
            head = f'<h1>{html.escape(str(titles[page]))}</h1>'
            if desc:  # inline markdown (`code`) as Quarto renders it
                desc = re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(str(desc)))
                head += f'<p class="description">{desc}</p>'
            out = DOCS / html_name(page)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(f'<!doctype html><html><head><meta charset="utf-8"><title>'
                           f'{html.escape(str(titles[page]))} – tunix_agentic</title>'
                           f'<style>{_CSS}</style></head><body><nav>{"".join(nav)}</nav>'
                           f'<main>{head}{quarto_hooks.links(body, depth)}</main></body></html>',
                           encoding='utf-8')
    return sum(len(p) for _, p in sections)


# --- the check: every page in headless Chromium over a local HTTP server -----------------------

_PROBE = """(() => {
  const imgs = [...document.images];
  const errs = document.querySelectorAll('.cell-output-error, .output_error, .jp-OutputArea-output'
    + '[data-mime-type="application/vnd.jupyter.stderr"]').length;
  const tb = (document.body.innerText.match(/Traceback \\(most recent call last\\)/g) || []).length;
  return JSON.stringify({title: document.title, ready: document.readyState, path: location.pathname,
    text: document.body.innerText.length, images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    errors: errs + tb, signatures: document.querySelectorAll('h3, h4').length,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href)
      .filter(h => h.startsWith(location.origin)).map(h => h.split('#')[0].split('?')[0])});
})()"""


class _Chromium:
    "Just enough of the DevTools protocol: open a URL, evaluate a script, take a screenshot."
    def __init__(self, port: int = 9333):
        import urllib.request, websocket
        exe = shutil.which('chromium') or shutil.which('chromium-browser')
        if not exe: raise SystemExit('no chromium: apt-get install -y chromium chromium-driver')
        self.proc = subprocess.Popen([exe, '--headless=new', '--no-sandbox', '--disable-gpu',
                                      f'--remote-debugging-port={port}', '--window-size=1280,900',
                                      'about:blank'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/json'))
                ws = next(t['webSocketDebuggerUrl'] for t in targets if t['type'] == 'page')
                break
            except Exception: time.sleep(0.2)
        else: raise SystemExit('chromium did not start')
        self.ws, self.n = websocket.create_connection(ws, timeout=120, suppress_origin=True), 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({'id': self.n, 'method': method, 'params': params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get('id') == self.n:
                if 'error' in msg: raise RuntimeError(f'{method}: {msg["error"]}')
                return msg['result']

    def probe(self) -> dict | None:
        "The page's state (see _PROBE), or None while it is not there yet."
        r = self.call('Runtime.evaluate', expression=_PROBE, returnByValue=True)
        value = r.get('result', {}).get('value')
        return json.loads(value) if isinstance(value, str) else None

    def load(self, url: str) -> dict:
        self.call('Page.enable')
        self.call('Page.navigate', url=url)
        r = None
        for _ in range(300):
            time.sleep(0.1)
            r = self.probe()
            if r and r['ready'] == 'complete' and url.endswith(r.get('path', '')): break
        time.sleep(0.5)  # images decode
        return self.probe() or r

    def screenshot(self, path: Path):
        path.write_bytes(base64.b64decode(self.call('Page.captureScreenshot', format='png')['data']))

    def close(self):
        self.ws.close(); self.proc.terminate(); self.proc.wait(10)


def check(screenshots: bool) -> int:
    "Open every page of _docs/; print one line each; the number of problems."
    pages = [html_name(p) for _, items in sidebar() for p in items]
    server = ThreadingHTTPServer(('127.0.0.1', 0), partial(_Quiet, directory=str(DOCS)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base, browser = f'http://127.0.0.1:{server.server_address[1]}/', _Chromium()
    problems = errors = broken = images = 0
    dead = set()
    try:
        for page in pages:
            if not (DOCS / page).exists():
                print(f'MISSING {page}'); problems += 1; continue
            r = browser.load(base + page)
            gone = sorted({u for u in r.get('links', []) if not _exists(u[len(base) - 1:])})
            dead |= set(gone)
            bad = r['errors'] or r['broken'] or r['text'] < 200 or gone
            problems += bool(bad); errors += r['errors']; broken += len(r['broken']); images += r['images']
            print(f'{"BAD" if bad else "ok "} {page}: {r["text"]} chars, {r["images"]} images, '
                  f'{r["signatures"]} headings, {r["errors"]} error cells'
                  + (f', broken {r["broken"]}' if r['broken'] else '')
                  + (f', dead links {gone}' if gone else ''))
            if screenshots and page in SHOTS: browser.screenshot(ROOT / 'assets' / SHOTS[page])
    finally:
        browser.close(); server.shutdown()
    print(f'{len(pages)} pages, {errors} error cells, {broken} broken images ({images} images), '
          f'{len(dead)} dead links')
    return problems


def _exists(path: str) -> bool:
    "Whether the site serves `path` (a file, or a folder with an index.html)."
    f = DOCS / path.lstrip('/')
    return f.is_file() or (f / 'index.html').is_file()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--check', action='store_true', help='open every page in headless Chromium')
    p.add_argument('--screenshots', action='store_true', help='save assets/docs_*.png')
    p.add_argument('--fallback', action='store_true', help='render without Quarto')
    p.add_argument('--no-build', action='store_true', help='check the _docs/ there is (nbdev_docs)')
    p.add_argument('--module-map', action='store_true', help='write nbs/12_reference/modules.md only')
    a = p.parse_args(argv)
    if a.module_map:
        write_pages()
        return 0
    t = time.time()
    if not a.no_build:
        write_pages()  # the sidebar and module map follow the notebooks there are
        if shutil.which('quarto') and not a.fallback:
            quarto_build(); how = 'nbdev_docs'
        else:
            fallback_build(process()); how = 'the fallback renderer (no quarto on PATH)'
        print(f'_docs/ built with {how} in {time.time() - t:.0f} s')
    return min(check(a.screenshots), 1) if a.check else 0


if __name__ == '__main__': sys.exit(main())
