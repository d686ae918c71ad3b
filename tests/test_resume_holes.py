"""Resume without holes: a run killed after its first GRPO checkpoint but before the before-RL
evaluation (run in a thread beside GRPO) wrote `eval_before.json` resumes, doing the warm start and
that evaluation again, instead of ending in `FileNotFoundError`."""
import json, logging

import pytest

ARGS = ['sft.n_demos=0', 'grpo.steps=2', 'checkpoint.save_every=1', 'tasks.n_heldout=2',
        'eval.n_greedy=1', 'log.tensorboard=false', 'checkpoint.save_hf=false', 'env.max_turns=2',
        'collect.tasks_per_step=1', 'episode.sampling.max_new_tokens=16']


@pytest.mark.timeout(300)
def test_a_kill_before_eval_before_json_resumes(tmp_path, caplog):
    from tunix_agentic.app.config import load_config, to_yaml
    from tunix_agentic.app.run import Run, compilation_cache
    compilation_cache()  # as `train` does: the programs of a second test run load from disk
    cfg = load_config('calculator_quick', overrides=[*ARGS, f'log.output_dir={tmp_path}'])
    # the folder such a kill leaves: the config, step 0 trained and checkpointed, no evaluation
    (tmp_path / 'config.yaml').write_text(to_yaml(cfg))
    killed = Run(cfg)
    killed.step()
    assert (tmp_path / 'grpo' / 'checkpoints' / 'loop_1.json').exists()
    assert not (tmp_path / 'eval_before.json').exists()
    del killed
    with caplog.at_level(logging.WARNING, logger='tunix_agentic.app.run'):
        s = Run(cfg).train()
    assert any('no eval_before.json beside the checkpoint' in r.getMessage() for r in caplog.records)
    kept = json.loads((tmp_path / 'eval_before.json').read_text())
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN too
    assert same(s['diagnosis_before_rl'], kept['sampled'])
    assert same(s['greedy_diagnosis_before_rl'], kept['greedy'])
    steps = [json.loads(l)['step'] for l in (tmp_path / 'grpo' / 'metrics.jsonl').open()]
    assert steps == [0, 1]  # step 0 from before the kill, step 1 after the resume: none twice
    assert len(s['grpo_train_success']) == 2
