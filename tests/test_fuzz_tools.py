"""Fuzz: nothing a model writes can make the tool layer raise.

* `test_fuzz_toolsession_hypothesis`: hypothesis-generated ToolCalls (random names and types, argument
  dicts of random JSON and non-JSON types, huge strings, deep nesting) through ToolSession.execute.
* `test_fuzz_10k_tool_calls`: 10,000 seeded random ToolCalls (exact count) through ToolSession.execute.
* `test_fuzz_10k_parser_to_toolmanager`: 10,000 seeded random and mutated model outputs through
  get_tool_parser(...).parse -> ToolSession.execute, over all four parser formats.

Every output must be a ToolOutput with a string name, a call id, a string text within the output
budget and a JSON-serialisable chat message; every instance must be released. Exceptions are counted,
not just caught: the tests assert that 0 escaped and print the figures (run with -s to see them).
"""
import asyncio, json, random, string, zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.tools.ratelimit import RateLimiter, ToolRateLimiter
from tunix_agentic.tools.code_interpreter import CodeInterpreterTool
from tunix_agentic.tools.sandbox import SandboxResult
from tunix_agentic.tools.base import ToolError, ToolManager
from tunix_agentic.tools.builtin import Gsm8kTool, calculator_tools
from tunix_agentic.core.trajectory import ToolCall, ToolOutput

BUDGET = 512


class FakeBackend:
    "A sandbox backend that returns canned results without starting processes (fuzz speed)."
    def make_workdir(self): return None
    async def run(self, code, *, workdir=None, timeout=None):
        h = zlib.crc32(str(code).encode('utf-8', 'replace')) % 5
        st_ = ['ok', 'error', 'timeout', 'killed', 'sandbox_error'][h]
        return SandboxResult(st_, stdout=str(code)[:3000], stderr='E' * (h * 100), return_code=h,
                             message='m')


def echo(text: str, items: list[int] | None = None, opts: dict[str, float] | None = None,
         flag: bool = False) -> dict:
    """Echo the arguments back.

    Args:
        text: Any text.
        items: Some integers.
        opts: Named numbers.
        flag: A flag.
    """
    return {'text': text, 'items': items, 'opts': opts, 'flag': flag}


def explode(kind: str) -> str:
    """Fail in a way chosen by the caller.

    Args:
        kind: What to raise.
    """
    if kind == 'tool': raise ToolError('asked to fail')
    if kind == 'recursion': return explode(kind)
    if kind == 'unprintable': return object()
    raise {'key': KeyError, 'value': ValueError}.get(kind, RuntimeError)(kind)


async def sleepy(ms: int) -> str:
    """Sleep for a few milliseconds.

    Args:
        ms: Milliseconds (capped at 20).
    """
    await asyncio.sleep(min(max(ms, 0), 20) / 1000)
    return f'slept {ms}'


def make_manager():
    tools = calculator_tools() + [Gsm8kTool(), CodeInterpreterTool(FakeBackend()), echo, explode, sleepy]
    lim = ToolRateLimiter(RateLimiter(max_concurrency=64), {'sleepy': RateLimiter(rate=1e6, burst=50)})
    return ToolManager(tools, call_timeout=0.01, max_output_chars=BUDGET, rate_limiter=lim)


ROW = {'calc_gsm8k_reward': {'create_kwargs': {'ground_truth': '42'}}}


def check_outputs(outs, calls, mgr):
    assert isinstance(outs, list) and len(outs) == len(calls)
    for o in outs:
        assert isinstance(o, ToolOutput) and isinstance(o.name, str)
        assert isinstance(o.call_id, str) and o.call_id
        assert o.error is None or isinstance(o.error, str)
        text = o.to_text()
        assert isinstance(text, str) and len(text) <= BUDGET + len('Error: ')
        json.dumps(o.to_message())


def check_released(mgr):
    assert all(t.instances == {} for t in mgr.tools.values())


async def run_session(mgr, calls, stats):
    "One episode; returns the exception that escaped, if any."
    try:
        async with mgr.session(ROW) as s:
            outs = await s.execute(calls)
            await s.calc_rewards()
        check_outputs(outs, calls, mgr)
        stats['calls'] += len(outs); stats['ok'] += sum(o.ok for o in outs)
        stats['errors'] += sum(not o.ok for o in outs)
        return None
    except AssertionError: raise
    except BaseException as e:  # noqa: BLE001 - we count what escapes
        return e


# ---- random values -------------------------------------------------------------------------------
NAMES = ['add', 'subtract', 'multiply', 'divide', 'calc_gsm8k_reward', 'code_interpreter', 'echo',
         'explode', 'sleepy']


def rand_str(r: random.Random, n: int | None = None) -> str:
    n = r.choice([0, 1, 5, 20, 100]) if n is None else n
    pool = string.printable + 'äß中文😀\u0000\ud800\u200b<>{}[]"\\'
    return ''.join(r.choice(pool) for _ in range(n))


def rand_value(r: random.Random, depth: int = 0):
    k = r.randrange(14 if depth < 3 else 9)
    if k == 0: return None
    if k == 1: return r.choice([True, False])
    if k == 2: return r.randint(-10**6, 10**6)
    if k == 3: return r.choice([0.5, -1e308, float('nan'), float('inf'), 3.0, 1e-320])
    if k == 4: return rand_str(r)
    if k == 5: return r.choice([10**5000, -(10**30), 2**63])
    if k == 6: return 'x' * r.choice([10_000, 200_000])
    if k == 7: return r.choice([b'bytes', object(), (1, 2), {1, 2}, Exception('e')])
    if k == 8:  # deep nesting
        v = 0
        for _ in range(r.choice([50, 2000])): v = [v]
        return v
    if k in (9, 10): return [rand_value(r, depth + 1) for _ in range(r.randrange(4))]
    return {rand_str(r, r.randrange(6)): rand_value(r, depth + 1) for _ in range(r.randrange(4))}


def valid_args(r: random.Random, name: str) -> dict:
    if name in ('add', 'subtract', 'multiply', 'divide'):
        return {'a': r.randint(-10**20, 10**20), 'b': r.choice([0, 1, r.randint(-10**20, 10**20)])}
    if name == 'calc_gsm8k_reward': return {'answer': r.choice(['42', '#### 42', '41', rand_str(r)])}
    if name == 'code_interpreter': return {'code': rand_str(r, r.randrange(200))}
    if name == 'echo': return {'text': rand_str(r), 'items': [r.randint(0, 9)], 'opts': {'a': 1.5}}
    if name == 'explode': return {'kind': r.choice(['tool', 'recursion', 'unprintable', 'key', 'x'])}
    return {'ms': r.randint(-5, 40)}


def rand_call(r: random.Random):
    k = r.random()
    name = r.choice(NAMES)
    if k < 0.05: return r.choice([None, 'junk', 42, {'function': {'name': name, 'arguments': '{}'}}])
    if r.random() < 0.2:
        name = r.choice([rand_str(r), '', None, 7, ['add'], {'n': 1}, name.upper(), name + ' ', 'x' * 10_000])
    if r.random() < 0.45: args = valid_args(r, name if name in NAMES else 'add')
    elif r.random() < 0.5:
        args = valid_args(r, name if name in NAMES else 'add')
        args[r.choice(list(args) + ['extra'])] = rand_value(r)
    else:
        args = r.choice([rand_value(r), json.dumps({'a': 1, 'b': 2}), '{"a": ', None, [],
                         {rand_str(r): rand_value(r)}])
    cid = r.choice([None, None, 'c1', '', 5, rand_str(r)])
    return ToolCall(name, args, cid)


# ---- tests ---------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_fuzz_10k_tool_calls():
    r, mgr = random.Random(0), make_manager()
    stats, escaped, n = {'calls': 0, 'ok': 0, 'errors': 0}, [], 10_000

    async def main():
        calls = [rand_call(r) for _ in range(n)]
        batches, i = [], 0
        while i < n:
            k = r.randint(1, 8); batches.append(calls[i:i + k]); i += k
        for j in range(0, len(batches), 64):
            res = await asyncio.gather(*(run_session(mgr, b, stats) for b in batches[j:j + 64]))
            escaped.extend(e for e in res if e is not None)
    asyncio.run(main())
    check_released(mgr)
    print(f'\nFUZZ tool calls: {n} calls, {stats["ok"]} ok, {stats["errors"]} error messages, '
          f'{len(escaped)} exceptions escaped')
    assert stats['calls'] == n
    assert escaped == []
    assert stats['ok'] > 1000 and stats['errors'] > 1000  # both paths were exercised


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20)
weird = st.one_of(json_values, st.binary(max_size=20), st.tuples(st.integers()),
                  st.integers(50_000, 300_000).map(lambda n: 'ab' * n),
                  st.integers(min_value=10**4400, max_value=10**4400 + 5))
names = st.one_of(st.sampled_from(NAMES), st.text(max_size=30), st.none(), st.integers(),
                  st.lists(st.text(max_size=3), max_size=2))
arguments = st.one_of(st.dictionaries(st.sampled_from(['a', 'b', 'code', 'answer', 'text', 'items', 'opts',
                                                       'flag', 'kind', 'ms']) | st.text(max_size=5),
                                      weird, max_size=5),
                      weird)
calls_st = st.lists(st.builds(ToolCall, names, arguments, st.one_of(st.none(), st.text(max_size=5))),
                    max_size=8)


@pytest.mark.timeout(300)
@given(calls_st)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_toolsession_hypothesis(calls):
    mgr = make_manager()
    stats = {'calls': 0, 'ok': 0, 'errors': 0}
    err = asyncio.run(run_session(mgr, calls, stats))
    assert err is None, f'{type(err).__name__}: {err}'
    check_released(mgr)


# ---- parser -> ToolManager ----------------------------------------------------------------------
def well_formed(r: random.Random, fmt: str) -> str:
    calls = []
    for _ in range(r.choice([0, 1, 1, 2, 3])):
        name = r.choice(NAMES)
        calls.append({'name': name, ('parameters' if fmt == 'llama3_json' and r.random() < 0.7 else 'arguments'):
                      valid_args(r, name) if r.random() < 0.8 else
                      json.dumps(valid_args(r, name)) if r.random() < 0.5 else rand_value(r)})
    def dumps(c):
        try: return json.dumps(c, ensure_ascii=r.random() < 0.5, default=str)
        except (ValueError, RecursionError): return '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    pre, post = rand_str(r), rand_str(r)
    if fmt == 'llama3_json':
        if not calls: return pre
        return dumps(calls[0]) if len(calls) == 1 else '; '.join(dumps(c) for c in calls)
    body = ''.join(f'<tool_call>\n{dumps(c)}\n</tool_call>\n' for c in calls)
    think = f'<think>{rand_str(r)}<tool_call>{dumps(calls[0]) if calls else ""}</tool_call></think>' \
        if fmt == 'qwen3' and r.random() < 0.5 else ''
    return f'{think}{pre}\n{body}{post}'


def mutate(r: random.Random, text: str) -> str:
    ops = r.randrange(6)
    t = text
    for _ in range(r.choice([0, 1, 2, 5, 20]) if ops else 0):
        i = r.randrange(len(t) + 1)
        k = r.randrange(5)
        if k == 0: t = t[:i] + t[i + 1:]
        elif k == 1: t = t[:i] + r.choice('{}[]":,\\<>/ \n') + t[i:]
        elif k == 2: t = t[:i] + r.choice(['<tool_call>', '</tool_call>', '<think>', '</think>',
                                           '<|im_end|>', '<|python_tag|>', '{"name": ', 'null']) + t[i:]
        elif k == 3: t = t[:i]
        else: t = t[:i] + rand_str(r, 3) + t[i:]
    if ops == 1: t = t + t
    if ops == 2: t = t.replace('"a": ', '"a": 1e999, "a2": ', 1).replace('"b": ', '"b": "9"', 1)
    if ops == 3: t = '[' * r.choice([100, 5000]) + t
    if ops == 4: t = t[:r.randrange(len(t) + 1)]
    return t


def model_output(r: random.Random, fmt: str):
    k = r.random()
    if k < 0.05: return r.choice([None, 42, b'<tool_call>{}</tool_call>', '', ' ' * 1000])
    if k < 0.15: return rand_str(r, r.randrange(500))
    if k < 0.17: return '<tool_call>' + 'x' * 200_000 + '</tool_call>'
    return mutate(r, well_formed(r, fmt))


@pytest.mark.timeout(300)
def test_fuzz_10k_parser_to_toolmanager():
    parsers = pytest.importorskip('tunix_agentic.chat.parsers')
    if not hasattr(parsers, 'get_tool_parser'):
        pytest.skip('tunix_agentic.chat.parsers has no get_tool_parser (contract in dev/INTERFACES.md) yet')
    fmts = ['qwen', 'hermes', 'qwen3', 'llama3_json']
    ps = {f: parsers.get_tool_parser(f) for f in fmts}
    r, mgr, n = random.Random(1), make_manager(), 10_000
    stats = {'calls': 0, 'ok': 0, 'errors': 0}
    escaped, parse_errors, with_calls = [], 0, 0

    async def one(text, fmt):
        nonlocal parse_errors, with_calls
        try:
            res = ps[fmt].parse(text)
            action = res.to_action(text if isinstance(text, str) else '')
            parse_errors += bool(res.errors); with_calls += bool(res.calls)
            assert isinstance(action.tool_calls, list)
        except AssertionError: raise
        except BaseException as e:  # noqa: BLE001
            return e
        return await run_session(mgr, res.calls, stats)

    async def main():
        cases = []
        for _ in range(n):
            fmt = r.choice(fmts)
            cases.append((model_output(r, fmt), fmt))
        for j in range(0, n, 64):
            res = await asyncio.gather(*(one(t, f) for t, f in cases[j:j + 64]))
            escaped.extend(e for e in res if e is not None)
    asyncio.run(main())
    check_released(mgr)
    print(f'\nFUZZ parser->ToolManager: {n} model outputs, {with_calls} with calls, {parse_errors} with '
          f'parse errors, {stats["calls"]} calls executed ({stats["ok"]} ok, {stats["errors"]} error '
          f'messages), {len(escaped)} exceptions escaped')
    assert escaped == [], [f'{type(e).__name__}: {e}' for e in escaped[:5]]
    assert with_calls > 2000 and stats['ok'] > 500  # the valid path was exercised
