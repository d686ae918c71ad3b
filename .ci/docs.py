"""Build the docs site with nbdev's own `nbdev_docs`, from notebooks run first, then check it.

    python .ci/docs.py               run the notebooks, nbdev_docs, check (needs `quarto` on PATH)
    python .ci/docs.py --check       only check the _docs/ there is
    python .ci/docs.py --module-map  only rewrite nbs/12_reference/modules.md

Why more than `nbdev_docs`: the notebooks are committed without outputs, so its pages would show
none. `.ci/run_notebooks.py --save` first runs them in kernels (tst_flags cells skipped, widgets
saved as static HTML) into _exec/nbs, beside copies of nbs/'s other files; `nbdev_docs --path
_exec/nbs` renders that folder (index.ipynb is copied unrun: it is also README.md). The check
counts pages and pages with outputs, and fails on a missing page, an error output, an absolute
localhost link (settings.ini's doc_host is empty until there is a public host, so nbdev's links
are root-relative), markdown shown raw in a signature, or a link to a file the site lacks.
"""
import argparse, ast, json, re, shutil, subprocess, sys, time
from pathlib import Path
from urllib.parse import urljoin

sys.path.insert(0, str(Path(__file__).parent))
from quarto_hooks import COMMENT, SIGNATURE  # noqa: E402  (Quarto's post-render step)

ROOT = Path(__file__).resolve().parents[1]
NBS, EXEC, DOCS = ROOT / 'nbs', ROOT / '_exec' / 'nbs', ROOT / '_docs'
LOCALHOST = re.compile(r'(?:href|src)="https?://(?:localhost|127\.0\.0\.1)[:/"]')
OUTPUT = re.compile(r'class="cell-output')
ERROR = re.compile(r'class="[^"]*cell-output-error')  # an error output (a printed traceback is not)


def module_map() -> str:
    "nbs/12_reference/modules.md: each notebook, the module it exports and its summary line."
    out = ['---', 'title: Module map', 'description: Every notebook, the module it exports, and '
           'what it holds, in the order data flows.', '---', '',
           'Each notebook in `nbs/` exports one module of `tunix_agentic/`; a module imports only '
           'modules', 'above it (`.ci/house.py` checks this). The public names (06_package lists them) '
           'also import from the top:',
           '`from tunix_agentic import Trajectory`. Written by `python .ci/docs.py --module-map`.',
           '']
    folder = None
    for nb_path in sorted(NBS.glob('[0-9]*/[0-9]*.ipynb')):
        srcs = [(c['cell_type'], ''.join(c['source']))
                for c in json.loads(nb_path.read_text(encoding='utf-8'))['cells']]
        exp = next((m.group(1) for _, s in srcs
                    if (m := re.search(r'#\|\s*default_exp\s+(\S+)', s))), None)
        summary = next((m.group(1).strip() for t, s in srcs
                        if t == 'markdown' and (m := re.search(r'^>\s*(.+)$', s, re.M))), '')
        if nb_path.parent.name != folder:
            folder = nb_path.parent.name
            out += ['', f'## {folder.split("_", 1)[1]}', '',
                    '| notebook | module | what it holds |', '|---|---|---|']
        module = f'`tunix_agentic.{exp}`' if exp else '—'
        out.append(f'| [{nb_path.stem}](../{folder}/{nb_path.name}) | {module} | {summary} |')
    listed = '\n'.join(out)
    mods = ['.'.join(p.relative_to(ROOT).with_suffix('').parts)
            for p in (ROOT / 'tunix_agentic').rglob('*.py')
            if p.name not in ('__init__.py', '__main__.py', '_modidx.py')]
    extra = sorted(m for m in mods if f'`{m}`' not in listed)
    if extra:
        out += ['', '## Modules not exported from a notebook', '']
        for m in extra:
            doc = ast.get_docstring(ast.parse((ROOT / (m.replace('.', '/') + '.py')).read_text()))
            out.append(f'- `{m}`: {(doc or "").splitlines()[0] if doc else ""}')
    return '\n'.join(out) + '\n'


def run_notebooks(workers: int):
    "nbs/ into _exec/nbs: notebooks run in kernels (outputs kept), every other file copied."
    from nbdev.quarto import refresh_quarto_yml
    refresh_quarto_yml()  # nbs/nbdev.yml from settings.ini, before it is copied
    shutil.rmtree(EXEC.parent, ignore_errors=True)
    shutil.copytree(NBS, EXEC, copy_function=shutil.copy2,  # mtimes kept: nbdev_readme's check
                    ignore=shutil.ignore_patterns('.*', '_*.ipynb', '_proc', '_docs'))
    nbs = [str(p) for p in sorted(NBS.rglob('[0-9]*.ipynb')) if '.ipynb_checkpoints' not in str(p)]
    r = subprocess.run([sys.executable, str(ROOT / '.ci' / 'run_notebooks.py'), '--save', str(EXEC),
                        '--workers', str(workers), *nbs], cwd=ROOT)
    if r.returncode: raise SystemExit('docs: a notebook failed (table above); no site built')


def build():
    "`nbdev_docs` on the executed copy of nbs/."
    shutil.rmtree(ROOT / '_proc', ignore_errors=True)  # built from _exec/nbs, not nbs/
    exe = Path(sys.executable).with_name('nbdev_docs')
    subprocess.run([str(exe) if exe.exists() else 'nbdev_docs', '--path', str(EXEC)], cwd=ROOT,
                   check=True)


def check(site: Path = DOCS) -> dict:
    "Counts for the built site under `site`, and the problems found (one line each)."
    pages = sorted(site.rglob('*.html'))
    found = dict(pages=len(pages), with_outputs=0, localhost_links=0, problems=[])
    for page in pages:
        text, name = page.read_text(encoding='utf-8', errors='replace'), page.relative_to(site)
        found['with_outputs'] += bool(OUTPUT.search(text))
        n = len(LOCALHOST.findall(text))
        found['localhost_links'] += n
        if n: found['problems'].append(f'{name}: {n} absolute localhost links')
        if ERROR.search(text): found['problems'].append(f'{name}: a cell shows an error')
        raw = [c.group(2) for s in SIGNATURE.finditer(text) for c in COMMENT.finditer(s.group(2))
               if re.search(r'`|\]\(', c.group(2))]
        if raw: found['problems'].append(f'{name}: markdown shown raw in a signature: {raw[0]}')
        for url in re.findall(r'(?:href|src)="([^"#?]+)', text):
            if re.match(r'[a-z]+:|//', url): continue
            target = site / urljoin(f'/{name.as_posix()}', url).lstrip('/')  # as a browser would
            if not (target.exists() or (target / 'index.html').exists()):
                found['problems'].append(f'{name}: links to {url}, which the site lacks')
    if not pages: found['problems'].append(f'{site}: no pages (build first)')
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--check', action='store_true', help='only check the _docs/ there is')
    p.add_argument('--module-map', action='store_true', help='only write the module map')
    p.add_argument('--workers', type=int, default=2, help='notebooks run at once')
    a = p.parse_args(argv)
    (NBS / '12_reference' / 'modules.md').write_text(module_map(), encoding='utf-8')
    if a.module_map: return 0
    if not a.check:
        if not shutil.which('quarto'): raise SystemExit('docs: no quarto (.ci/quarto_offline.sh)')
        t = time.time()
        run_notebooks(a.workers)
        build()
        print(f'_docs/ built with nbdev_docs from executed notebooks in {time.time() - t:.0f} s')
    found = check()
    print(*found['problems'][:50], sep='\n')
    print(f"{found['pages']} pages, {found['with_outputs']} with cell outputs, "
          f"{found['localhost_links']} absolute localhost links, {len(found['problems'])} problems")
    return 1 if found['problems'] else 0


if __name__ == '__main__': sys.exit(main())
