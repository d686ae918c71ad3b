"""The console script as a user runs it: a real subprocess of the installed entry point."""
import os, shutil, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / 'tunix-agentic'


def run(*args, timeout=120):
    exe = [str(BIN)] if BIN.exists() else [sys.executable, '-m', 'tunix_agentic.app.cli']
    return subprocess.run([*exe, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def test_help_lists_subcommands():
    r = run('--help')
    assert r.returncode == 0, r.stderr
    for cmd in ('demo', 'episode', 'build-default', 'info'): assert cmd in r.stdout


def test_unknown_subcommand_is_a_clear_error():
    r = run('train')
    assert r.returncode == 2 and "invalid choice: 'train'" in r.stderr


@pytest.mark.timeout(180)
def test_episode_prints_tokens_and_masks():
    r = run('episode', '--a', '12', '--b', '34', '--c', '56')
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'status=done reward=1 turns=3' in r.stdout
    assert 'The answer is 464.<|im_end|>' in r.stdout
    mask_rows = [l.split()[0] for l in r.stdout.splitlines() if l[:4].strip() in ('0', '1') and len(l.split()) > 2]
    assert mask_rows == ['0', '1', '0', '1', '0', '1'], mask_rows


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_quick_writes_its_outputs(tmp_path):
    "`tunix-agentic demo --quick` runs the whole pipeline (SFT, GRPO, eval) and leaves plot, metrics, dumps."
    out = tmp_path / 'demo'
    r = run('demo', '--quick', '--out', str(out), timeout=590)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / 'demo.png').stat().st_size > 1000
    assert (out / 'summary.json').exists()
    assert list((out / 'grpo' / 'rollouts').glob('step_*.jsonl'))
    assert (out / 'grpo' / 'metrics.jsonl').read_text().strip()


def test_python_dash_m_runs_the_command():
    "`python -m tunix_agentic` is the `tunix-agentic` command (issue 10: it had no `__main__`)."
    r = subprocess.run([sys.executable, '-m', 'tunix_agentic', '--help'], capture_output=True,
                       text=True, timeout=120, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert r.returncode == 0, r.stderr
    assert r.stdout == run('--help').stdout
