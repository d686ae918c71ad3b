"""ProcessCollector: worker processes on one machine (what its notebook can't host: killed workers,
a dead parent, dumps, the online loop)."""
import dataclasses, functools, logging, os, signal, subprocess, sys, textwrap, threading, time
import pytest
from tunix_agentic.rollout.process_workers import ProcessCollector, WorkerDied, WorkerError
from tunix_agentic.rollout.workers import scripted_calculator

TASKS = [{'question': f'What is {a}*{a + 7}?', 'answer': str(a * (a + 7) + (a % 3 == 0))}
         for a in range(11, 27)]


def _key(t):
    return (t.episode_id, t.group_id, t.status, t.input_ids, t.response_mask, t.logprobs,
            t.prompt_len, t.reward, [s.reward for s in t.steps], t.messages, t.policy_version)


def _wait_for(cond, timeout_s=60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if (v := cond()): return v
        time.sleep(0.01)
    raise AssertionError(f'not true within {timeout_s} s')


def test_equal_to_one_process_and_numbering_goes_on():
    want = scripted_calculator().run(TASKS)
    with ProcessCollector(scripted_calculator, 2, groups_per_worker=3) as pc:
        got = pc.run(TASKS)
        assert [_key(t) for t in got] == [_key(t) for t in want]
        assert 0 < sum(t.reward for t in got) < len(got)  # rewards differ between tasks
        again = pc.run(TASKS[:2], step=5)
        assert [t.group_id for t in again[::2]] == ['s5-g000016', 's5-g000017']
        n_groups = pc.call(lambda c: len({s.group_id for s in c.states.values()}))
        assert sum(n_groups) == 18 and all(n > 0 for n in n_groups)  # both workers had groups


def _slow(tool_ms=300):
    return scripted_calculator(2, tool_ms=tool_ms)


def test_a_killed_worker_loses_no_group(caplog):
    "SIGKILL one worker while it holds groups: they run again on the other; nothing is lost."
    want = _slow(0).run(TASKS)
    pc = ProcessCollector(_slow, 2, groups_per_worker=2)
    try:
        victim = pc.workers[0]
        out = {}
        t = threading.Thread(target=lambda: out.setdefault('trajs', pc.run(TASKS)))
        with caplog.at_level(logging.WARNING, logger='tunix_agentic.rollout.process_workers'):
            t.start()
            _wait_for(lambda: len(victim.pending) == 2)  # both of its groups in flight
            os.kill(victim.process.pid, signal.SIGKILL)
            t.join(120)
        assert not t.is_alive()
        assert [_key(t) for t in out['trajs']] == [_key(t) for t in want]
        assert not victim.alive and len(pc.alive_workers) == 1
        assert sum('runs again on another worker' in r.getMessage() for r in caplog.records) == 2
        assert len(pc.run(TASKS[:2])) == 4  # the survivor goes on
    finally: pc.close()


def test_without_retries_a_killed_worker_fails_the_collection():
    pc = ProcessCollector(_slow, 2, groups_per_worker=1, max_retries=0)
    try:
        victim, out = pc.workers[1], {}
        def run():
            try: pc.run(TASKS[:4])
            except Exception as e: out['error'] = e
        t = threading.Thread(target=run); t.start()
        _wait_for(lambda: victim.pending)
        os.kill(victim.process.pid, signal.SIGKILL)
        t.join(120)
        assert isinstance(out.get('error'), WorkerDied)
        assert 'worker 1' in str(out['error']) and 'exit code -9' in str(out['error'])
    finally: pc.close()


def test_errors_in_a_worker_come_back_with_its_traceback():
    with ProcessCollector(scripted_calculator, 1) as pc:
        with pytest.raises(WorkerError, match='ZeroDivisionError'): pc.call(lambda c: 1 / 0)
        with pytest.raises(WorkerError, match='pickle'): pc.call(lambda c: threading.Lock())
        assert pc.call(lambda c: c.config.group_size) == [2]  # the worker is still fine


def test_a_dead_parent_ends_its_workers(tmp_path):
    "The workers' pipes end with their parent; they exit instead of lingering."
    script = tmp_path / 'parent.py'
    script.write_text(textwrap.dedent('''
        import os, sys
        from tunix_agentic.rollout.process_workers import ProcessCollector
        from tunix_agentic.rollout.workers import scripted_calculator
        if __name__ == '__main__':
            pc = ProcessCollector(scripted_calculator, 2)
            print(' '.join(str(w.process.pid) for w in pc.workers), flush=True)
            os._exit(0)  # no close(), no atexit: as if killed
    '''))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       cwd=os.getcwd())
    assert p.returncode == 0, p.stderr
    pids = [int(x) for x in p.stdout.split()]
    assert len(pids) == 2
    def gone(pid):
        try: os.kill(pid, 0)
        except ProcessLookupError: return True
        with open(f'/proc/{pid}/stat') as f: return f.read().split()[2] == 'Z'  # a zombie has ended
    _wait_for(lambda: all(gone(pid) for pid in pids), 60)


def _dumping(d):
    c = scripted_calculator()
    c.config = dataclasses.replace(c.config, rollout_data_dir=str(d))
    return c


def test_a_step_is_dumped_as_its_groups_arrive(tmp_path):
    from tunix_agentic.rollout.dumps import load_step
    with ProcessCollector(functools.partial(_dumping, tmp_path), 2) as pc:
        got = pc.run(TASKS[:6], step=2)
    dumped = load_step(tmp_path, 2)
    assert sorted(t.episode_id for t in dumped) == sorted(t.episode_id for t in got)
    assert len(dumped) == 12


@pytest.mark.timeout(900)
def test_online_loop_on_worker_processes(tmp_path):
    from conftest import two_sync_steps_over_workers
    with ProcessCollector(scripted_calculator, 2) as pc:
        two_sync_steps_over_workers(pc, TASKS, tmp_path)


def test_workers_sampling_from_a_central_engine():
    "The engine lives in this process behind an EngineServer; workers sample over HTTP."
    from tunix_agentic.rollout.workers import multiply_solver
    from tunix_agentic.engines.engine import ScriptedEngine
    from tunix_agentic.engines.server import EngineServer
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    tok = build_tiny_tokenizer()
    engine = ScriptedEngine(tok, multiply_solver, logprob=-0.25)
    with EngineServer(engine, tok) as srv:
        with ProcessCollector(functools.partial(scripted_calculator, 2, engine_url=srv.url), 2,
                              weights=engine) as pc:
            got = pc.run(TASKS[:8])
            want = scripted_calculator(2, logprob=-0.25).run(TASKS[:8])
            assert [_key(t) for t in got] == [_key(t) for t in want]
            pc.weights.update_params(None, 5)  # the weights go to the central engine only
            assert all(t.metrics['policy_version_last'] == 5 for t in pc.run(TASKS[:2]))


def _default_model_collector():
    "The calculator collector, sampling from our JaxEngine on the embedded default model."
    from tunix_agentic.models.default import load_default
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    c = scripted_calculator(2)
    model, _, _ = load_default()
    c.engine = JaxEngine(model, config=JaxEngineConfig.tiny())
    return c


def _sums(state) -> list[float]:
    import jax, numpy as np
    return [float(np.asarray(x, dtype=np.float64).sum()) for x in jax.tree.leaves(state)]


def _param_sums(collector) -> list[float]:
    "Every parameter's sum, as the worker's engine will sample with it."
    from flax import nnx
    e = collector.engine
    return _sums(e._state if e._state is not None else nnx.state(e.model))


@pytest.mark.timeout(900)
def test_new_weights_reach_every_workers_jax_engine():
    "A trainer's new state (an nnx.Module here) lands, as device arrays, in each worker's JaxEngine."
    import jax, numpy as np
    from flax import nnx
    from tunix_agentic.models.default import load_default
    model, _, _ = load_default()
    nnx.update(model, jax.tree.map(lambda x: x * 0.5 + 0.01, nnx.state(model, nnx.Param)))
    want = _sums(nnx.state(model))  # other weights than the workers load
    with ProcessCollector(_default_model_collector, 2, groups_per_worker=2) as pc:
        before = pc.call(_param_sums)
        assert before[0] == before[1] and before[0] != want
        pc.weights.update_params(model, 3)
        after = pc.call(_param_sums)
        assert after[0] == after[1]
        np.testing.assert_allclose(after[0], want, rtol=1e-6)
        kinds = pc.call(lambda c: sorted({type(x).__name__ for x in jax.tree.leaves(c.engine._state)}))
        assert kinds == [['ArrayImpl'], ['ArrayImpl']]  # device arrays, not numpy copies per call
        trajs = pc.run(TASKS[:4])
        assert len(trajs) == 8 and {t.policy_version for t in trajs} == {3}
        assert all(t.metrics['policy_version_last'] == 3 for t in trajs)
        assert all(sum(t.response_mask) > 0 for t in trajs)  # the model sampled every episode
