"""The `Collector` protocol: the local, remote, process and Ray collectors satisfy it (the online loop is
typed against it), their `collect_many` signatures match it, and the process pool does not import the
Ray module."""
import inspect, os, subprocess, sys

import pytest

from tunix_agentic.rollout.collector import Collector, CollectConfig, TrajectoryCollector, WeightsSink
from tunix_agentic.rollout.workers import WorkerPool, scripted_calculator
from tunix_agentic.rollout.process_workers import ProcessCollector
from tunix_agentic.rollout.split import SplitCollector
from tunix_agentic.serve.remote import RemoteCollector

TASKS = [{'question': f'What is {a}*{a + 2}?', 'answer': str(a * (a + 2))} for a in (11, 12)]


def _signature(fn):
    "Parameter names and kinds of `fn` (annotations aside: the protocol fixes names and kinds)."
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize('cls', [TrajectoryCollector, RemoteCollector, ProcessCollector, SplitCollector,
                                 'ray'])
def test_collect_many_has_the_protocols_signature(cls):
    if cls == 'ray': cls = pytest.importorskip('tunix_agentic.rollout.ray_workers').RayCollector
    assert _signature(cls.collect_many) == _signature(Collector.collect_many)
    assert inspect.iscoroutinefunction(cls.collect_many)


def _check(collector):
    assert isinstance(collector, Collector), type(collector).__name__
    assert isinstance(collector.weights, WeightsSink)
    assert isinstance(collector.config, CollectConfig)
    trajs = collector.run(TASKS, group_size=1, step=0)
    assert [t.group_id[:3] for t in trajs] == ['s0-', 's0-'] and all(t.status.is_terminal for t in trajs)
    return trajs


def test_local_and_remote_collectors_satisfy_the_protocol():
    from tunix_agentic.serve.rollout_server import RolloutServer, RolloutSettings
    local = scripted_calculator(1)
    want = _check(local)
    assert [t.reward for t in want] == [1.0, 1.0]
    rs = RolloutServer(RolloutSettings(toolset='calculator', callback_hosts=('loopback',))).start()
    remote = RemoteCollector(local.engine, local.tokenizer, rs.url, config=local.config)
    try: assert [(t.reward, t.error) for t in _check(remote)] == [(1.0, None)] * 2
    finally: remote.close(); rs.close()
    assert not isinstance(object(), Collector)


def test_process_collector_satisfies_the_protocol():
    with ProcessCollector(scripted_calculator, 1) as pc:
        assert isinstance(pc, WorkerPool)
        got = _check(pc)
        pc.weights.update_params(None, 3)
        assert pc.weights.versions() == [[3]]
    assert [t.input_ids for t in got] == [t.input_ids for t in scripted_calculator(1).run(TASKS, group_size=1, step=0)]


@pytest.mark.slow
def test_ray_collector_satisfies_the_protocol():
    ray = pytest.importorskip('ray')
    from tunix_agentic.rollout.ray_workers import RayCollector
    os.environ.setdefault('RAY_raylet_start_wait_time_s', '180')  # a loaded 2-core machine is slow
    ray.init(address='local', num_cpus=1, include_dashboard=False, object_store_memory=100 * 2**20,
             log_to_driver=False)
    try:
        rc = RayCollector(scripted_calculator, num_workers=1)
        try: _check(rc)
        finally: rc.close()
    finally: ray.shutdown()


def test_the_process_pool_does_not_import_ray():
    code = ("import sys\nimport tunix_agentic.rollout.process_workers\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.endswith('ray_workers')))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '[]'
