"""`workers.kind=processes` in a run's config: GRPO's episodes come from rollout worker processes, each
with its own engine built from the config, sampling with the learner's current weights."""
import pytest


def _sums(state) -> list[float]:
    import jax, numpy as np
    return [float(np.asarray(x, dtype=np.float64).sum()) for x in jax.tree.leaves(state)]


def _engine_weights(collector) -> tuple[int, list[float]]:
    "The worker engine's policy version and every parameter's sum, as it samples with them."
    from flax import nnx
    e = collector.engine
    return e.policy_version, _sums(e._state if e._state is not None else nnx.state(e.model))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_grpo_steps_collected_by_two_worker_processes(tmp_path):
    import numpy as np
    from flax import nnx
    from tunix_agentic.app.run import Run
    from tunix_agentic.rollout.process_workers import ProcessCollector
    run = Run.from_config('calculator_quick', overrides=[
        'workers.kind=processes', 'workers.num_workers=2', 'sft.n_demos=0', 'grpo.steps=2',
        'log.tensorboard=false', f'log.output_dir={tmp_path}'])
    first = run.step()
    pool = run.loop.collector
    try:
        assert isinstance(pool, ProcessCollector) and len(pool.alive_workers) == 2
        assert first['episodes'] == 2 * 2  # collect.tasks_per_step x collect.group_size
        second = run.step()
        assert second['step'] == first['step'] + 1 and second['episodes'] == 4
        # after the update the loop pushed the new weights: both workers sample with them
        want = _sums(nnx.state(run.learner.model))
        got = pool.call(_engine_weights)
        assert [v for v, _ in got] == [run.learner.step] * 2
        for _, sums in got: np.testing.assert_allclose(sums, want, rtol=1e-6)
    finally: pool.close()
    assert not pool.alive_workers
