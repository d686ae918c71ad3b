"""RolloutServer / HttpRollout over real loopback HTTP: the collector runs unchanged against a remote engine."""
import socket, time

import pytest

from tunix_agentic.rollout import BaseRollout, ScriptedPolicy, SamplingParams
from tunix_agentic.server import HttpRollout, RolloutHTTPError, RolloutServer
from tunix_agentic.tokenizer import build_tiny_tokenizer
from tunix_agentic.envs import ToolEnvironment
from tunix_agentic.tools import calculator_tools
from tunix_agentic.collector import TrajectoryCollectEngine, CollectConfig


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


def _script():
    call = lambda n, a, b: f'<tool_call>\n{{"name": "{n}", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    return [call('multiply', 12, 34), call('add', 408, 5), 'The answer is 413.']


def _collect(engine, tok, n_tasks=8):
    env_fn = lambda t: ToolEnvironment(t, tools=calculator_tools(), reward_fn='gsm8k', max_steps=4)
    col = TrajectoryCollectEngine(engine, tok, env_fn, config=CollectConfig(max_turns=4, group_size=2))
    return col.run([{'question': f'12*34+5? ({i})', 'answer': '#### 413'} for i in range(n_tasks)])


@pytest.mark.timeout(120)
def test_collector_through_http_matches_direct(tok):
    direct = _collect(ScriptedPolicy(tok, _script()), tok)
    with RolloutServer(ScriptedPolicy(tok, _script())) as srv:
        remote = _collect(HttpRollout(srv.url), tok)
    assert len(remote) == len(direct) == 16
    for r, d in zip(sorted(remote, key=lambda t: t.task['question']), sorted(direct, key=lambda t: t.task['question'])):
        assert (r.input_ids, r.response_mask, r.logprobs, r.reward, r.status) == \
               (d.input_ids, d.response_mask, d.logprobs, d.reward, d.status)
    assert all(t.reward == 1.0 for t in remote)


class Failing(BaseRollout):
    def generate(self, prompts, params): raise RuntimeError('device on fire')


class Slow(BaseRollout):
    def generate(self, prompts, params):
        time.sleep(3); return []


@pytest.mark.timeout(30)
def test_engine_failure_is_a_clear_error_and_server_keeps_serving():
    with RolloutServer(Failing()) as srv:
        c = HttpRollout(srv.url)
        for _ in range(2):
            with pytest.raises(RolloutHTTPError, match='500: RuntimeError: device on fire'):
                c.generate([[1, 2]], [SamplingParams()])
        assert c.health()['ok']


@pytest.mark.timeout(30)
def test_timeout_becomes_an_error_not_a_hang():
    with RolloutServer(Slow()) as srv:
        c = HttpRollout(srv.url, timeout_s=0.5, retries=0)
        t0 = time.monotonic()
        with pytest.raises(RolloutHTTPError, match='failed after 1 tries'):
            c.generate([[1]], [SamplingParams()])
        assert time.monotonic() - t0 < 2.5


@pytest.mark.timeout(30)
def test_unreachable_server_retries_then_fails():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    c = HttpRollout(f'http://127.0.0.1:{port}', retries=2, backoff_s=0.01)
    with pytest.raises(RolloutHTTPError, match='failed after 3 tries'):
        c.generate([[1]], [SamplingParams()])


@pytest.mark.timeout(30)
def test_bad_requests_are_400_naming_the_field(tok):
    with RolloutServer(ScriptedPolicy(tok, ['hi'])) as srv:
        c = HttpRollout(srv.url)
        with pytest.raises(RolloutHTTPError, match="400: unknown sampling params \\['temprature'\\]"):
            c._request('POST', '/generate', {'prompts': [[1]], 'params': {'temprature': 0.5}})
        with pytest.raises(RolloutHTTPError, match='404'):
            c._request('GET', '/nope')
        with pytest.raises(NotImplementedError, match='push weights'):
            c.update_params({})
