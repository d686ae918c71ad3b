"""`eval.beside_grpo: false` (the real-model presets' memory saver) evaluates before and after GRPO in
turn on the rollout engine, with no copy of the weights, and gets the numbers the default run gets
with its evaluation on a copy beside GRPO: each episode carries its own seed."""
import json
import pytest

import tunix_agentic.app.run as run_module
from tunix_agentic.app.run import Run

ARGS = ['calculator_quick', 'sft.n_demos=0', 'grpo.steps=1', 'tasks.n_heldout=4', 'eval.n_greedy=2',
        'checkpoint.save_hf=false', 'log.tensorboard=false', 'log.progress=false']


def episodes(out) -> list[dict]:
    "The held-out episodes before and after GRPO, without their timings."
    eps = []
    for f in sorted((out / 'eval').glob('*.jsonl')):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            r['metrics'] = {k: v for k, v in r['metrics'].items() if not k.startswith('time_')}
            eps.append(r)
    return eps


def train(out, beside: bool, monkeypatch) -> tuple[dict, list, int]:
    copies = []
    real = run_module.engine_on_copy
    monkeypatch.setattr(run_module, 'engine_on_copy', lambda *a, **k: copies.append(1) or real(*a, **k))
    s = Run.from_config(*ARGS[:1], overrides=[*ARGS[1:], f'eval.beside_grpo={beside}',
                                              f'log.output_dir={out}']).train()
    steps = [json.loads(l) for l in (out / 'grpo' / 'metrics.jsonl').read_text().splitlines()]
    steps = [{k: v for k, v in r.items() if 'time' not in k and 'per_s' not in k} for r in steps]
    return s, steps, len(copies)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_in_turn_evaluation_matches_beside_and_makes_no_copy(tmp_path, monkeypatch):
    beside, steps_beside, copies_beside = train(tmp_path / 'beside', True, monkeypatch)
    in_turn, steps_in_turn, copies_in_turn = train(tmp_path / 'in_turn', False, monkeypatch)
    assert (copies_beside, copies_in_turn) == (1, 0)
    keys = [k for k in beside if k.startswith('heldout_')]
    assert 'heldout_pairs' in keys and len(keys) >= 5, keys
    assert {k: beside[k] for k in keys} == {k: in_turn[k] for k in keys}
    assert len(steps_beside) == 1 and steps_beside == steps_in_turn
    eps = episodes(tmp_path / 'beside')  # the 4 sampled episodes before and the 4 after GRPO
    assert len(eps) == 8 and all(len(e['input_ids']) > e['prompt_len'] for e in eps)
    assert eps == episodes(tmp_path / 'in_turn')  # the same tokens, log-probs and rewards
