"Parser behaviour list, hypothesis property tests (never raises), and the 10,000-output fuzz."
import asyncio, random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.chat.parsers import (Llama3JsonToolParser, ParseResult, Qwen3ToolParser,
                                   QwenToolParser, get_tool_parser, get_tool_prompt)
from tunix_agentic.core.trajectory import Action, ToolCall

NAMES = ['qwen', 'hermes', 'qwen3', 'llama3_json']
FRAGMENTS = ['<tool_call>', '</tool_call>', '<think>', '</think>', '<|python_tag|>', '<|eot_id|>',
             '{', '}', '[', ']', '"', '\\', ':', ',', ';', '\n', ' ', 'name', 'arguments',
             'parameters', '"name"', '"arguments"', '"add"', '1', '-2.5e3', 'null', 'true', 'ü',
             '日本', '\x00', '```json']


def _block(name='add', args=None, fmt='qwen'):
    args = {'a': 1, 'b': 2} if args is None else args
    return get_tool_parser(fmt).format_calls([ToolCall(name, args)])


# ---- behaviour list -------------------------------------------------------------------------

@pytest.mark.parametrize('fmt', ['qwen', 'hermes', 'qwen3'])
def test_zero_one_many(fmt):
    p = get_tool_parser(fmt)
    assert p.parse('plain answer') == ParseResult([], 'plain answer')
    assert p.parse(_block()).calls == [ToolCall('add', {'a': 1, 'b': 2})]
    r = p.parse('before ' + _block('a', {}) + ' between ' + _block('b', {'x': [1]}) + ' after')
    assert [c.name for c in r.calls] == ['a', 'b']
    assert r.content == 'before  between  after' and r.errors == []


@pytest.mark.parametrize('args', ['{"a": 1}', '"{\\"a\\": 1}"'])
def test_arguments_object_or_string(args):
    r = QwenToolParser().parse('<tool_call>{"name": "f", "arguments": %s}</tool_call>' % args)
    assert r.calls == [ToolCall('f', {'a': 1})] and r.errors == []


def test_parameters_alias_and_missing_arguments():
    p = QwenToolParser()
    r = p.parse('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>')
    assert r.calls == [ToolCall('f', {'a': 1})]
    assert p.parse('<tool_call>{"name": "f"}</tool_call>').calls == [ToolCall('f', {})]
    r = p.parse('<tool_call>{"name": "f", "arguments": null}</tool_call>')
    assert r.calls == [ToolCall('f', {})]


def test_nested_unicode_escaped():
    args = {'s': 'quote " and \\ backslash, 日本語 ✓ 😀', 'n': {'l': [1, {'m': None}], 'f': -1.5e-3}}
    for fmt in ('qwen', 'qwen3', 'llama3_json'):
        p = get_tool_parser(fmt)
        assert p.parse(p.format_calls([ToolCall('f', args)])).calls == [ToolCall('f', args)]
    raw = '<tool_call>{"name": "f", "arguments": {"s": "\\u65e5 \\"x\\""}}</tool_call>'
    assert QwenToolParser().parse(raw).calls[0].arguments == {'s': '日 "x"'}


def test_unclosed_last_block():
    p = QwenToolParser()
    r = p.parse('ok ' + _block('a', {}) + '\n<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n')
    assert [c.name for c in r.calls] == ['a', 'b'] and r.errors == [] and r.content == 'ok'
    r = p.parse(_block('a', {}) + '<tool_call>{"name": "b", "argum')
    assert [c.name for c in r.calls] == ['a'] and len(r.errors) == 1 and 'unclosed' in r.errors[0]


def test_invalid_among_valid_keeps_valid_and_reports():
    bad = ['<tool_call>{"name": "x", "arguments": {"a": }</tool_call>',     # bad JSON
           '<tool_call>{"arguments": {}}</tool_call>',                      # no name
           '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',        # args not an object
           '<tool_call>{"name": "x", "arguments": "{oops"}</tool_call>',    # args string not JSON
           '<tool_call>{"name": "x"}}</tool_call>',                         # trailing text
           '<tool_call>   </tool_call>']                                     # empty
    for b in bad:
        r = QwenToolParser().parse(_block('a', {}) + b + _block('c', {}))
        assert [c.name for c in r.calls] == ['a', 'c'], b
        assert len(r.errors) == 1, (b, r.errors)
        a = r.to_action(raw='raw')
        assert isinstance(a, Action) and not a.is_final
        assert a.parse_errors == r.errors and a.raw == 'raw'


def test_qwen3_reasoning_and_calls_inside_ignored():
    p = Qwen3ToolParser()
    r = p.parse('<think>\nI could ' + _block('evil', {}) + ' but no.\n</think>\n\n' + _block('add'))
    assert [c.name for c in r.calls] == ['add'] and 'evil' in r.reasoning and r.content == ''
    assert p.parse('<think>unclosed ' + _block('x', {})).calls == []
    r = p.parse('implicit open\n</think>\nanswer')
    assert (r.reasoning, r.content) == ('implicit open', 'answer')
    # the plain qwen parser does not know about <think>
    r = QwenToolParser().parse('<think>' + _block('x', {}) + '</think>')
    assert [c.name for c in r.calls] == ['x']


def test_llama3():
    p = Llama3JsonToolParser()
    r = p.parse('{"name": "a", "parameters": {"x": 1}};{"name": "b", "arguments": "{}"}')
    assert [c.name for c in r.calls] == ['a', 'b'] and r.errors == []
    assert p.parse('Sure: {"name": "a"}').calls == []            # must start with JSON
    assert p.parse('<|python_tag|>not json').errors
    r = p.parse('{"name": "a", "parameters": {}}; {"name": }')
    assert [c.name for c in r.calls] == ['a'] and len(r.errors) == 1


def test_registry_and_prompt():
    assert isinstance(get_tool_parser('qwen3'), Qwen3ToolParser)
    with pytest.raises(ValueError, match='unknown tool parser'):
        get_tool_parser('nope')

    class T:  # anything with a .schema, like tools.BaseTool
        schema = {'type': 'function', 'function': {'name': 'add', 'parameters': {'type': 'object'}}}
    assert '"name": "add"' in get_tool_prompt([T()])
    assert '"name": "add"' in get_tool_prompt([T()], 'llama3_json')


# ---- property tests: never raises ------------------------------------------------------------

def _check(r):
    assert isinstance(r, ParseResult)
    assert isinstance(r.content, str) and isinstance(r.errors, list)
    assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) and c.name
               for c in r.calls)
    assert r.reasoning is None or isinstance(r.reasoning, str)
    r.to_action('x')


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=40))
def test_never_raises_fragments(pieces):
    text = ''.join(pieces)
    for n in NAMES:
        _check(get_tool_parser(n).parse(text))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(), st.binary(), st.none(), st.integers(), st.lists(st.integers())))
def test_never_raises_any_value(x):
    for n in NAMES:
        _check(get_tool_parser(n).parse(x))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=10)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(min_size=1, max_size=10).filter(lambda s: s.strip() == s and s.strip()),
       st.dictionaries(st.text(max_size=6), json_values, max_size=4),
       st.sampled_from(['qwen', 'qwen3', 'llama3_json']), st.data())
def test_roundtrip_and_mutations(name, args, fmt, data):
    "Valid calls round-trip; any single mutation of the text still parses without raising."
    p = get_tool_parser(fmt)
    text = p.format_calls([ToolCall(name, args), ToolCall('b', {})])
    r = p.parse(text)
    assert r.calls == [ToolCall(name, args), ToolCall('b', {})] and r.errors == []
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, len(text)))
    ins = data.draw(st.sampled_from(FRAGMENTS + ['']))
    _check(p.parse(text[:i] + ins + text[j:]))


# ---- fuzz: 10,000 random and mutated outputs through parser (+ ToolManager when present) ------

def mutate(rng: random.Random, text: str) -> str:
    "Apply 1-4 random edits: delete, duplicate, insert a fragment, swap two slices, truncate."
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        i, j = sorted((rng.randint(0, n), rng.randint(0, n)))
        op = rng.randrange(5)
        if op == 0: text = text[:i] + text[j:]
        elif op == 1: text = text[:j] + text[i:j] + text[j:]
        elif op == 2: text = text[:i] + rng.choice(FRAGMENTS) + text[i:]
        elif op == 3: text = text[:i] + text[j:] + text[i:j]
        else: text = text[:j]
    return text


def fuzz_outputs(n: int, seed: int = 0) -> list[str]:
    "Half random fragment soup, half mutations of well-formed calculator calls."
    rng, out = random.Random(seed), []
    ops = ['add', 'subtract', 'multiply', 'divide', 'nope']
    for k in range(n):
        if k % 2:
            out.append(''.join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30))))
        else:
            fmt = rng.choice(['qwen', 'qwen3', 'llama3_json'])
            calls = [ToolCall(rng.choice(ops),
                              {'a': rng.randint(-9, 99), 'b': rng.choice([0, 3, 'x', None])})
                     for _ in range(rng.randint(1, 3))]
            text = get_tool_parser(fmt).format_calls(calls, 'Let me compute.')
            if fmt == 'qwen3': text = '<think>\nhmm\n</think>\n\n' + text
            out.append(mutate(rng, text))
    return out


@pytest.mark.timeout(300)
def test_fuzz_10000_parser_and_tools():
    outputs = fuzz_outputs(10_000)
    try:
        from tunix_agentic.tools.base import ToolManager
        from tunix_agentic.tools.builtin import calculator_tools
        manager = ToolManager(calculator_tools(), call_timeout=5.0)
    except Exception:  # tools module not there yet: parsers only
        manager = None
    escaped, n_calls, n_errors, internal = 0, 0, 0, 0

    async def run_all():
        nonlocal escaped, n_calls, n_errors, internal
        for k, text in enumerate(outputs):
            try:
                r = get_tool_parser(NAMES[k % 4]).parse(text)
                n_calls += len(r.calls); n_errors += len(r.errors)
                internal += any('parser failed' in e for e in r.errors)  # the catch-all fired
                if manager is not None and r.calls:
                    async with manager.session() as s:
                        outs = await s.execute(r.calls)
                    assert len(outs) == len(r.calls)
            except Exception:
                escaped += 1
    asyncio.run(run_all())
    print(f'fuzz: {len(outputs)} outputs, {n_calls} calls, {n_errors} parse errors, '
          f'tools={"ToolManager" if manager else "absent"}, parser catch-all used: {internal}, '
          f'exceptions escaped: {escaped}')
    assert escaped == 0 and internal == 0


@pytest.mark.parametrize('fmt', ['qwen', 'qwen3', 'llama3_json'])
def test_tags_inside_json_strings(fmt):
    "Markup inside a string argument is data, not markup (found by hypothesis)."
    p = get_tool_parser(fmt)
    args = {'s': '</tool_call> <tool_call> <think> </think> <|python_tag|> ; }'}
    r = p.parse(p.format_calls([ToolCall('echo', args), ToolCall('b', {})]))
    assert r.calls == [ToolCall('echo', args), ToolCall('b', {})] and r.errors == []


# ---- depth limits and linear streaming (issue 30) ------------------------------------------------

def _at_stack_depth(frames: int, f):
    "Call `f` under `frames` extra Python frames (as a server handler or a test runner would)."
    return f() if frames == 0 else _at_stack_depth(frames - 1, f)


def _deep_call(depth: int, fmt: str = 'qwen') -> str:
    args = '{"x": ' + '[' * depth + ']' * depth + '}'
    body = f'{{"name": "f", "arguments": {args}}}'
    return body if fmt == 'llama3_json' else f'Calling. <tool_call>\n{body}\n</tool_call> done'


@pytest.mark.parametrize('fmt', ['qwen', 'llama3_json'])
@pytest.mark.parametrize('depth', [150, 198, 199, 200, 1000, 1495, 5000])
def test_parse_does_not_depend_on_the_callers_stack(fmt, depth):
    "The same text parses the same at top level and under 150 or 800 frames; the cap is explicit."
    from tunix_agentic.core.trajectory import MAX_JSON_DEPTH
    p, text = get_tool_parser(fmt), _deep_call(depth, fmt)
    results = [_at_stack_depth(n, lambda: p.parse(text)) for n in (0, 150, 800)]
    assert results[0] == results[1] == results[2]
    nested = depth + 2  # the call object and "arguments" around the list
    assert bool(results[0].calls) == (nested <= MAX_JSON_DEPTH)
    if nested > MAX_JSON_DEPTH: assert 'nested deeper than 200' in results[0].errors[0]


@pytest.mark.parametrize('depth', [150, 198, 199, 1495])
def test_stream_of_deep_call_equals_batch_under_any_stack(depth):
    "Streamed token by token under 800 frames, a deep call gives the batch answer; nothing raises."
    from tunix_agentic.engines.streaming import StreamingToolParser
    p, text = get_tool_parser('qwen'), _deep_call(depth)
    def stream():
        sp, content, calls = StreamingToolParser(p), '', []
        for i in range(0, len(text), 3):
            d, cs = sp.feed(text[i:i + 3]); content += d; calls += cs
        d, cs, res = sp.finish()
        return content + d, calls + cs, res.errors
    want = p.parse(text)
    for frames in (0, 800):
        assert _at_stack_depth(frames, stream) == (want.content, want.calls, want.errors)


def test_streaming_scans_each_character_a_bounded_number_of_times(monkeypatch):
    """Linear, not quadratic: feeding a long answer one character at a time scans each character of
    a call's JSON once (the old parser re-parsed the whole prefix per chunk)."""
    from tunix_agentic.chat import parsers
    from tunix_agentic.engines.streaming import StreamingToolParser
    scanned = [0]
    feed = parsers.JsonScanner.feed
    def counting(self, s, i=0): scanned[0] += len(s) - i; return feed(self, s, i)
    monkeypatch.setattr(parsers.JsonScanner, 'feed', counting)
    block = _block('add', {'a': list(range(50))})
    text = ' '.join(f'Step {i}: {block}' for i in range(40))
    sp, content, calls = StreamingToolParser(get_tool_parser('qwen')), '', []
    for ch in text:
        d, cs = sp.feed(ch); content += d; calls += cs
    streamed = scanned[0]
    d, cs, res = sp.finish()
    assert len(calls) == 40 and (content + d, calls + cs) == (res.content, res.calls)
    assert streamed <= 3 * len(text), (streamed, len(text))  # twice per block: scan, then decode


def test_text_deltas_decode_a_bounded_window():
    "`text_deltas` decodes O(1) ids per token, not the growing prefix, and adds up to the decode."
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    from tunix_agentic.engines.streaming import text_deltas
    tok = build_tiny_tokenizer()
    ids = tok.encode('12 × 34 = 408 ✓ ' * 200, add_special_tokens=False)
    decoded = [0]
    class Counting:
        def decode(self, xs, **kw): decoded[0] += len(xs); return tok.decode(xs, **kw)
    assert ''.join(text_deltas(Counting(), ids)) == tok.decode(ids, skip_special_tokens=False)
    assert decoded[0] <= 10 * len(ids), (decoded[0], len(ids))


def test_llama3_json_call_with_bad_arguments_is_an_error():
    "An object with a name is a call: list arguments are an error fed back, not a final answer."
    r = get_tool_parser('llama3_json').parse('{"name": "add", "parameters": [1, 2]}')
    assert r.calls == [] and r.content == ''
    assert r.errors == ['llama3 tool call: "arguments" of \'add\' must be a JSON object, got list']
    assert r.to_action().parse_errors == r.errors
    assert get_tool_parser('llama3_json').parse('{"answer": 7}') == ParseResult([], '{"answer": 7}')
