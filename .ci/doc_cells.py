"""Static checks of the cells nbdev's docs processing executes (`nbdev_docs`, `nbdev_proc_nbs`).

    python .ci/doc_cells.py               executed cells that mix an import with code using a
                                          name no executed cell defines (exit 1 if any): 2 s
    python .ci/doc_cells.py --signatures  exported names whose signature show_doc cannot read

Why: nbdev runs a cell at docs time if it is exported, calls `show_doc`, or contains an import
(`nbdev.processors._do_eval`), without the example cells above it; and show_doc evaluates
annotations, raising NameError for a name its module lacks. Both fail only in the (minutes-long)
docs build, which CI does not run; these find them in seconds. To run the cells as nbdev does,
use `nbdev_proc_nbs`."""
import ast, os, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bound(tree) -> set[str]:
    "Names a cell defines: imports, defs, classes, assignment targets, parameters."
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {'*' if a.name == '*' else (a.asname or a.name.split('.')[0]) for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): out.add(n.name)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load): out.add(n.id)
        elif isinstance(n, ast.arg): out.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name: out.add(n.name)
    return out


def _unresolved(trees, known: set[str]) -> list[str]:
    "Names `trees` load that neither they, an earlier executed cell, nor builtins define."
    import builtins
    if '*' in known: return []
    have = known | set(dir(builtins)) | {'__name__', 'display', 'get_ipython', 'show_doc'}
    for t in trees: have |= _bound(t)
    return sorted({n.id for t in trees for n in ast.walk(t)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in have})


def _annotation_names(trees) -> set[str]:
    """Names in the annotations show_doc evaluates for the names a cell defines: a function's
    parameters and return; a class's `__init__`, or its fields when it has none (a dataclass)."""
    anns = []
    def of_function(f):
        a = f.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        anns.extend(x.annotation for x in params if x is not None and x.annotation is not None)
        if f.returns is not None: anns.append(f.returns)
    for t in trees:
        if not isinstance(t, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): continue
        if t.name.startswith('_') and not t.name.startswith('__'): continue  # no show_doc
        if isinstance(t, (ast.FunctionDef, ast.AsyncFunctionDef)): of_function(t)
        elif isinstance(t, ast.ClassDef):
            init = [f for f in t.body if isinstance(f, ast.FunctionDef) and f.name == '__init__']
            if init: of_function(init[0])
            else: anns.extend(f.annotation for f in t.body if isinstance(f, ast.AnnAssign))
    return {n.id for a in anns for n in ast.walk(a) if isinstance(n, ast.Name)}


def _kind(cell) -> str:
    "Why nbdev runs `cell`: export, show_doc, imports (import-only) or mixed."
    import nbdev.processors as P
    if cell.directives_.keys() & {'export', 'exports', 'exporti', 'exec_doc'}: return 'export'
    trees = cell.parsed_()
    if P._show_docs(trees): return 'show_doc'
    if all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in trees): return 'imports'
    return 'mixed'


def _processor(found: list):
    "nbdev's docs processors, with exec_show_docs recording (not running) the cells it would run."
    import builtins
    import nbdev.processors as P
    class exec_recorded(P.exec_show_docs):
        def begin(self): self.known = set()
        def end(self): pass
        def __call__(self, cell):
            if not self.nb.has_docs_: return
            if P.str2bool(getattr(self.nb, 'frontmatter_', {}).get('skip_showdoc', False)): return
            if not P._do_eval(cell): return
            trees, kind = cell.parsed_(), _kind(cell)
            gone = _unresolved(trees, self.known) if kind == 'mixed' else []
            if gone: found.append((cell.idx_, kind, cell.source, f'uses {", ".join(gone)}'))
            for t in trees: self.known |= _bound(t)
            if cell.directives_.keys() & {'export', 'exports', 'exec_doc'}:  # then show_doc
                late = sorted(_annotation_names(trees) - self.known - set(dir(builtins)))
                if late and '*' not in self.known:
                    found.append((cell.idx_, 'annotation', cell.source,
                                  f'annotations name {", ".join(late)}, undefined when '
                                  'show_doc runs (defined later or never)'))
    return [exec_recorded if p is P.exec_show_docs else p for p in P.FilterDefaults().procs()]


def check(nb_path: Path) -> list:
    "(cell index, kind, source, problem) for each offending cell of the notebook at `nb_path`."
    from nbdev.process import NBProcessor
    found = []
    NBProcessor(nb_path, procs=_processor(found), process=True)
    return found


def notebooks() -> list[Path]:
    from nbdev.doclinks import nbglob
    os.chdir(ROOT)
    return sorted(Path(p) for p in nbglob(ROOT / 'nbs', file_glob='*.ipynb'))


FLAX_FIX = 'flax.nnx.pytreelib.Any = typing.Any'  # the hidden cell of notebooks with nnx Modules


def bad_signatures() -> list[str]:
    """Exported names whose `inspect.signature(..., eval_str=True)` raises NameError, as show_doc's
    does, except flax's own (an nnx.Module's) where the notebook binds the name (FLAX_FIX)."""
    import importlib, inspect, re
    sys.path.insert(0, str(ROOT))
    from tunix_agentic._modidx import d
    bad = []
    for mod, entries in d['syms'].items():
        m = importlib.import_module(mod)
        for sym in entries:
            o = m
            try:
                for part in sym[len(mod) + 1:].split('.'): o = getattr(o, part)
            except AttributeError: continue
            if not callable(o): continue
            try: inspect.signature(o, eval_str=True)
            except NameError as e:
                src = Path(m.__file__).read_text(encoding='utf-8')
                nb = re.search(r'File to edit: (\S+\.ipynb)', src)
                nb_text = (Path(m.__file__).parent / nb.group(1)).read_text() if nb else ''
                flax_own = isinstance(o, type) and type(o).__module__.startswith('flax.')
                if not (flax_own and FLAX_FIX in nb_text): bad.append(f'{sym}: NameError: {e}')
            except (ValueError, TypeError): pass
    return bad


def main(argv: list[str]) -> int:
    if '--signatures' in argv:
        bad = bad_signatures()
        print(*bad, f'{len(bad)} exported names whose signature show_doc cannot read', sep='\n')
        return min(len(bad), 1)
    paths = [Path(a).resolve() for a in argv] or notebooks()
    os.chdir(ROOT)
    total = 0
    for p in paths:
        found = check(p)
        total += len(found)
        for idx, kind, src, err in found:
            first = next((l for l in src.splitlines() if l.strip() and not l.startswith('#|')), '')
            print(f'{p.relative_to(ROOT)} cell {idx} ({kind}): {first[:70]}\n    {err[:300]}')
    print(f'{len(paths)} notebooks, {total} cells that nbdev_docs runs and that use a name '
          'only an unexecuted cell defines')
    return min(total, 1)


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
