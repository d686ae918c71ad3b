"""Build the docs site into _docs/ from the notebooks, nbdev's way, and check it in headless Chromium.

    python .ci/docs.py                 build _docs/ (a few minutes: nbdev runs every show_doc)
    python .ci/docs.py --check         build, then open every page in headless Chromium
    python .ci/docs.py --check --screenshots   also save three pages as assets/docs_*.png
    python .ci/docs.py --fallback      use the fallback renderer even where Quarto is installed
    python .ci/docs.py --module-map    only rewrite nbs/12_reference/modules.md and nbs/sidebar.yml

Both builds start with nbdev's processing (`proc_nbs`: directives applied, `#| hide` cells dropped,
a `show_doc` signature for every exported name, for which exported cells and imports run, but no
example cell: nbdev would run any cell with an import, and one started Ray) into _proc/, and the
page order of nbs/sidebar.yml (tutorials first, then the layers in data-flow order). With Quarto on
PATH, `quarto render` makes the site, as `nbdev_docs` does. Without it (its PyPI package, quarto-
cli, downloads the binary when it installs, which fails offline), each processed notebook is
rendered with nbconvert into a page with the same sidebar. README.md is not touched: `.ci/readme.py`
renders it from nbs/index.ipynb."""
import argparse, base64, html, json, os, re, shutil, subprocess, sys, threading, time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / '_docs'
SHOTS = {'index.html': 'docs_index.png', '11_tutorials/stepper.html': 'docs_tutorial.png',
         '06_rollout/collector.html': 'docs_collector.png'}


def _run_only_what_show_doc_needs():
    """nbdev's show_doc processing runs exported cells, show_doc calls and every cell with an
    import; run the first two and import-only cells, never examples that happen to import."""
    import ast
    import nbdev.processors as P
    from nbdev.config import get_config
    os.chdir(ROOT)
    flags, do_eval = set(get_config().tst_flags.split()), P._do_eval
    def _do_eval(cell):
        dirs = set(getattr(cell, 'directives_', {}))
        if flags & dirs or cell.cell_type != 'code': return None
        if dirs & {'export', 'exports', 'exporti', 'exec_doc'}: return do_eval(cell)
        trees = cell.parsed_() if cell.source else None
        if not trees: return None
        if all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in trees): return True
        return P._show_docs(trees) or None
    P._do_eval = _do_eval
    # fastcore's show_doc evaluates annotations as strings and catches only ValueError/TypeError: an
    # annotation its own module cannot resolve (flax nnx.Module's) fails every Module's show_doc
    # with NameError, in nbdev_docs too. Unresolved annotations stay as written instead.
    import inspect
    import fastcore.docments as D
    def signature(obj, *args, eval_str=False, **kw):
        try: return inspect.signature(obj, *args, eval_str=eval_str, **kw)
        except NameError: return inspect.signature(obj, *args, eval_str=False, **kw)
    D.signature = signature


def process() -> Path:
    "nbdev's processing of nbs/ into _proc/ (what nbdev_docs renders), with assets/ beside it."
    os.chdir(ROOT)
    from nbdev.config import get_config
    from nbdev.quarto import refresh_quarto_yml
    from nbdev.serve import proc_nbs
    cfg = get_config()
    refresh_quarto_yml()
    write_pages()  # the sidebar and module map follow the notebooks there are
    cache = proc_nbs(cfg.nbs_path, n_workers=2)
    shutil.copytree(ROOT / 'assets', cache / 'assets', dirs_exist_ok=True)
    # the container guide, docker/README.md, as a Reference page
    text = (ROOT / 'docker' / 'README.md').read_text(encoding='utf-8')
    title, _, body = text.partition('\n')
    (cache / DOCKER_PAGE).write_text(f'---\ntitle: "{title.lstrip("# ").strip()}"\n---\n{body}',
                                     encoding='utf-8')
    for nb in cache.rglob('*.ipynb'):  # show_doc's [source](blob/main/...) links: no repo host yet
        text = nb.read_text(encoding='utf-8')
        if 'blob/' in text: nb.write_text(_SOURCE_LINK.sub('', text), encoding='utf-8')
    return cache


# `[source](blob/main/x.py#L1){target="_blank" ...}` as show_doc writes it while git_url is empty
_SOURCE_LINK = re.compile(r'\[source\]\((?:\.\./|/)*blob/[^)]*\)(?:\{[^}]*\})?')


def sidebar() -> list[tuple[str, list[str]]]:
    "(section, pages) in nbs/sidebar.yml's order; the first section is '' (the home page)."
    import yaml
    out = [('', [])]
    doc = yaml.safe_load((ROOT / 'nbs' / 'sidebar.yml').read_text())
    for item in doc['website']['sidebar']['contents']:
        if isinstance(item, str): out[0][1].append(item)
        else: out.append((item['section'], list(item['contents'])))
    return out


DOCKER_PAGE = '12_reference/docker.md'  # docker/README.md, copied in at each build
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
           'above it (`.ci/house.py` checks this). Every public name is also importable from the top:',
           '`from tunix_agentic import Trajectory`. Written by `python .ci/docs.py --module-map`.', '']
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


def quarto_build(cache: Path):
    subprocess.run(['quarto', 'render', '--no-cache'], cwd=cache, check=True)
    shutil.rmtree(DOCS, ignore_errors=True)
    shutil.move(str(cache / DOCS.name), str(DOCS))
    for page in DOCS.rglob('*.html'):  # links written for GitHub (nbs/x.ipynb) in index.ipynb
        depth = len(page.relative_to(DOCS).parts) - 1
        page.write_text(_links(page.read_text(encoding='utf-8'), depth, github_only=True),
                        encoding='utf-8')


def _html_name(page: str) -> str:
    """Where a page lands, as Quarto names it: `06_rollout/02_collector.ipynb#x` ->
    `06_rollout/collector.html#x` (the file's number prefix dropped, its folder's kept)."""
    page, hash_, frag = page.partition('#')
    folder, _, name = page.rpartition('/')
    name = re.sub(r'\.(ipynb|md)$', '.html', re.sub(r'^\d+[a-z]*_', '', name))
    return (f'{folder}/{name}' if folder else name) + hash_ + frag


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


def _links(body: str, depth: int, github_only: bool = False) -> str:
    "Links between notebooks (as written for GitHub: nbs/x.ipynb, x.md) point at the pages."
    up = '../' * depth
    def fix(m):
        url = m.group(2)
        if re.match(r'[a-z]+:|#', url): return m.group(0)
        if github_only and not url.startswith(('nbs/', 'docker/README.md')): return m.group(0)
        if url.startswith('nbs/'): url = up + url[4:]
        elif url.startswith('docker/README.md'): url = up + DOCKER_PAGE
        elif url.startswith(('docker/', 'bench/', '.ci/')): return m.group(0)
        return f'{m.group(1)}{_html_name(url) if re.search(r"\.(ipynb|md)($|#)", url) else url}"'
    return re.sub(r'((?:href|src)=")([^"]+)"', fix, body)


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
                nav += [f'<a href="{up}{_html_name(p)}"{" class=here" if p == page else ""}>'
                        f'{html.escape(str(titles[p]))}</a>' for p in items]
            desc, body = bodies[page]
            head = f'<h1>{html.escape(str(titles[page]))}</h1>'
            if desc:  # inline markdown (`code`) as Quarto renders it
                desc = re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(str(desc)))
                head += f'<p class="description">{desc}</p>'
            out = DOCS / _html_name(page)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(f'<!doctype html><html><head><meta charset="utf-8"><title>'
                           f'{html.escape(str(titles[page]))} – tunix_agentic</title>'
                           f'<style>{_CSS}</style></head><body><nav>{"".join(nav)}</nav>'
                           f'<main>{head}{_links(body, depth)}</main></body></html>', encoding='utf-8')
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
    pages = [_html_name(p) for _, items in sidebar() for p in items]
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
    p.add_argument('--module-map', action='store_true', help='write nbs/12_reference/modules.md only')
    a = p.parse_args(argv)
    if a.module_map:
        write_pages()
        return 0
    t = time.time()
    cache = process()
    if shutil.which('quarto') and not a.fallback:
        quarto_build(cache); how = 'quarto'
    else:
        fallback_build(cache); how = 'the fallback renderer (no quarto on PATH)'
    print(f'_docs/ built with {how} in {time.time() - t:.0f} s')
    return min(check(a.screenshots), 1) if a.check else 0


# nbdev processes notebooks in spawned workers, which import this file as __mp_main__: both get the
# patch (in-process processing instead breaks show_doc's annotations, which it resolves in __main__)
if __name__ in ('__main__', '__mp_main__'): _run_only_what_show_doc_needs()
if __name__ == '__main__': sys.exit(main())
