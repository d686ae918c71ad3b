"""Run every notebook in a real Jupyter kernel (ipykernel via nbclient), as a user's Run All does.

`nbdev_test` runs notebooks in an IPython shell with no event loop and skips `#| eval: false`
cells, so two kinds of mistake pass it and fail for every user: `asyncio.run()` in a cell ("cannot
be called from a running event loop" in any kernel) and an `eval: false` cell that must not run
(Jupyter runs it). This script runs each notebook the way Jupyter does: in an ipykernel whose event
loop is running, from the notebook's own folder, `eval: false` cells included. It skips only cells
flagged with settings.ini's `tst_flags` (`slow`, `gpu`, `notest`), as nbdev_test does; cells that
need a TPU, a network or hours must guard themselves in code (a flag a user can flip), since a
kernel ignores nbdev's flags.

Every cell runs even after an error (one run shows all the broken cells); a notebook stops at its
time limit, or where it raises `MissingExtra` (`core.extras.require`: an optional extra is not
installed), as a user's Run All stops there: not an error, the line says which extra. Prints a table (seconds, cells run, skipped, error cells, largest output) and exits 1
on any error cell, a notebook over its time limit, or a cell output over the size limit (a wall of
warnings).

With `--save DIR` (the docs build, .ci/docs.py) the executed notebooks are written there, each
widget output replaced by static HTML drawn from the widget's saved state: a docs page has no
kernel and no widget JavaScript, so the stepper's strip and chat and the viewer's plots would
otherwise show as `VBox(...)` (nbclient stores the state; neither nbdev nor Quarto draws it).

Usage: python .ci/run_notebooks.py [PATH_OR_GLOB ...] [--workers 2] [--save DIR] [--limit-s 300]
                                   [--flags slow]
"""
import argparse, configparser, html, os, re, sys, tempfile, time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'
DIRECTIVE = re.compile(r'^#\|\s*([\w-]+:?)')
MAX_OUTPUT_CHARS = 20_000  # text of one cell's outputs; the GSM8K cell once printed 115,806


def skip_flags() -> set[str]:
    "The flags nbdev_test skips (settings.ini `tst_flags`)."
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / 'settings.ini')
    return set(cfg['DEFAULT'].get('tst_flags', '').split())


def directives(source: str) -> set[str]:
    "The `#|` directive names at the top of a cell (`slow`, `export`, `eval:` ...)."
    out = set()
    for line in source.splitlines():
        if not line.strip(): continue
        m = DIRECTIVE.match(line)
        if not m: break
        out.add(m.group(1))
    return out


def notebooks(patterns: list[str]) -> list[Path]:
    "Notebooks to run: those named, or every `nbs/**/*.ipynb` but scratch (`_*`) and checkpoints."
    if not patterns:
        return sorted(p for p in NBS.rglob('*.ipynb')
                      if not any(q.startswith(('_', '.')) for q in p.relative_to(NBS).parts))
    out = []
    for pat in patterns:
        p = Path(pat)
        hits = [p] if p.exists() else sorted(ROOT.glob(pat))
        if not hits: raise SystemExit(f'no notebook matches {pat!r}')
        out += [h.resolve() for h in hits]
    return out


def output_text(cell) -> str:
    "All text a cell shows: streams, plain-text results and tracebacks (images not counted)."
    parts = []
    for o in cell.get('outputs', []):
        if o.output_type == 'stream': parts.append(o.text)
        elif o.output_type == 'error': parts.append('\n'.join(o.traceback))
        elif 'data' in o: parts.append(str(o.data.get('text/plain', '')))
    return ''.join(parts)


def widget_html(state: dict, model_id: str) -> str:
    "A widget drawn as static HTML from nbclient's saved state: HTML as is, boxes as flex rows."
    s = state.get(model_id.removeprefix('IPY_MODEL_'), {})
    layout = state.get(str(s.get('layout', '')).removeprefix('IPY_MODEL_'), {})
    if layout.get('display') == 'none' or layout.get('visibility') == 'hidden': return ''
    name, value, label = s.get('_model_name', ''), s.get('value'), s.get('description', '')
    if name in ('HTMLModel', 'HTMLMathModel'): return str(value or '')
    if name == 'OutputModel': return ''.join(output_html(o) for o in s.get('outputs', []))
    if name == 'ImageModel':  # its picture is a binary buffer, kept beside the state (`pictures`)
        b64 = s.get('value_base64')
        return (f'<img style="max-width:100%" src="data:image/{s.get("format", "png")};base64,{b64}">'
                if b64 else '')
    if 'children' in s:
        side = 'row' if name == 'HBoxModel' else 'column'
        kids = ''.join(widget_html(state, c) for c in s['children'])
        style = f'display:flex;flex-direction:{side};flex-wrap:wrap;gap:6px'
        return f'<div style="{style}">{kids}</div>'
    if name in ('ButtonModel', 'ToggleButtonModel'):
        return f'<button disabled>{html.escape(label)}</button>'
    if s.get('_options_labels') and isinstance(s.get('index'), int):
        value = s['_options_labels'][s['index']]
    if not label and value in (None, ''): return ''
    return f'<span>{html.escape(label)} <code>{html.escape(str(value))}</code></span>'


def output_html(o) -> str:
    "One output of an Output widget as HTML (images inline)."
    data = o.get('data', {})
    if 'image/png' in data: return f'<img src="data:image/png;base64,{data["image/png"]}">'
    if 'text/html' in data: return data['text/html']
    text = o.get('text') or data.get('text/plain', '')
    return f'<pre>{html.escape(text)}</pre>' if text else ''


def pictures(state: dict, buffers: dict) -> dict:
    "The saved state with each widget's binary `value` (an Image's picture) as `value_base64`."
    out = {k: dict(v) for k, v in state.items()}
    for model_id, bufs in buffers.items():
        if ('value',) in bufs and model_id in out:
            out[model_id]['value_base64'] = bufs[('value',)]['data']
    return out


def static_widgets(nb, state: dict):
    "Replace each widget output of `nb` by its static HTML."
    for cell in nb.cells:
        for o in cell.get('outputs', []):
            view = o.get('data', {}).get('application/vnd.jupyter.widget-view+json')
            if view: o['data'] = {'text/html': widget_html(state, view['model_id'])}


def kernel_env() -> dict[str, str]:
    "The kernel imports the package from this checkout and runs JAX on the CPU, as CI does."
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    env.setdefault('JAX_PLATFORMS', 'cpu')
    env.setdefault('TOKENIZERS_PARALLELISM', 'false')
    env.pop('IN_TEST', None)  # a user's kernel; nbdev_test sets it
    return env


def run_one(path: Path, limit_s: float, save: Path | None, run_flags: set[str]) -> dict:
    "Run one notebook in a fresh kernel; return its row for the table."
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    flags = skip_flags() - run_flags
    row = dict(notebook=str(path.relative_to(ROOT)), run=0, skipped=0, errors=[], max_output=0,
               timed_out=False, seconds=0.0, stopped='')
    try: nb = nbformat.read(path, as_version=4)
    except Exception as e:  # gone (renamed while queued) or not a notebook
        row['errors'].append((-1, type(e).__name__, str(e).strip()[:120]))
        return row
    client = NotebookClient(nb, timeout=limit_s, kernel_name='python3', allow_errors=True,
                            record_timing=False,  # no timestamps in saved notebooks' metadata
                            resources={'metadata': {'path': str(path.parent)}})
    client.km = client.create_kernel_manager()
    start, log = time.time(), tempfile.TemporaryFile('w+')  # the kernel's own stderr (C++ logs)
    try:
        with client.setup_kernel(env=kernel_env(), cwd=str(path.parent), stderr=log):
            for i, cell in enumerate(nb.cells):
                if cell.cell_type != 'code' or not cell.source.strip(): continue
                if directives(cell.source) & flags or 'nbdev_export(' in cell.source:
                    row['skipped'] += 1
                    continue
                left = limit_s - (time.time() - start)
                if left <= 0:
                    row['timed_out'] = True
                    break
                client.timeout = max(1, int(left))
                try: client.execute_cell(cell, i)
                except (CellTimeoutError, DeadKernelError) as e:
                    first = (str(e).strip().splitlines() or [''])[0][:120]
                    row['errors'].append((i, type(e).__name__, first))
                    row['timed_out'] = isinstance(e, CellTimeoutError)
                    break
                row['run'] += 1
                row['max_output'] = max(row['max_output'], len(output_text(cell)))
                errors = [o for o in cell.get('outputs', []) if o.output_type == 'error']
                if any(o.ename == 'MissingExtra' for o in errors):  # Run All stops here
                    row['stopped'] = f'cell {i}: {errors[0].evalue}'
                    break
                row['errors'] += [(i, o.ename, str(o.evalue).strip()[:120]) for o in errors]
    except Exception as e:  # the kernel would not start, or died between cells
        row['errors'].append((-1, type(e).__name__, str(e).strip()[:120]))
    if any(name == 'DeadKernelError' or i < 0 for i, name, _ in row['errors']):
        log.seek(0)
        row['kernel_log'] = log.read()[-3000:]
    log.close()
    row['seconds'] = time.time() - start
    if save:
        static_widgets(nb, pictures(client.widget_state, client.widget_buffers))
        out = save / path.relative_to(NBS)
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('paths', nargs='*', help='notebooks or globs (default: all under nbs/)')
    ap.add_argument('--workers', type=int, default=2, help='notebooks run at once, one kernel each')
    ap.add_argument('--limit-s', type=float, default=300, help='time limit per notebook, seconds')
    ap.add_argument('--save', type=Path, help='write the executed notebooks under this folder')
    ap.add_argument('--flags', default='', help='flags to run anyway (e.g. "slow": a full Run All)')
    args = ap.parse_args()
    paths, run_flags = notebooks(args.paths), set(args.flags.split())
    skipped = sorted(skip_flags() - run_flags)
    print(f'running {len(paths)} notebooks in ipykernel, {args.workers} at a time, '
          f'skipping cells flagged {" ".join(skipped) or "(none)"}', flush=True)
    start, rows = time.time(), []
    with ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(run_one, p, args.limit_s, args.save, run_flags): p for p in paths}
        for f in as_completed(futures):
            try: r = f.result()
            except Exception as e:  # the worker itself failed: still one row, still a failure
                r = dict(notebook=str(futures[f].relative_to(ROOT)), run=0, skipped=0,
                         errors=[(-1, type(e).__name__, str(e)[:120])], max_output=0,
                         timed_out=False, seconds=0.0)
            rows.append(r)
            mark = 'ok' if not r['errors'] and r['max_output'] <= MAX_OUTPUT_CHARS else 'FAIL'
            stop = f'; stopped at {r["stopped"]}' if r.get('stopped') else ''
            print(f'  {mark:4} {r["notebook"]} ({r["seconds"]:.1f} s{stop})', flush=True)
    rows.sort(key=lambda r: r['notebook'])
    width = max(len(r['notebook']) for r in rows)
    print(f'\n{"notebook":{width}}  seconds  cells run  skipped  error cells  '
          'largest output (chars)')
    for r in rows:
        print(f'{r["notebook"]:{width}}  {r["seconds"]:7.1f}  {r["run"]:9}  {r["skipped"]:7}  '
              f'{len(r["errors"]):11}  {r["max_output"]:22,}')
    failed = 0
    for r in rows:
        for i, name, msg in r['errors']:
            print(f'ERROR {r["notebook"]} cell {i}: {name}: {msg}')
        if r.get('stopped'): print(f'STOPPED {r["notebook"]} {r["stopped"]}')
        if r.get('kernel_log'): print(f'kernel stderr (end):\n{r["kernel_log"]}')
        if r['timed_out']: print(f'ERROR {r["notebook"]}: over the {args.limit_s:.0f} s limit')
        if r['max_output'] > MAX_OUTPUT_CHARS:
            print(f'ERROR {r["notebook"]}: a cell printed {r["max_output"]:,} characters '
                  f'(limit {MAX_OUTPUT_CHARS:,}); summarise long outputs')
        failed += bool(r['errors'] or r['timed_out'] or r['max_output'] > MAX_OUTPUT_CHARS)
    total, stopped = sum(len(r['errors']) for r in rows), sum(bool(r.get('stopped')) for r in rows)
    print(f'{len(rows)} notebooks, {total} error cells, {failed} failed, '
          f'{stopped} stopped for a missing extra, '
          f'{time.time() - start:.0f} s wall, slowest {max(r["seconds"] for r in rows):.1f} s')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
