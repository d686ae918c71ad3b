"""`train` with `engine.kind=sglang` (issue 41): two tiny GRPO steps whose episodes sample from
sglang-jax; after every weight push sglang-jax's greedy tokens equal our engine's; each episode
carries the policy version it sampled under, and the loop refuses stale ones as with our engine."""
import json
import pytest

sgl = pytest.importorskip('sgl_jax')
from tunix_agentic.app.run import Run
from tunix_agentic.learn.loop import _fresh
from tunix_agentic.rollout.dumps import load_step

pytestmark = pytest.mark.slow
STEPS, PROMPTS, TOKENS = 2, 2, 8


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "The quick calculator run (no warm start) with sglang-jax rollouts, trained by `Run.train`."
    out = tmp_path_factory.mktemp('sglang_run')
    run = Run.from_config('calculator_quick', overrides=[
        f'log.output_dir={out}', 'log.tensorboard=false', 'engine.kind=sglang',
        'model.num_heads=2', 'model.num_kv_heads=1', 'model.head_dim=128',
        f'grpo.steps={STEPS}', 'tasks.n_heldout=4', 'eval.n_greedy=2',
        'episode.sampling.max_new_tokens=24', 'checkpoint.save_every=0',
        'checkpoint.save_hf=false', 'sft.n_demos=0', f'sglang.check_prompts={PROMPTS}',
        f'sglang.check_tokens={TOKENS}'])
    return run, run.train()


def test_train_runs_on_sglang_jax(trained):
    run, summary = trained
    assert type(run._engine).__name__ == 'CheckedSglangEngine'
    assert len(summary['grpo_train_success']) == STEPS
    assert 0.0 <= summary['heldout_success_after_rl'] <= 1.0
    assert (run.out / 'sglang_model' / 'config.json').is_file()   # what sglang-jax started on


def test_greedy_tokens_equal_after_every_push(trained):
    run, _ = trained
    checks = run._engine.checks   # at start; the loop's first push (version 0); each step's
    assert [c['policy_version'] for c in checks] == [0, 0, *range(1, STEPS + 1)]
    assert all(c['sglang_greedy_equal'] == 1.0 for c in checks), checks
    assert all(c['sglang_check_tokens'] == PROMPTS * TOKENS for c in checks)
    assert all(c['sglang_max_logprob_diff'] < 1e-3 for c in checks)
    rows = [json.loads(l) for l in (run.out / 'grpo' / 'metrics.jsonl').read_text().splitlines()]
    assert [(r['policy_version'], r['sglang_greedy_equal']) for r in rows] == \
        [(k + 1, 1.0) for k in range(STEPS)]


def test_policy_version_travels_and_stale_is_refused(trained):
    run, _ = trained
    dumps = run.out / 'grpo' / 'rollouts'
    by_step = [load_step(dumps, k) for k in range(STEPS)]
    assert [{t.policy_version for t in ts} for ts in by_step] == [{k} for k in range(STEPS)]
    assert all(any(t.response_mask) and t.logprobs for ts in by_step for t in ts)  # sampled
    loop = run.loop   # learner at version STEPS; max_staleness 1 keeps version STEPS - 1 only
    before = loop.dropped_stale
    kept = _fresh(loop, by_step[0] + by_step[1])
    assert loop.trainer.step == STEPS and loop.cfg.max_staleness == 1
    assert kept == by_step[1] and loop.dropped_stale - before == len(by_step[0])
