"""Notebook rhythm statistics (issue 10, ../shared/STYLE.md): how many exported cells are followed at once
by an example or a check (the next cell is code that is not exported), and how long exported cells are.

Usage: python .ci/nb_rhythm.py [nbs/*.ipynb ...] [--per-notebook]
"""
import json, re, statistics, sys
from pathlib import Path

EXPORT = re.compile(r'^#\|\s*export', re.M)


def cells(path):
    return [(c['cell_type'], ''.join(c['source'])) for c in json.loads(Path(path).read_text())['cells']]


def stats(path):
    cs, followed, lengths = cells(path), 0, []
    exported = [i for i, (k, s) in enumerate(cs) if k == 'code' and EXPORT.search(s)]
    for i in exported:
        body = [l for l in cs[i][1].splitlines() if l.strip() and not l.startswith('#|')]
        lengths.append(len(body))
        nxt = cs[i + 1] if i + 1 < len(cs) else None
        followed += bool(nxt and nxt[0] == 'code' and not EXPORT.search(nxt[1]))
    return len(exported), followed, lengths


def main(argv):
    per = '--per-notebook' in argv
    paths = [a for a in argv if not a.startswith('--')] or sorted(Path('nbs').glob('[0-9]*.ipynb'))
    total = followed = 0; lengths = []
    for p in paths:
        n, f, ls = stats(p)
        total, followed, lengths = total + n, followed + f, lengths + ls
        if per and n: print(f'{Path(p).name:32s} {n:4d} exported, {f / n:5.0%} followed, '
                            f'median {statistics.median(ls):g} lines')
    print(f'{len(paths)} notebooks, {total} exported cells: {followed / total:.0%} followed at once by an '
          f'example or a check; median exported cell {statistics.median(lengths):g} lines '
          f'(code lines, directives excluded)')


if __name__ == '__main__': main(sys.argv[1:])
