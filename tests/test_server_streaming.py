"""Streaming: the streamed content and tool calls equal the batch parse for every text and every
chunking (hypothesis), token deltas add up to the decode, and the official openai client with
stream=True rebuilds the non-streaming answer."""
import json

import openai
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.chat.parsers import get_tool_parser
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.server import EngineServer, PlainTextParser
from tunix_agentic.engines.streaming import StreamingToolParser, text_deltas
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools

FRAGMENTS = ['Let me', ' compute', '.', ' ', '\n', '  ', '✓', '<tool_call>', '</tool_call>',
             '<tool_c', '<tool_', '</tool', '<think>', '</think>', '<|python_tag|>', ';', '{', '}',
             '"',
             '{"name": "add", "arguments": {"a": 1, "b": 2}}',
             '{"name": "multiply", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}',
             '{"name": "x", "arguments": {"s": "</tool_call> <tool_call>"}}',
             '[{"name": "add", "parameters": {"a": 5}}]', '{"name": ', '{"nam', 'The answer is 42.',
             '<tool_call>{"name": "add", "arguments": {}}', '<tool_call>\n[{"name": "add"}]\n',
             '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
             '<think>{"name": "add"}</think>', '<|python_tag|>{"name": "add", "parameters": {}}']
PARSERS = {'plain': PlainTextParser(), **{n: get_tool_parser(n) for n in
                                          ('qwen', 'hermes', 'qwen3', 'llama3_json')}}


@st.composite
def chunked(draw):
    frag = st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(FRAGMENTS), st.text(max_size=6))
    frags = draw(st.lists(frag, max_size=14))
    text, ends = ''.join(frags), [sum(map(len, frags[:i + 1])) for i in range(len(frags))]
    at_fragments = st.sampled_from(ends) if ends else st.just(0)  # where a bad parser trips
    cuts = sorted(draw(st.lists(st.integers(0, len(text)) | at_fragments, max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.timeout(300)
@pytest.mark.parametrize('name', sorted(PARSERS))
@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(chunked())
def test_stream_equals_batch_parse_for_every_chunking(name, case):
    text, chunks = case
    parser = PARSERS[name]
    sp = StreamingToolParser(parser)
    content, calls = '', []
    for ch in chunks:
        d, cs = sp.feed(ch); content += d; calls += cs
    d, cs, res = sp.finish(); content += d; calls += cs
    want = parser.parse(text)
    assert (content, calls, res.errors, res.reasoning) == (want.content, want.calls, want.errors,
                                                         want.reasoning)


def test_qwen_streams_content_before_the_end():
    sp = StreamingToolParser(get_tool_parser('qwen'))
    assert sp.feed('Hello there, <tool_ca')[0] == 'Hello there,'
    assert sp.feed('ll>{"name": "add", "arguments": {}}')[1] == []  # the block is not closed yet
    assert [c.name for c in sp.feed('</tool_call>')[1]] == ['add']


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.text(max_size=40))
def test_token_deltas_add_up_to_the_decode(text):
    tok = _TOK
    ids = tok.encode(text, add_special_tokens=False)
    assert ''.join(text_deltas(tok, ids)) == tok.decode(ids, skip_special_tokens=False)


_TOK = build_tiny_tokenizer()

SCRIPTS = ['Sure. <tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>\n'
           '<tool_call>\n{"name": "add", "arguments": {"a": 42, "b": 1}}\n</tool_call>',
           'No tools needed: 6 × 7 = 42 ✓',
           '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call> oops']


@pytest.mark.timeout(60)
@pytest.mark.parametrize('script', SCRIPTS)
def test_openai_client_stream_equals_whole_answer(tok, script):
    tools = [t.schema for t in calculator_tools()]
    with EngineServer(ScriptedEngine(tok, [script]), tok) as srv:
        client = openai.OpenAI(base_url=srv.url + '/v1', api_key='x', max_retries=0)
        kw = dict(model='tunix-agentic', tools=tools, messages=[{'role': 'user', 'content': 'hi'}])
        whole = client.chat.completions.create(**kw)
        events = list(client.chat.completions.create(
            stream=True, stream_options={'include_usage': True}, **kw))
    m = whole.choices[0].message
    content = ''.join(e.choices[0].delta.content or '' for e in events if e.choices)
    calls = [tc.function for e in events if e.choices for tc in e.choices[0].delta.tool_calls or []]
    assert content == (m.content or '')
    assert [(f.name, json.loads(f.arguments)) for f in calls] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls or []]
    last = [e for e in events if e.choices][-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason
    assert (last.token_ids, last.token_logprobs) == (whole.token_ids, whole.token_logprobs)
    assert events[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chunked_stream_arrives_in_pieces_and_equals_the_whole_greedy_answer(tok):
    """stream_chunk_tokens=4 over a JaxEngine with its prefix cache: several content chunks, and
    the same text, ids and logprobs as one non-streamed greedy call."""
    import httpx
    from flax import nnx
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2
    mcfg = ModelConfig.tiny(vocab_size=len(tok), num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    engine = JaxEngine(Qwen2(mcfg, rngs=nnx.Rngs(0)), config=JaxEngineConfig(
        max_batch=2, min_batch_bucket=1, min_prompt_bucket=32, min_gen_bucket=4,
        prefix_cache_tokens=4096))
    body = {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 12, 'temperature': 0}
    with EngineServer(engine, tok, stream_chunk_tokens=4) as srv:
        url = srv.url + '/v1/chat/completions'
        whole = httpx.post(url, json=body, timeout=120).json()
        with httpx.stream('POST', url, json={**body, 'stream': True}, timeout=120) as r:
            events = [json.loads(l[6:]) for l in r.iter_lines() if l.startswith('data: {')]
    pieces = [e['choices'][0]['delta'].get('content') for e in events if e['choices']]
    pieces = [p for p in pieces if p]
    last = [e for e in events if e['choices']][-1]
    assert ''.join(pieces) == (whole['choices'][0]['message']['content'] or '')
    assert last['token_ids'] == whole['token_ids']
    assert last['token_logprobs'] == pytest.approx(whole['token_logprobs'], abs=1e-4)
    if len(whole['token_ids']) > 8: assert len(pieces) >= 2
