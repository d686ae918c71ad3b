"""Seed 004 over real processes: a rollout server in its own process calls back to the trainer's
EngineServer; remote collection equals local collection; a killed engine is an `error` rollout;
429s under load are retried to completion; fuzzed bodies never get a 500 or hang."""
import concurrent.futures, json, os, re, signal, subprocess, sys, time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.envs.environments import ToolEnvironment
from tunix_agentic.serve.remote import RemoteCollector
from tunix_agentic.engines.engine import GenerateOutput, ScriptedEngine
from tunix_agentic.serve.rollout_server import RolloutRequest, RolloutServer, RolloutSettings
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import TrajectoryStatus

DEAD_URL = 'http://127.0.0.1:9'  # discard port: connection refused


def call(name, a, b):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


SCRIPT = [call('multiply', 12, 34), call('add', 408, 5), 'The answer is 413. #### 413']


class VariedEngine(ScriptedEngine):
    "Scripted, with logprobs that differ per token, so a logprob mix-up would show."
    def sample_one(self, prompt_ids, params):
        o = super().sample_one(prompt_ids, params)
        lps = [-((t * 7 + i) % 13) / 10 for i, t in enumerate(o.token_ids)]
        return GenerateOutput(o.token_ids, lps, o.finish_reason)


def spawn(code: str, env: dict | None = None):
    "Start a python process that prints its URL as the last word of its first line."
    e = {**os.environ, 'ROLLOUT_SERVER_PORT': '0', 'HF_HUB_OFFLINE': '1', 'JAX_PLATFORMS': 'cpu',
         'ROLLOUT_CALLBACK_HOSTS': 'loopback', **(env or {})}
    p = subprocess.Popen([sys.executable, '-c', code], env=e, stdout=subprocess.PIPE, text=True)
    url = p.stdout.readline().split()[-1]
    for _ in range(200):
        try:
            if httpx.get(url + '/health', timeout=1).status_code == 200: return p, url
        except httpx.TransportError: time.sleep(0.05)
    p.kill(); raise RuntimeError(f'{code!r} did not come up')


def stop(p):
    p.send_signal(signal.SIGTERM)
    try: p.wait(10)
    except subprocess.TimeoutExpired: p.kill(); p.wait()


SERVE_ROLLOUT = 'from tunix_agentic.serve.rollout_server import serve; serve()'


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


@pytest.fixture(scope='module')
def rollout_server():
    p, url = spawn(SERVE_ROLLOUT)
    yield url
    stop(p)


def tasks(n):
    return [{'question': f'What is 12*34+5? (variant {i})', 'answer': '#### 413'} for i in range(n)]


@pytest.mark.timeout(120)
def test_remote_collection_is_identical_to_local(tok, rollout_server):
    cfg = CollectConfig(group_size=2)
    env_fn = lambda t: ToolEnvironment(t, tools=calculator_tools(), reward_fn='gsm8k', max_turns=4)
    local = TrajectoryCollector(VariedEngine(tok, SCRIPT), tok, env_fn, config=cfg)
    local = local.run(tasks(8))
    col = RemoteCollector(VariedEngine(tok, SCRIPT), tok, rollout_server, config=cfg, max_turns=4)
    try: remote = col.run(tasks(8))
    finally: col.close()
    assert len(remote) == len(local) == 16
    fields = lambda t: (t.task, t.episode_id, t.group_id, t.input_ids, t.response_mask, t.logprobs,
                        t.prompt_len, t.reward, t.status, t.messages, [s.reward for s in t.steps],
                        [s.mc_return for s in t.steps], t.metrics['env_seed'],
                        t.metrics['sampling_seed'])
    for r, l in zip(remote, local): assert fields(r) == fields(l)
    assert {t.status for t in remote} == {TrajectoryStatus.DONE}
    assert sum(t.reward for t in remote) == 16
    assert len(set(remote[0].logprobs)) > 5  # per-token logprobs, not one constant


ENGINE = '''
import sys, time
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.server import EngineServer
class Slow(ScriptedEngine):
    def generate(self, prompts, params):
        time.sleep(1.0); return super().generate(prompts, params)
tok = build_tiny_tokenizer()
call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
srv = EngineServer(Slow(tok, [call]), tok)
print('engine on', srv.url, flush=True)
srv.http.server.run(sockets=[srv.http.sock])
'''


def body(rid, url, **kw):
    return {'rollout_id': rid, 'server_url': url, 'max_turns': 4, 'timeout_s': 30,
            'messages': [{'role': 'user', 'content': 'What is 1+2?'}], **kw}


@pytest.mark.timeout(120)
def test_killed_engine_ends_the_rollout_as_error_and_the_server_keeps_serving(tok, rollout_server):
    eng, eng_url = spawn(ENGINE)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        t0 = time.monotonic()
        fut = ex.submit(httpx.post, rollout_server + '/rollout', json=body('kill-1', eng_url),
                        timeout=60)
        time.sleep(1.5)  # the first turn finished, the second is being sampled
        eng.kill(); eng.wait()
        r = fut.result().json()
        took = time.monotonic() - t0
    assert r['status'] == 'ERROR' and r['finish_reason'] == 'error', r
    assert 'callback' in r['error_message'] and eng_url in r['error_message'], r['error_message']
    assert took < 30
    assert httpx.get(rollout_server + '/health').json()['active_rollouts'] == 0
    with EngineServer(ScriptedEngine(tok, SCRIPT), tok) as live:  # the server still serves
        ok = httpx.post(rollout_server + '/rollout', json=body('kill-2', live.url), timeout=60)
        ok = ok.json()
    assert ok['finish_reason'] == 'stop', ok


@pytest.mark.timeout(60)
def test_wrong_api_keys_get_401(tok):
    rs = RolloutServer(RolloutSettings(api_key='secret', callback_hosts=('loopback',))).start()
    try:
        with EngineServer(ScriptedEngine(tok, SCRIPT), tok, api_key='cb-key') as eng:
            url = rs.url + '/rollout'
            assert httpx.post(url, json=body('k1', eng.url)).status_code == 401
            hdr = {'Authorization': 'Bearer secret'}
            bad = httpx.post(url, json=body('k2', eng.url, callback_api_key='nope'), headers=hdr,
                             timeout=30).json()
            assert bad['finish_reason'] == 'error' and '401' in bad['error_message']
            good = httpx.post(url, json=body('k3', eng.url, callback_api_key='cb-key'), headers=hdr,
                              timeout=30).json()
            assert good['finish_reason'] == 'stop'
    finally: rs.close()


# ---- fuzzing: 1,000 bodies to /rollout, 300 to /v1/chat/completions ----
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=12), ch, max_size=4),
    max_leaves=12)
BASE = body('fuzz', DEAD_URL, timeout_s=5, max_turns=2)


@st.composite
def fuzzed(draw, base):
    kind = draw(st.sampled_from(['value', 'replace', 'drop', 'extra', 'nested', 'bytes']))
    if kind == 'value': return json.dumps(draw(json_values)).encode()
    if kind == 'bytes': return draw(st.binary(max_size=64))
    b = json.loads(json.dumps(base))
    k = draw(st.sampled_from(sorted(b)))
    if kind == 'replace': b[k] = draw(json_values)
    elif kind == 'drop': del b[k]
    elif kind == 'extra': b[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
    else:
        m = b['messages'][0]
        m[draw(st.sampled_from(['role', 'content', 'tool_calls', 'name']))] = draw(json_values)
    return json.dumps(b).encode()


def _valid(model, raw: bytes) -> bool:
    try: model.model_validate_json(raw); return True
    except Exception: return False


def _fuzz(url, base, model, n):
    codes = []
    with httpx.Client(timeout=15) as client:
        @settings(max_examples=n, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(fuzzed(base))
        def check(raw):
            r = client.post(url, content=raw, headers={'Content-Type': 'application/json'})
            codes.append(r.status_code)
            assert r.status_code < 500, (raw[:200], r.text[:300])
            if r.status_code == 200: assert _valid(model, raw), raw[:200]
            else: assert 400 <= r.status_code < 500 and 'error' in r.json()
        check()
    return codes


@pytest.mark.timeout(300)
def test_fuzzed_rollout_bodies_get_4xx_never_500(rollout_server):
    codes = _fuzz(rollout_server + '/rollout', BASE, RolloutRequest, 1000)
    assert len(codes) == 1000 and codes.count(422) > 500
    assert httpx.get(rollout_server + '/health').json()['active_rollouts'] == 0


@pytest.mark.timeout(300)
def test_fuzzed_chat_bodies_get_4xx_never_500(tok):
    from tunix_agentic.engines.server import ChatRequest
    base = {'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 8}
    with EngineServer(ScriptedEngine(tok, SCRIPT), tok) as srv:
        codes = _fuzz(srv.url + '/v1/chat/completions', base, ChatRequest, 300)
    assert len(codes) == 300 and codes.count(422) > 100


# ---- load: 1,000 rollouts at 200 concurrent against max_concurrent_rollouts=100 ----
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize('queued', [0, 1024])  # 0: the 429-only design; 1024: the FIFO queue
def test_load_1000_rollouts_none_lost_or_duplicated_429s_retried(tok, queued):
    p, url = spawn(SERVE_ROLLOUT, {'MAX_CONCURRENT_ROLLOUTS': '100',
                                   'MAX_QUEUED_ROLLOUTS': str(queued),
                                   'ROLLOUT_TOOL_LATENCY_MS': '10,100'})
    try:
        col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, url,
                              config=CollectConfig(group_size=1, max_concurrency=200), max_turns=4)
        try: trajs = col.run(tasks(1000))
        finally: col.close()
        metrics = httpx.get(url + '/metrics').text
    finally: stop(p)
    assert len(trajs) == 1000 and len({t.episode_id for t in trajs}) == 1000
    assert [t.status for t in trajs] == [TrajectoryStatus.DONE] * 1000, \
        {t.error for t in trajs if t.status != TrajectoryStatus.DONE}
    assert all(t.metrics['remote_turns'] == 3 and t.reward == 1.0 for t in trajs)
    assert col.engine_server.records == {}
    val = lambda name: float(re.search(rf'^{re.escape(name)} (\S+)$', metrics, re.M).group(1))
    assert val('rollouts_total{finish_reason="stop"}') == 1000  # each ran exactly once
    assert (col.counts['rejected_429'] > 0) == (queued == 0)  # the queue holds all 200
    # every 429 the caller retried, whichever bound refused it: the server's slots or its quota
    rejected = re.findall(r'^rollouts_rejected_total\{reason="(?:concurrency|caller_quota)"\} (\S+)$',
                          metrics, re.M)
    assert sum(map(float, rejected)) == col.counts['rejected_429']
    print(f"\n1000 rollouts at 200 concurrent, max 100: {col.counts['rejected_429']} 429s retried")


# ---- the online loop over remote rollouts ----
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_online_loop_trains_on_remote_rollouts(tmp_path):
    from flax import nnx
    from tunix_agentic.learn.loop import LoopConfig, OnlineLoop
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    tok = build_tiny_tokenizer()
    mcfg = ModelConfig.tiny(vocab_size=len(tok), num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    class Recording(ScriptedEngine):
        versions = ()
        def update_params(self, params, version=None):
            self.versions = (*self.versions, version); super().update_params(params, version)
    engine = Recording(tok, SCRIPT)
    rs = RolloutServer(RolloutSettings(callback_hosts=('loopback',))).start()
    col = RemoteCollector(engine, tok, rs.url, config=CollectConfig.tiny(group_size=2))
    try:
        tr = Trainer(Qwen2(mcfg, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(1024,)))
        tasks_ = [{'question': f'What is 12*34+5? #{i}', 'answer': '413' if i % 2 else '414'}
                  for i in range(4)]
        recs = OnlineLoop(tr, col, tasks_, LoopConfig.tiny(mode='sync', steps=2,
                                                           output_dir=str(tmp_path))).run()
    finally: col.close(); rs.close()
    assert [r['step'] for r in recs] == [0, 1]
    assert engine.versions == (0, 1, 2)  # the weights go to the engine behind the callback
    assert recs[0]['turns/mean'] == 3 and 0 < recs[0]['success'] < 1
    assert all(r['max_staleness_trained'] == 0 for r in recs)


@pytest.mark.timeout(60)
def test_cli_serve_rollout_serves(tok):
    code = ("from tunix_agentic.app.cli import main; "
            "main(['serve-rollout', '--port', '0', '--max-concurrent-rollouts', '3'])")
    p, url = spawn(code)
    try:
        h = httpx.get(url + '/health').json()
        assert (h['max_concurrent_rollouts'], h['tools']) == (3, ['add', 'subtract', 'multiply',
                                                                  'divide'])
        with EngineServer(ScriptedEngine(tok, SCRIPT), tok) as eng:
            r = httpx.post(url + '/rollout', json=body('cli-1', eng.url), timeout=30).json()
        assert r['finish_reason'] == 'stop'
    finally: stop(p)
