"Kill and resume: a `train` run SIGKILLed after a checkpoint and started again ends where an uninterrupted one does."
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

# a few GRPO steps straight from the re-headed tiny model (no SFT), checkpoints every step
ARGS = ['calculator_quick', 'sft.n_demos=0', 'grpo.steps=3', 'checkpoint.save_every=1', 'tasks.n_heldout=2',
        'eval.n_greedy=1', 'log.tensorboard=false']


def train(out: Path, **kw):
    cmd = [sys.executable, '-m', 'tunix_agentic', 'train', *ARGS, f'log.output_dir={out}']
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, **kw)


def finish(p: subprocess.Popen):
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]


def last_record(out: Path) -> dict:
    recs = {}
    for line in (out / 'grpo' / 'metrics.jsonl').read_text().splitlines():
        r = json.loads(line); recs[r['step']] = r
    r = recs[max(recs)]
    return {k: v for k, v in r.items() if 'time_' not in k and k != 'tokens_per_s'}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_after_a_checkpoint_then_resume_matches_an_uninterrupted_run(tmp_path):
    whole, broken = tmp_path / 'whole', tmp_path / 'broken'
    finish(train(whole))
    p = train(broken)
    marker = broken / 'grpo' / 'checkpoints' / 'loop_1.json'
    while not marker.exists() and p.poll() is None: time.sleep(0.05)
    assert p.poll() is None, 'the run ended before it could be killed'
    p.send_signal(signal.SIGKILL); p.wait()
    steps_before = [json.loads(l)['step'] for l in (broken / 'grpo' / 'metrics.jsonl').read_text().splitlines()]
    assert 0 in steps_before and 2 not in steps_before, steps_before
    finish(train(broken))
    assert last_record(broken) == last_record(whole)
    for f in ('model.safetensors', 'config.json'):  # the final policies, byte for byte
        assert (broken / 'model' / f).read_bytes() == (whole / 'model' / f).read_bytes(), f
    steps = [json.loads(l)['step'] for l in (broken / 'grpo' / 'metrics.jsonl').read_text().splitlines()]
    assert steps[:len(steps_before)] == steps_before and set(steps) == {0, 1, 2}  # appended, not deleted
    s, w = (json.loads((d / 'summary.json').read_text()) for d in (broken, whole))
    assert s['grpo_train_success'] == w['grpo_train_success']
    assert s['diagnosis_after_rl'] == w['diagnosis_after_rl']
