"""House rules a reviewer would otherwise re-check by hand, over the exported package and notebooks.

Fails (exit 1) on: an import cycle between modules; an import against the notebook order (a module
may import only modules whose notebooks come earlier); a private name imported from another module;
two notebooks of one folder (or two folders) sharing a number prefix; a module docstring that is not
a whole sentence; a logger listed in `__all__`; a module over 400 lines; a line over 100 columns in
exported code (nbdev's own `__all__` lines and lines of verbatim string data aside); fewer than 70%
of exported cells followed at once by an example or a check, or a median exported cell over 15 code
lines; statements joined by `;` in exported code (counted with `tokenize`, per module;
`.ci/split_semicolons.py` rewrites a notebook's export cells without them). Prints the figures
either way.

Usage: python .ci/house.py [--per-notebook]
"""
import ast, io, json, re, statistics, sys, tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG, NBS, LIB = 'tunix_agentic', ROOT / 'nbs', ROOT / 'tunix_agentic'
EXPORT = re.compile(r'^#\|\s*export', re.M)
DEFAULT_EXP = re.compile(r'^#\|\s*default_exp\s+(\S+)', re.M)
MAX_MODULE_LINES, MAX_COLUMNS, MIN_FOLLOWED, MAX_MEDIAN_CELL = 400, 100, 0.70, 15


def notebooks() -> list[Path]:
    "Numbered notebooks in folder-then-file order (scratch `_*` notebooks and index excluded)."
    return sorted(p for p in NBS.rglob('[0-9]*.ipynb') if not any(q.startswith(('_', '.')) for q in p.parts))


def cells(path: Path) -> list[tuple[str, str]]:
    return [(c['cell_type'], ''.join(c['source'])) for c in json.loads(path.read_text())['cells']]


def module_order() -> dict[str, int]:
    "Position of each exported module in notebook order."
    order = {}
    for i, nb in enumerate(notebooks()):
        for kind, src in cells(nb):
            m = DEFAULT_EXP.search(src) if kind == 'code' else None
            if m: order[f'{PKG}.{m.group(1)}'] = i
    return order


def module_name(path: Path) -> str:
    return '.'.join((PKG, *path.relative_to(LIB).with_suffix('').parts))


def imports(path: Path) -> list[tuple[str, list[str]]]:
    "(imported module, names) for every import of the package in a module, lazy ones included."
    me, out = module_name(path).split('.'), []
    pkg = me[:-1] if path.name != '__init__.py' else me
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            mod = '.'.join(base + ([node.module] if node.module else []))
            if not mod.startswith(PKG): continue
            names = [a.name for a in node.names]
            if not node.module:  # from . import x: x is a module
                out += [(f'{mod}.{n}', []) for n in names]
            else: out.append((mod, names))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith(PKG + '.')]
    return out


def check_imports(mods: dict[str, Path], order: dict[str, int]) -> dict[str, list]:
    graph, against, private = defaultdict(set), [], []
    for name, path in mods.items():
        for target, names in imports(path):
            if target not in mods: target = target.rsplit('.', 1)[0] if target.rsplit('.', 1)[0] in mods else target
            if target == name or target not in mods or target.endswith('._modidx'): continue
            graph[name].add(target)
            if name in order and target in order and order[target] >= order[name]:
                against.append(f'{name} imports {target} (notebook later or same)')
            private += [f'{name} imports {target}.{n}' for n in names if n.startswith('_')]
    cycles, state = [], {}
    def visit(n, stack):
        state[n] = 1; stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1: cycles.append(' -> '.join(stack[stack.index(m):] + [m]))
            elif not state.get(m): visit(m, stack)
        stack.pop(); state[n] = 2
    for n in sorted(mods):
        if not state.get(n): visit(n, [])
    return {'import cycles': cycles, 'imports against the notebook order': against,
            'private cross-module imports': private}


def check_prefixes() -> list[str]:
    dup = []
    for folder in [NBS, *sorted(p for p in NBS.iterdir() if p.is_dir())]:
        seen = defaultdict(list)
        for p in folder.iterdir():
            m = re.match(r'(\d+[a-z]?)_', p.name)
            if m and (p.suffix == '.ipynb' or p.is_dir()): seen[m.group(1)].append(p.name)
        dup += [f'{folder.relative_to(ROOT)}: {v}' for v in seen.values() if len(v) > 1]
    return dup


def verbatim_lines(text: str, tree: ast.Module) -> set[int]:
    "Lines that hold only string data (a chat template, a corpus), docstrings excepted: kept verbatim."
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, 'body', None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], 'value', None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            docs |= set(range(body[0].lineno, body[0].end_lineno + 1))
    lines = text.splitlines()
    covered = [[False] * len(l) for l in lines]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.STRING: continue
        (r0, c0), (r1, c1) = tok.start, tok.end
        for r in range(r0, r1 + 1):
            a, b = (c0 if r == r0 else 0), (c1 if r == r1 else len(lines[r - 1]))
            for c in range(a, min(b, len(lines[r - 1]))): covered[r - 1][c] = True
    return {i for i, (l, cov) in enumerate(zip(lines, covered), 1) if i not in docs and any(cov)
            and not ''.join(ch for ch, c in zip(l, cov) if not c).strip(' ()[],+\\')}


def check_modules(mods: dict[str, Path]) -> dict[str, list]:
    docs, loggers, long_mods, long_lines = [], [], [], []
    for name, path in mods.items():
        text = path.read_text(); tree = ast.parse(text)
        doc = ast.get_docstring(tree)
        if path.name != '__init__.py' or doc:  # nbdev puts __version__ first in the top __init__
            if not doc or not re.match(r'^[A-Z`"\'(]', doc) or not doc.rstrip().endswith(('.', '!', '?')):
                docs.append(f'{name}: {doc!r}')
        logs, exported = set(), []
        for node in tree.body:
            if isinstance(node, ast.Assign) and 'getLogger' in ast.unparse(node.value):
                logs |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in node.targets):
                exported = [getattr(e, 'value', None) for e in getattr(node.value, 'elts', [])]
        loggers += [f'{name}.{n}' for n in exported if n in logs]
        lines = text.splitlines()
        if len(lines) > MAX_MODULE_LINES: long_mods.append(f'{name}: {len(lines)} lines')
        verbatim = verbatim_lines(text, tree)
        generated = set()  # nbdev writes `__all__` itself, wrapped at 120 columns
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in node.targets):
                generated |= set(range(node.lineno, node.end_lineno + 1))
        long_lines += [f'{path.relative_to(ROOT)}:{i}: {len(l)} columns' for i, l in enumerate(lines, 1)
                       if len(l) > MAX_COLUMNS and i not in generated and i not in verbatim]
    return {'module docstrings that are not a whole sentence': docs, 'loggers in __all__': loggers,
            f'modules over {MAX_MODULE_LINES} lines': long_mods,
            f'exported lines over {MAX_COLUMNS} columns': long_lines}


def semicolons(mods: dict[str, Path]) -> list[str]:
    "`module: n` for each module with statements joined by `;` (an OP token; strings aside)."
    out = []
    for name, path in mods.items():
        toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        n = sum(1 for t in toks if t.type == tokenize.OP and t.string == ';')
        if n: out.append((n, name))
    return [f'{name}: {n}' for n, name in sorted(out, reverse=True)]


def rhythm(per_notebook: bool) -> tuple[float, float, list[str]]:
    total = followed = 0; lengths = []
    for p in notebooks():
        cs = cells(p)
        exported = [i for i, (k, s) in enumerate(cs) if k == 'code' and EXPORT.search(s)]
        ls = [len([l for l in cs[i][1].splitlines() if l.strip() and not l.startswith('#|')]) for i in exported]
        f = sum(1 for i in exported if i + 1 < len(cs) and cs[i + 1][0] == 'code'
                and not EXPORT.search(cs[i + 1][1]))
        total, followed, lengths = total + len(exported), followed + f, lengths + ls
        if per_notebook and exported:
            print(f'  {str(p.relative_to(NBS)):40s} {len(exported):4d} exported, {f / len(exported):5.0%} '
                  f'followed, median {statistics.median(ls):g} lines')
    share, median = followed / total, statistics.median(lengths)
    bad = []
    if share < MIN_FOLLOWED: bad.append(f'{share:.0%} of exported cells followed by an example or check')
    if median > MAX_MEDIAN_CELL: bad.append(f'median exported cell {median:g} lines')
    print(f'rhythm: {len(notebooks())} notebooks, {total} exported cells, {share:.0%} followed at once by an '
          f'example or a check (at least {MIN_FOLLOWED:.0%}), median exported cell {median:g} code lines '
          f'(at most {MAX_MEDIAN_CELL})')
    return share, median, bad


def main(argv: list[str]) -> int:
    mods = {module_name(p): p for p in sorted(LIB.rglob('*.py')) if p.name != '_modidx.py'}
    order = module_order()
    found = {**check_imports(mods, order), 'duplicated notebook prefixes': check_prefixes(),
             **check_modules(mods)}
    found['notebook rhythm'] = rhythm('--per-notebook' in argv)[2]
    found['modules with `;`-joined statements'] = semicolons(mods)
    folders = sorted({n.split('.')[1] for n in mods if n.count('.') >= 2})
    print(f'house: {len(mods)} modules in {len(folders)} folders ({", ".join(folders)}), '
          f'{sum(len(p.read_text().splitlines()) for p in mods.values())} lines')
    for what, items in found.items():
        print(f'{len(items):4d} {what}')
        for it in items[:20]: print(f'       {it}')
        if len(items) > 20: print(f'       ... and {len(items) - 20} more')
    return 1 if any(found.values()) else 0


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
