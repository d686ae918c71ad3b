"""Ray: the cluster-wide tool rate limiter and rollout workers, on a two-node Ray cluster on this
machine (two `ray start`s: a head and a second node joining it, on free ports, in a temp dir; the
processes of that cluster, and only those, are stopped at the end)."""
import asyncio, contextlib, os, shutil, signal, socket, subprocess, sys, tempfile, time, uuid
from pathlib import Path

import pytest

from tunix_agentic.tools.ray_limiter import RayRateLimiter, has_ray, require_ray

RAY_BIN = Path(sys.executable).parent / 'ray'
NS = 'tunix_agentic_test'
LIMIT = 10


def test_without_ray_everything_imports():
    "Without Ray the modules import, limiters are built and pickled; using a cluster says how to get Ray."
    code = ("import sys; sys.modules['ray'] = None\n"
            "import pickle\n"
            "from tunix_agentic.tools import ray_limiter\nfrom tunix_agentic.rollout import ray_workers\n"
            "lim = ray_limiter.RayRateLimiter(max_concurrency=3, name='x')\n"
            "pickle.loads(pickle.dumps(lim))\n"
            "try: ray_limiter.require_ray()\n"
            "except ImportError as e: print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert out.returncode == 0, out.stderr
    assert "pip install 'tunix_agentic[ray]'" in out.stdout


# ---------------------------------------------------------------- a two-node cluster on loopback
def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return ports


def _node_args(ports):
    "Ports a node would otherwise take from fixed defaults (two nodes on one machine collide)."
    keys = ['--node-manager-port', '--object-manager-port', '--dashboard-agent-listen-port',
            '--dashboard-agent-grpc-port', '--metrics-export-port', '--runtime-env-agent-port']
    return [a for k, p in zip(keys, ports) for a in (k, str(p))]


def _ray_start(args, env):
    out = subprocess.run([str(RAY_BIN), 'start', *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _my_pids(tmp: str, node_ids: set[str]) -> list[int]:
    "Processes of our cluster: their command line names its temp dir, or their env its node ids."
    pids, marks = [], [tmp.encode()] + [f'RAY_NODE_ID={n}'.encode() for n in node_ids]
    for p in Path('/proc').iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid(): continue
        try: text = (p / 'cmdline').read_bytes() + b'\0' + (p / 'environ').read_bytes()
        except OSError: continue
        if any(m in text for m in marks): pids.append(int(p.name))
    return pids


def _stop_cluster(tmp: str, node_ids: set[str]):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _my_pids(tmp, node_ids):
            try: os.kill(pid, sig)
            except ProcessLookupError: pass
        time.sleep(1.0)


@pytest.fixture(scope='module')
def cluster():
    ray = pytest.importorskip('ray', reason="Ray is not installed: pip install 'tunix_agentic[ray]'")
    from ray import cloudpickle  # Ray's own copy pickles actor classes and functions
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # test helpers travel by value
    tmp = tempfile.mkdtemp(prefix='tray', dir='/tmp')  # short: Ray's socket paths have a limit
    # Ray >= 2.5x turns token auth on by itself once ~/.ray/auth_token exists (any local `ray.init()`
    # writes one); the test cluster must not depend on what earlier Ray runs left in $HOME
    auth = {'RAY_AUTH_MODE': 'disabled'}
    env = {**os.environ, **auth, 'JAX_PLATFORMS': 'cpu', 'RAY_USAGE_STATS_ENABLED': '0',
           # patience on a loaded machine: the agents may take a minute to start
           'RAY_agent_register_timeout_ms': '300000', 'RAY_raylet_start_wait_time_s': '300'}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)  # the driver (this process) must agree with the cluster
    gcs, client, dash, *ports = _free_ports(15)
    common = ['--num-cpus', '2', '--object-store-memory', str(100 * 2**20),
              '--node-ip-address', '127.0.0.1', '--disable-usage-stats']
    node_ids: set[str] = set()
    try:
        _ray_start(['--head', '--port', str(gcs), '--ray-client-server-port', str(client),
                    '--include-dashboard', 'false', '--dashboard-port', str(dash),
                    '--temp-dir', tmp, *common,
                    *_node_args(ports[:6])], env)
        _ray_start(['--address', f'127.0.0.1:{gcs}', *common, *_node_args(ports[6:12])], env)
        ray.init(address=f'127.0.0.1:{gcs}', namespace=NS, log_to_driver=False)
        deadline = time.monotonic() + 120
        while len([n for n in ray.nodes() if n['Alive']]) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        node_ids = {n['NodeID'] for n in ray.nodes()}
        assert len([n for n in ray.nodes() if n['Alive']]) == 2
        yield ray
    finally:
        try: ray.shutdown()
        finally:
            _stop_cluster(tmp, node_ids)
            shutil.rmtree(tmp, ignore_errors=True)
            for k, v in saved.items():
                if v is None: os.environ.pop(k, None)
                else: os.environ[k] = v


# ---------------------------------------------------------------- the global limiter
class Probe:
    "Counts calls inside a slot as every process sees them; the most at once is the limit's test."
    def __init__(self): self.now, self.most, self.seen = 0, 0, 0
    def enter(self):
        self.now += 1; self.seen += 1; self.most = max(self.most, self.now)
    def exit(self): self.now -= 1
    def get(self): return dict(now=self.now, most=self.most, seen=self.seen)


class Caller:
    "A worker process making concurrent limited calls."
    def node(self):
        import ray
        return ray.get_runtime_context().get_node_id()

    async def run(self, lim, probe, n: int, hold_s: float, fail: bool = False) -> dict:
        ok = failed = 0
        async def one(i):
            nonlocal ok, failed
            try:
                async with lim.slot('code_interpreter'):
                    await probe.enter.remote()
                    try:
                        await asyncio.sleep(hold_s)
                        if fail: raise RuntimeError(f'call {i} failed')
                    finally: await probe.exit.remote()
                ok += 1
            except RuntimeError: failed += 1
        await asyncio.gather(*(one(i) for i in range(n)))
        return dict(ok=ok, failed=failed)

    async def cancel_some(self, lim, n: int) -> int:
        "Start `n` calls that time out while queued (or just after their grant)."
        async def one():
            try:
                async with asyncio.timeout(0.05):
                    async with lim.slot(): await asyncio.sleep(10)
            except TimeoutError: return 1
            return 0
        return sum(await asyncio.gather(*(one() for _ in range(n))))

    async def hold(self, lim, n: int):
        "Take `n` slots and never give them back (this process is then killed)."
        for _ in range(n): await lim.acquire()
        return n


def _callers(ray, k=4):
    cls = ray.remote(Caller)
    return [cls.options(num_cpus=0.5, scheduling_strategy='SPREAD').remote() for _ in range(k)]


def _wait_for(fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline: return v
        time.sleep(0.2)


def _limiter(**kw):
    return RayRateLimiter(max_concurrency=LIMIT, name=f'code_{uuid.uuid4().hex[:8]}',
                          namespace=NS, **kw)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_four_workers_fifty_calls_each_share_one_limit(cluster):
    ray = cluster
    lim, probe = _limiter(trace=True, lease_ttl_s=10), ray.remote(Probe).options(num_cpus=0).remote()
    callers = _callers(ray)
    assert len(set(ray.get([c.node.remote() for c in callers]))) == 2  # both nodes take part
    res = ray.get([c.run.remote(lim, probe, 50, 0.05) for c in callers])
    assert [r['ok'] for r in res] == [50] * 4
    p = ray.get(probe.get.remote())
    assert (p['most'], p['now'], p['seen']) == (LIMIT, 0, 200)  # exactly the limit, never more
    st = _wait_for(lambda: (s := lim.stats())['in_flight'] == 0 and s)
    assert (st['in_flight'], st['waiting'], st['granted'], st['max_in_flight']) == (0, 0, 200, LIMIT)
    arrivals, grants = ray.get(lim._handle().order.remote())
    assert len(grants) == 200 and grants == arrivals  # FIFO across processes and nodes

    # 1,000 failing calls (and 40 that time out while queued) give every slot back
    res = ray.get([c.run.remote(lim, probe, 250, 0.0, fail=True) for c in callers]
                  + [c.cancel_some.remote(lim, 10) for c in callers])
    assert [r['failed'] for r in res[:4]] == [250] * 4 and sum(res[4:]) == 40
    st = _wait_for(lambda: (s := lim.stats())['in_flight'] == 0 and s['waiting'] == 0 and s)
    assert (st['in_flight'], st['waiting'], st['max_in_flight']) == (0, 0, LIMIT)
    assert ray.get(probe.get.remote())['most'] == LIMIT
    lim.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fifo_order_of_one_caller(cluster):
    "Calls queued one after another behind a held slot are served in that order."
    ray = cluster
    lim = RayRateLimiter(max_concurrency=1, name=f'fifo_{uuid.uuid4().hex[:8]}', namespace=NS)
    order = []
    async def main():
        await lim.acquire()  # hold the only slot while the others queue
        async def one(i):
            async with lim.slot(): order.append(i)
        tasks = []
        for i in range(20):
            tasks.append(asyncio.create_task(one(i))); await asyncio.sleep(0.02)
        lim.release()
        await asyncio.gather(*tasks)
    asyncio.run(main())
    assert order == list(range(20))
    lim.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_killing_the_actor_mid_run_loses_no_call(cluster):
    ray = cluster
    lim, probe = _limiter(lease_ttl_s=2.0), ray.remote(Probe).options(num_cpus=0).remote()
    callers = _callers(ray)
    ray.get([c.node.remote() for c in callers])
    refs = [c.run.remote(lim, probe, 50, 0.2) for c in callers]
    _wait_for(lambda: ray.get(probe.get.remote())['seen'] >= 30)
    ray.kill(lim._handle(), no_restart=False)  # Ray restarts it with an empty state
    res = ray.get(refs)
    assert [r['ok'] for r in res] == [50] * 4  # every call ran, once
    p = ray.get(probe.get.remote())
    assert p['seen'] == 200 and p['now'] == 0 and p['most'] <= LIMIT
    st = _wait_for(lambda: (s := lim.stats())['in_flight'] == 0 and s)
    assert st['restarted'] and st['in_flight'] == 0 and st['waiting'] == 0
    lim.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_dead_workers_slots_come_back(cluster):
    ray = cluster
    lim = _limiter(lease_ttl_s=1.0)
    [holder] = _callers(ray, 1)
    assert ray.get(holder.hold.remote(lim, 4)) == 4
    assert lim.stats()['in_flight'] == 4
    ray.kill(holder)  # the process dies holding 4 slots
    st = _wait_for(lambda: (s := lim.stats())['in_flight'] == 0 and s, timeout=20)
    assert (st['in_flight'], st['expired']) == (0, 4)
    async def all_ten():  # the whole limit is usable again
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(LIMIT): await stack.enter_async_context(lim.slot())
            return (await lim.astats())['in_flight']
    assert asyncio.run(all_ten()) == LIMIT
    lim.kill()


# ---------------------------------------------------------------- rollout workers
def make_collector():
    from tunix_agentic.rollout.workers import scripted_calculator
    return scripted_calculator(2, logprob=-0.25)


TASKS = [{'question': f'What is {a}*{a + 7}?', 'answer': str(a * (a + 7) + (a % 3 == 0))}
         for a in range(11, 43)]


def _key(t):
    return (t.episode_id, t.group_id, t.status, t.input_ids, t.response_mask, t.logprobs,
            t.prompt_len, t.reward, [s.reward for s in t.steps], t.messages, t.policy_version)


def _limited_collector(lim):
    "The workers' collector, its tool calls under the cluster-wide limit `lim`."
    from tunix_agentic.tools.ratelimit import ToolRateLimiter
    from tunix_agentic.rollout.workers import scripted_calculator
    return scripted_calculator(2, logprob=-0.25, tool_ms=50, max_concurrency=16,
                               rate_limiter=ToolRateLimiter(global_limiter=lim))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_64_episodes_over_4_workers_equal_one_process_and_share_one_ray_limit(cluster):
    """64 episodes over 4 workers on two nodes = one process's, and the tool path (`ToolManager` ->
    `ToolRateLimiter` -> `RayRateLimiter`) limits the whole cluster (one pool of workers for both:
    starting one takes most of the time)."""
    import functools
    from tunix_agentic.rollout.ray_workers import RayCollector
    lim = RayRateLimiter(max_concurrency=3, name=f'tools_{uuid.uuid4().hex[:8]}', namespace=NS)
    rc = RayCollector(functools.partial(_limited_collector, lim), num_workers=4, groups_per_worker=4,
                      num_cpus=0.5)
    try:
        assert len({i['node_id'] for i in rc.info()}) == 2
        got = rc.run(TASKS)  # 64 episodes, one 50 ms call each, up to 64 wanting a slot at once
        want = make_collector().run(TASKS)
        assert len(got) == 64 and [_key(t) for t in got] == [_key(t) for t in want]
        assert 0 < sum(t.reward for t in got) < 64  # rewards differ between tasks
        st = _wait_for(lambda: (s := lim.stats())['in_flight'] == 0 and s)
        assert (st['granted'], st['max_in_flight'], st['in_flight'], st['waiting']) == (64, 3, 0, 0)
        again = rc.run(TASKS[:4], step=3)  # the numbering goes on as one engine's would
        assert [t.group_id for t in again[::2]] == ['s3-g000032', 's3-g000033', 's3-g000034',
                                                    's3-g000035']
    finally:
        rc.close(); lim.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_online_loop_on_ray_workers(cluster, tmp_path):
    from conftest import two_sync_steps_over_workers
    from tunix_agentic.rollout.ray_workers import RayCollector
    rc = RayCollector(make_collector, num_workers=2, num_cpus=0.5)
    try: two_sync_steps_over_workers(rc, TASKS, tmp_path)
    finally: rc.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_workers_sampling_from_a_central_engine(cluster):
    "The engine lives in this process behind an EngineServer; workers sample over HTTP."
    import functools
    from tunix_agentic.rollout.ray_workers import RayCollector, multiply_solver, scripted_calculator
    from tunix_agentic.engines.engine import ScriptedEngine
    from tunix_agentic.engines.server import EngineServer
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    tok = build_tiny_tokenizer()
    engine = ScriptedEngine(tok, multiply_solver, logprob=-0.25)
    with EngineServer(engine, tok) as srv:
        rc = RayCollector(functools.partial(scripted_calculator, 2, engine_url=srv.url),
                          num_workers=2, num_cpus=0.5, weights=engine)
        try:
            got = rc.run(TASKS[:8])
            assert [_key(t) for t in got] == [_key(t) for t in make_collector().run(TASKS[:8])]
            rc.weights.update_params(None, 5)  # the weights go to the central engine only
            assert all(t.metrics['policy_version_last'] == 5 for t in rc.run(TASKS[:2]))
        finally: rc.close()
