"""Write SRC/merged_import_map.json: quarto-cli's import map resolved to its vendored files.

    python .ci/quarto_import_map.py QUARTO_SRC/src

quarto-cli v1.7.34 ships every Deno dependency in src/vendor/ with a map from their URLs to the
files; its own src/import_map.json maps bare names (`fs/`, `colors`, `yaml`) to those URLs and to
`jsr:` packages. This joins the two, maps `jsr:@std/x@^v` to the vendored version, and gives every
specifier the sources import an exact entry where the joined map alone points at no file (a JSR
export name such as `io/types` is the file `types.ts`; a few deno.land/std files were vendored only
as their JSR successors). Used by .ci/quarto_offline.sh."""
import json, os, re, sys
from pathlib import Path


def _rel(p: str) -> str:
    "A path of vendor/import_map.json (relative to vendor/) made relative to src/."
    if not p.startswith(('.', '/')): return p
    return './' + os.path.normpath(os.path.join('vendor', p)) + ('/' if p.endswith('/') else '')


def _resolve(spec: str, imports: dict) -> str | None:
    if spec in imports: return imports[spec]
    pre = max((k for k in imports if k.endswith('/') and spec.startswith(k)), key=len, default=None)
    return imports[pre] + spec[len(pre):] if pre else None


def _jsr_dir(src: Path, target: str) -> str | None:
    "`jsr:/@std/fs@^0.224.0/` -> the vendored folder of the newest matching version."
    m = re.match(r'jsr:/?@std/([\w-]+)@\^?([\d.]+[^/]*)(/?)$', target)
    if not m: return None
    name, ver, slash = m.groups()
    d = src / 'vendor' / 'jsr.io' / '@std' / {'collection': 'collections'}.get(name, name)
    if not d.is_dir(): return None
    vs = sorted(v.name for v in d.iterdir() if v.is_dir())
    v = [x for x in vs if x.split('.')[:2] == ver.split('.')[:2]] or vs
    base = './' + (d / v[-1]).relative_to(src).as_posix() + '/'
    return base if slash else base + 'mod.ts'


def _fix(src: Path, path: str) -> str | None:
    "A vendored file for a mapped `path` that does not exist, or None."
    m = re.match(r'\./vendor/deno\.land/std@[\d.]+/([\w-]+)/(.+)$', path)
    if m:
        mod, f = m.groups()
        d = src / 'vendor' / 'jsr.io' / '@std' / mod
        for v in sorted(d.iterdir(), reverse=True) if d.is_dir() else []:
            for ff in (f, f.replace('-', '_')):
                if (v / ff).is_file(): return './' + (v / ff).relative_to(src).as_posix()
        return None
    head, _, last = path.rpartition('/')
    snake = f'{head}/{last.replace("-", "_")}.ts'
    for cand in (path + '.ts', snake, path + '/mod.ts', path + '.js'):
        if (src / cand).is_file(): return cand
    return None


def main(src: Path):
    own = json.loads((src / 'import_map.json').read_text())['imports']
    ven = json.loads((src / 'vendor' / 'import_map.json').read_text())
    imports = {k: _rel(v) for k, v in ven['imports'].items()}
    for k, target in own.items():
        if k in ven['imports'] and not k.startswith(('http', 'jsr', 'npm', '/')): continue
        imports[k] = _jsr_dir(src, target) or _resolve(target, imports) or target
    for k, v in list(imports.items()):  # skypack modules vendored as NAME.js
        if v.startswith('./vendor/') and not (src / v).exists() and (src / (v + '.js')).is_file():
            imports[k] = v + '.js'
    specs = set()
    for f in src.rglob('*.ts'):
        if 'vendor' in f.parts or 'resources' in f.parts: continue
        specs |= set(re.findall(r'''(?:from|import)\s*\(?\s*["']([^"'./][^"']*)["']''',
                                f.read_text(errors='replace')))
    fixed = 0
    for spec in sorted(specs):
        path = _resolve(spec, imports)
        if path and path.startswith('./') and not (src / path).exists():
            if (new := _fix(src, path)): imports[spec], fixed = new, fixed + 1
    scopes = {(_rel(s) if s.startswith('.') else s): {k: _rel(v) for k, v in m.items()}
              for s, m in ven.get('scopes', {}).items()}
    (src / 'merged_import_map.json').write_text(json.dumps({'imports': imports, 'scopes': scopes},
                                                           indent=1))
    print(f'{src}/merged_import_map.json: {len(imports)} imports, {fixed} fixed')


if __name__ == '__main__': main(Path(sys.argv[1]).resolve())
