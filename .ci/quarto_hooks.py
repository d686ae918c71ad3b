"""Quarto's pre- and post-render steps for the docs site (nbs/_quarto.yml names this file), so that
plain `nbdev_docs` builds the whole site. Quarto runs it in nbdev's processed copy of nbs/ (_proc/),
once before rendering (QUARTO_PROJECT_INPUT_FILES set) and once after (QUARTO_PROJECT_OUTPUT_FILES).

Before: assets/ copied in (the pictures the pages show), docker/README.md added as a Reference page,
and show_doc's `[source]` links dropped while settings.ini has no git_url (they would point at
/blob/main/..., a page no host serves). After: links written for GitHub in nbs/index.ipynb (which is
also README.md: `nbs/x.ipynb`, `docker/README.md`) pointed at the pages; and when the render was
nbdev's README (`nbdev_readme`, run by `nbdev_docs` and `nbdev_prepare` whenever nbs/index.ipynb is
newer than README.md, as in a fresh clone), its output replaced by what `.ci/readme.py` renders, so
that README.md stays byte for byte the file in git (Quarto's GitHub markdown would drop the summary
line, rewrap every paragraph and link names to doc_host, http://localhost:8000, from GitHub).
Standard library only: Quarto runs it with whichever python3 is on PATH. `.ci/docs.py --fallback`
runs the same steps."""
import configparser, os, re, shutil, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / '.ci'))
DOCKER_PAGE = '12_reference/docker.md'  # docker/README.md, copied in at each build
# `[source](blob/main/x.py#L1){target="_blank" ...}` as show_doc writes it while git_url is empty
_SOURCE_LINK = re.compile(r'\[source\]\((?:\.\./|/)*blob/[^)]*\)(?:\{[^}]*\})?')


def git_url() -> str:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    return cfg['DEFAULT'].get('git_url', '').strip()


def pre_render(proc: Path):
    "assets/, the container guide and (without a git_url) no source links, in nbdev's _proc/."
    shutil.copytree(ROOT / 'assets', proc / 'assets', dirs_exist_ok=True)
    text = (ROOT / 'docker' / 'README.md').read_text(encoding='utf-8')
    title, _, body = text.partition('\n')
    page = proc / DOCKER_PAGE
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f'---\ntitle: "{title.lstrip("# ").strip()}"\n---\n{body}', encoding='utf-8')
    if git_url(): return
    for nb in proc.rglob('*.ipynb'):
        text = nb.read_text(encoding='utf-8')
        if 'blob/' in text: nb.write_text(_SOURCE_LINK.sub('', text), encoding='utf-8')


def html_name(page: str) -> str:
    """Where a page lands, as Quarto names it: `06_rollout/02_collector.ipynb#x` ->
    `06_rollout/collector.html#x` (the file's number prefix dropped, its folder's kept)."""
    page, hash_, frag = page.partition('#')
    folder, _, name = page.rpartition('/')
    name = re.sub(r'\.(ipynb|md)$', '.html', re.sub(r'^\d+[a-z]*_', '', name))
    return (f'{folder}/{name}' if folder else name) + hash_ + frag


def links(body: str, depth: int, github_only: bool = False) -> str:
    """Links between notebooks as written for GitHub (nbs/x.ipynb, docker/README.md) point at the
    pages; with `github_only` (Quarto already rewrote x.ipynb links) only those two kinds."""
    up = '../' * depth
    def fix(m):
        url = m.group(2)
        if re.match(r'[a-z]+:|#', url): return m.group(0)
        if github_only and not url.startswith(('nbs/', 'docker/README.md')): return m.group(0)
        if url.startswith('nbs/'): url = up + url[4:]
        elif url.startswith('docker/README.md'): url = up + DOCKER_PAGE
        elif url.startswith(('docker/', 'bench/', '.ci/')): return m.group(0)
        return f'{m.group(1)}{html_name(url) if re.search(r"\.(ipynb|md)($|#)", url) else url}"'
    return re.sub(r'((?:href|src)=")([^"]+)"', fix, body)


def post_render(out: Path, files: list[str]):
    "GitHub-style links in the pages pointed at the pages; README.md as readme.py renders it."
    for f in files:
        page = Path(f) if Path(f).is_absolute() else Path.cwd() / f
        if page.name == 'README.md' and page.exists():
            import readme  # .ci/readme.py, beside this file
            page.write_text(readme.render(), encoding='utf-8')
        if page.suffix != '.html' or not page.exists(): continue
        depth = len(page.resolve().relative_to(out.resolve()).parts) - 1
        text = page.read_text(encoding='utf-8')
        fixed = links(text, depth, github_only=True)
        if fixed != text: page.write_text(fixed, encoding='utf-8')


def main() -> int:
    env = os.environ
    if 'QUARTO_PROJECT_OUTPUT_FILES' in env:
        files = env['QUARTO_PROJECT_OUTPUT_FILES'].split('\n')
        post_render(Path(env['QUARTO_PROJECT_OUTPUT_DIR']), files)
    else:
        pre_render(Path(env.get('QUARTO_PROJECT_DIR', '.')))
    return 0


if __name__ == '__main__': sys.exit(main())
