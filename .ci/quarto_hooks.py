"""Quarto's pre- and post-render steps (nbs/_quarto.yml names this file), run in nbdev's _proc/.

Before: assets/ (the pictures pages show) and docker/README.md (the container guide, a Reference
page) copied in; show_doc's `[source]` links dropped while settings.ini has no git_url (they would
point at /blob/main/..., a page no host serves). After: links written for GitHub in nbs/index.ipynb
(which is also README.md: `nbs/x.ipynb`, `docker/README.md`) pointed at the pages; markdown in
show_doc's signature comments (docments), which Quarto shows as code, made HTML; in README.md,
nbdev's links from names to doc pages unlinked while there is no doc_host (GitHub cannot serve
them).
Standard library only: Quarto runs it with whichever python3 is on PATH."""
import configparser, os, re, shutil, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER_PAGE = '12_reference/docker.md'
_SOURCE_LINK = re.compile(r'\[source\]\((?:\.\./|/)*blob/[^)]*\)(?:\{[^}]*\})?')
# show_doc's signature: the code block right after a heading
SIGNATURE = re.compile(r'(</h[34]>\s*<div class="sourceCode" id="cb\d+"><pre[^>]*><code[^>]*>)'
                       r'(.*?)(</code>)', re.S)
COMMENT = re.compile(r'(<span class="co">)([^<]*)(</span>)')
_DOC_LINK = re.compile(r'\[(`[^`\]]+`)\]\((?![a-z]+:)[^)\s]*\.html[^)\s]*\)')  # [`N`](./x.html#n)


def setting(key: str) -> str:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    return cfg['DEFAULT'].get(key, '').strip()


def pre_render(proc: Path):
    shutil.copytree(ROOT / 'assets', proc / 'assets', dirs_exist_ok=True)
    title, _, body = (ROOT / 'docker' / 'README.md').read_text(encoding='utf-8').partition('\n')
    page = proc / DOCKER_PAGE
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f'---\ntitle: "{title.lstrip("# ").strip()}"\n---\n{body}', encoding='utf-8')
    if setting('git_url'): return
    for nb in proc.rglob('*.ipynb'):
        text = nb.read_text(encoding='utf-8')
        if 'blob/' in text: nb.write_text(_SOURCE_LINK.sub('', text), encoding='utf-8')


def html_name(page: str) -> str:
    "Where Quarto writes a page: `06_rollout/02_collector.ipynb` -> `06_rollout/collector.html`."
    page, hash_, frag = page.partition('#')
    folder, _, name = page.rpartition('/')
    name = re.sub(r'\.(ipynb|md)$', '.html', re.sub(r'^\d+[a-z]*_', '', name))
    return (f'{folder}/{name}' if folder else name) + hash_ + frag


def github_links(body: str, depth: int) -> str:
    "Links written for GitHub (nbs/x.ipynb, docker/README.md) pointed at the pages."
    def fix(m):
        url = m.group(2)
        if url.startswith('nbs/'): url = html_name(url[4:])
        elif url.startswith('docker/README.md'): url = html_name(DOCKER_PAGE)
        else: return m.group(0)
        return f'{m.group(1)}{"../" * depth}{url}"'
    return re.sub(r'((?:href|src)=")([^"]+)"', fix, body)


def signature_comments(body: str, depth: int) -> str:
    "In signature comments: nbdev's [`Name`](/page.html#name) links as links, `code` unquoted."
    def link(m): return f'<a href="{"../" * depth}{m.group(2)}">{m.group(1)}</a>'
    def comment(m):
        text = re.sub(r'\[`([^`\]]+)`\]\(/([^)\s]+)\)', link, m.group(2)).replace('`', '')
        return m.group(1) + text + m.group(3)
    return SIGNATURE.sub(lambda m: m.group(1) + COMMENT.sub(comment, m.group(2)) + m.group(3), body)


def post_render(out: Path, files: list[str]):
    for f in files:
        page = Path(f) if Path(f).is_absolute() else Path.cwd() / f
        if not page.exists(): continue
        text = page.read_text(encoding='utf-8')
        if page.name == 'README.md' and not setting('doc_host'): fixed = _DOC_LINK.sub(r'\1', text)
        elif page.suffix == '.html':
            depth = len(page.resolve().relative_to(out.resolve()).parts) - 1
            fixed = signature_comments(github_links(text, depth), depth)
        else: continue
        if fixed != text: page.write_text(fixed, encoding='utf-8')


if __name__ == '__main__':
    env = os.environ
    if 'QUARTO_PROJECT_OUTPUT_FILES' in env:
        files = env['QUARTO_PROJECT_OUTPUT_FILES'].split('\n')
        post_render(Path(env['QUARTO_PROJECT_OUTPUT_DIR']), files)
    else: pre_render(Path(env.get('QUARTO_PROJECT_DIR', '.')))
    sys.exit(0)
