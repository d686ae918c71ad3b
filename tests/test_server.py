"""EngineServer over real loopback HTTP: the official openai client, token ids and logprobs,
concurrent requests sharing batches, HttpEngine under the collector, and clear errors instead of
hangs."""
import asyncio, json, socket, time

import httpx
import openai
import pytest

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.envs.environments import ToolEnvironment
from tunix_agentic.engines.engine import BaseEngine, SamplingParams, ScriptedEngine
from tunix_agentic.engines.http_engine import EngineHTTPError, HttpEngine
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


def call(name, a, b):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def _script(): return [call('multiply', 12, 34), call('add', 408, 5), 'The answer is 413.']


class SlowEngine(ScriptedEngine):
    "A scripted policy whose batches take a while, so concurrent requests queue up behind one."
    def generate(self, prompts, params):
        time.sleep(0.2)
        return super().generate(prompts, params)


@pytest.mark.timeout(60)
def test_openai_client_chat_with_tools_gets_calls_ids_and_logprobs(tok):
    tools = [t.schema for t in calculator_tools()]
    with EngineServer(ScriptedEngine(tok, _script(), logprob=-0.25), tok, api_key='sk-1') as srv:
        client = openai.OpenAI(base_url=srv.url + '/v1', api_key='sk-1', max_retries=0)
        msgs = [{'role': 'user', 'content': 'What is 12*34+5?'}]
        r = client.chat.completions.create(model='tunix-agentic', messages=msgs, tools=tools,
                                           logprobs=True, max_tokens=64)
        c = r.choices[0]
        assert c.finish_reason == 'tool_calls'
        assert [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls] \
            == [('multiply', {'a': 12, 'b': 34})]
        assert tok.decode(r.token_ids) == _script()[0] + '<|im_end|>'
        assert r.token_logprobs == [-0.25] * len(r.token_ids)
        assert [x.logprob for x in c.logprobs.content] == r.token_logprobs
        assert r.prompt_token_ids == tok.apply_chat_template(msgs, tools=tools, tokenize=True,
                                                              add_generation_prompt=True)
        assert r.usage.completion_tokens == len(r.token_ids)
        # the assistant turn goes back as OpenAI sends it (arguments as a JSON string), then tool
        msgs2 = msgs + [c.message.model_dump(exclude_none=True),
                        {'role': 'tool', 'tool_call_id': c.message.tool_calls[0].id,
                         'content': '408'}]
        r2 = client.chat.completions.create(model='tunix-agentic', messages=msgs2, tools=tools)
        assert r2.choices[0].message.tool_calls[0].function.name == 'add'
        # token ids in, token ids out: /v1/completions with a list of ids
        cp = client.completions.create(model='tunix-agentic', prompt=r.prompt_token_ids,
                                       max_tokens=5,
                                       logprobs=0)
        assert cp.choices[0].finish_reason == 'length' and cp.token_ids == r.token_ids[:5]
        assert cp.choices[0].logprobs.token_logprobs == [-0.25] * 5
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + '/v1', api_key='wrong', max_retries=0).models.list()


@pytest.mark.timeout(60)
def test_concurrent_requests_share_batches(tok):
    engine = SlowEngine(tok, ['hello'])
    with EngineServer(engine, tok) as srv:
        client = openai.AsyncOpenAI(base_url=srv.url + '/v1', api_key='x', max_retries=0)
        async def many():
            return await asyncio.gather(*[client.chat.completions.create(
                model='tunix-agentic', messages=[{'role': 'user', 'content': f'q{i}'}]) for i in range(16)])
        outs = asyncio.run(many())
    assert [o.choices[0].message.content for o in outs] == ['hello'] * 16
    assert sum(engine.batcher.batch_sizes) == 16 and max(engine.batcher.batch_sizes) > 1


@pytest.mark.timeout(60)
def test_bad_requests_are_422_naming_the_field(tok):
    with EngineServer(ScriptedEngine(tok, ['hi']), tok) as srv:
        post = lambda path, body: httpx.post(srv.url + path, json=body, timeout=10)
        cases = {'messages.0.role': {'messages': [{'role': 'robot', 'content': 'x'}]},
                 'n': {'messages': [{'role': 'user', 'content': 'x'}], 'n': 2},
                 'temperature': {'messages': [{'role': 'user', 'content': 'x'}], 'temperature': -1},
                 'prompt_token_ids': {'messages': [{'role': 'user', 'content': 'x'}],
                                      'prompt_token_ids': [10 ** 9]},
                 'max_tokens': {'messages': [{'role': 'user', 'content': 'x'}],
                                'max_tokens': 10 ** 6}}
        for field, body in cases.items():
            r = post('/v1/chat/completions', body)
            assert r.status_code == 422 and field in r.json()['error']['message'], (field, r.text)
        r = post('/generate', {'prompts': [[1]], 'params': {'temprature': 0.5}})
        assert r.status_code == 422 and 'temprature: Extra inputs' in r.json()['error']['message']
        r = httpx.post(srv.url + '/v1/chat/completions', content=b'{not json', timeout=10,
                       headers={'content-type': 'application/json'})
        assert r.status_code == 422
        assert httpx.get(srv.url + '/nope').status_code == 404


def _collect(engine, tok, n_tasks=8):
    env_fn = lambda t: ToolEnvironment(t, tools=calculator_tools(), reward_fn='gsm8k', max_turns=4)
    cfg = CollectConfig(group_size=2)
    col = TrajectoryCollector(engine, tok, env_fn, config=cfg)
    return col.run([{'question': f'12*34+5? ({i})', 'answer': '#### 413'} for i in range(n_tasks)])


@pytest.mark.timeout(120)
def test_collector_through_http_rollout_matches_direct(tok):
    direct = _collect(ScriptedEngine(tok, _script()), tok)
    with EngineServer(ScriptedEngine(tok, _script()), tok) as srv:
        remote = _collect(HttpEngine(srv.url), tok)
    assert len(remote) == len(direct) == 16
    key = lambda t: t.task['question']
    for r, d in zip(sorted(remote, key=key), sorted(direct, key=key)):
        assert (r.input_ids, r.response_mask, r.logprobs, r.reward, r.status) == \
               (d.input_ids, d.response_mask, d.logprobs, d.reward, d.status)
    assert all(t.reward == 1.0 for t in remote)


class Failing(BaseEngine):
    def generate(self, prompts, params): raise RuntimeError('device on fire')


class Slow(BaseEngine):
    def generate(self, prompts, params):
        time.sleep(3); return []


@pytest.mark.timeout(30)
def test_engine_failure_is_a_clear_error_and_server_keeps_serving(tok):
    with EngineServer(Failing(), tok) as srv:
        c = HttpEngine(srv.url)
        for _ in range(2):
            with pytest.raises(EngineHTTPError, match='500: engine failed: RuntimeError'):
                c.generate([[1, 2]], [SamplingParams()])
        assert c.health()['status'] == 'ok'


@pytest.mark.timeout(30)
def test_timeout_becomes_an_error_not_a_hang(tok):
    with EngineServer(Slow(), tok) as srv:
        c = HttpEngine(srv.url, timeout_s=0.5, retries=0)
        t0 = time.monotonic()
        with pytest.raises(EngineHTTPError, match='failed after 1 tries'):
            c.generate([[1]], [SamplingParams()])
        assert time.monotonic() - t0 < 2.5


@pytest.mark.timeout(30)
def test_unreachable_server_retries_then_fails():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    c = HttpEngine(f'http://127.0.0.1:{port}', retries=2, backoff_s=0.01)
    with pytest.raises(EngineHTTPError, match='failed after 3 tries'):
        c.generate([[1]], [SamplingParams()])
    with pytest.raises(NotImplementedError, match='push weights'):
        c.update_params({})


@pytest.mark.timeout(300)
def test_jax_sampler_behind_the_server_matches_direct_sampling(tok):
    from flax import nnx
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    mcfg = ModelConfig.tiny(vocab_size=len(tok), num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    engine = JaxEngine(Qwen2(mcfg, rngs=nnx.Rngs(0)), config=JaxEngineConfig(max_batch=4))
    qs = [[{'role': 'user', 'content': f'What is {i} + {i}?'}] for i in range(4)]
    with EngineServer(engine, tok) as srv:
        client = openai.AsyncOpenAI(base_url=srv.url + '/v1', api_key='x', max_retries=0)
        async def ask():
            return await asyncio.gather(*[client.chat.completions.create(
                model='tunix-agentic', messages=q, temperature=0.0, max_tokens=8, seed=i)
                for i, q in enumerate(qs)])
        outs = asyncio.run(ask())
    for i, o in enumerate(outs):
        p = SamplingParams(temperature=0.0, max_new_tokens=8, seed=i,
                           stop_token_ids=tuple(srv.end_ids))
        want = engine.generate([o.prompt_token_ids], [p])[0]
        assert o.token_ids == want.token_ids
        assert o.token_logprobs == pytest.approx(want.logprobs, abs=1e-4)
