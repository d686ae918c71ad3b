"""Rewrite the `#| export` cells of notebooks so no statement is joined to another by `;`.

`a; b` becomes two lines at the same indentation; a one-line compound statement whose body holds
joined statements (`if x: a; b`, `for ...: a; b`, `try: a; b`, `else: a; b`) becomes an indented
block. A one-line body of one statement (`if x: return y`) is left alone. Statement positions come
from `ast`, the semicolons from `tokenize`; a cell is written only if its module's `ast.dump` (which
leaves out line numbers) is unchanged, else it is reported and left as it was.

Usage: python .ci/split_semicolons.py NOTEBOOK... [--check]   (--check: report, write nothing)
"""
import ast, io, json, re, sys, tokenize
from pathlib import Path

EXPORT = re.compile(r'^#\|\s*export', re.M)
BODIES = ('body', 'orelse', 'finalbody', 'handlers')


def semicolons(src: str) -> int:
    "The `;` operators in `src` (strings and comments aside)."
    toks = tokenize.generate_tokens(io.StringIO(src).readline)
    return sum(1 for t in toks if t.type == tokenize.OP and t.string == ';')


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode())


def _edits(src: str) -> list[tuple[int, int, int, int, str]]:
    "`(line0, col0, line1, col1, text)` replacements (1-based lines, character columns)."
    lines, edits = src.splitlines(), []
    pos = lambda ln, col: (ln, _char_col(lines[ln - 1], col))
    for node in ast.walk(ast.parse(src)):
        for field in BODIES:
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt): continue
            first = body[0]
            on_line = [s for s in body if s.lineno == first.lineno]
            ln, c0 = pos(first.lineno, first.col_offset)
            header = lines[ln - 1][:c0].rstrip()
            indent = ' ' * _char_col(lines[ln - 1], first.col_offset)
            if header.endswith(':'):  # a one-line compound statement: `if x: a; ...`
                if len(on_line) < 2: continue   # `if x: a` stays on one line
                owner = node.col_offset if not isinstance(node, ast.Module) else 0
                indent = ' ' * (_char_col(lines[node.lineno - 1], owner) + 4)
                edits.append((ln, len(header), ln, c0, '\n' + indent))
            for prev, s in zip(body, body[1:]):
                if prev.end_lineno == s.lineno:  # `prev; s`
                    a, b = pos(prev.end_lineno, prev.end_col_offset), pos(s.lineno, s.col_offset)
                    edits.append((*a, *b, '\n' + indent))
    return edits


def _apply(src: str, edits) -> str:
    lines = src.split('\n')
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        assert l0 == l1, (l0, l1)
        line = lines[l0 - 1]
        lines[l0 - 1] = line[:c0] + text + line[c1:]
    return '\n'.join(lines)


def _trailing(src: str) -> str:
    "Drop a `;` that ends a line (`x = 1;`): nothing follows it."
    toks, out = list(tokenize.generate_tokens(io.StringIO(src).readline)), src.split('\n')
    for t, nxt in reversed(list(zip(toks, toks[1:]))):
        if t.string == ';' and t.type == tokenize.OP and nxt.type in (tokenize.NEWLINE, tokenize.COMMENT):
            r, c = t.start
            rest = out[r - 1][c + 1:].strip()
            out[r - 1] = out[r - 1][:c].rstrip() + ('  ' + rest if rest else '')
    return '\n'.join(out)


def split(src: str) -> str:
    "`src` with each `;`-joined statement on its own line; raises ValueError if the AST would change."
    new = src
    for _ in range(5):   # an expanded block may hold joined statements of its own
        edits = _edits(new)
        if not edits: break
        new = _apply(new, edits)
    new = _trailing(new)
    if ast.dump(ast.parse(new)) != ast.dump(ast.parse(src)):
        raise ValueError('the rewritten cell parses to a different AST')
    return new


def fix_notebook(path: Path, write: bool = True) -> tuple[int, int, list[str]]:
    "Semicolons in the notebook's export cells before and after, and the cells refused."
    nb = json.loads(path.read_text())
    before = after = 0
    refused = []
    for cell in nb['cells']:
        src = ''.join(cell['source'])
        if cell['cell_type'] != 'code' or not EXPORT.search(src): continue
        n = semicolons(src)
        before += n
        if not n:
            continue
        try:
            new = split(src)
        except (ValueError, SyntaxError, AssertionError) as e:
            refused.append(f"{path}: cell {cell.get('id')}: {e}")
            after += n
            continue
        after += semicolons(new)
        cell['source'] = new.splitlines(keepends=True)
    if write and before != after:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return before, after, refused


def main(argv: list[str]) -> int:
    write, paths = '--check' not in argv, [Path(a) for a in argv if not a.startswith('--')]
    if not paths:
        print(__doc__)
        return 2
    bad = []
    for p in paths:
        before, after, refused = fix_notebook(p, write)
        bad += refused
        print(f'{p}: {before} semicolons in exported cells -> {after}')
    for r in bad: print('refused:', r)
    return 1 if bad else 0


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
