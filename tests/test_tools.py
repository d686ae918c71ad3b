"""Tools: schemas, the stateful lifecycle with tools_kwargs, ToolManager/ToolSession behaviour
(concurrency, order, ids, timeouts, validation, truncation, release on error/timeout/cancel), the
calculator's exactness and the GSM8K tool."""
import asyncio, json, threading, time
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from tunix_agentic.tools.ratelimit import RateLimiter, ToolRateLimiter
from tunix_agentic.tools.builtin import Gsm8kTool, calculator_tools, exact_str
from tunix_agentic.tools.base import (BaseTool, FunctionTool, ToolError, ToolManager, truncate_middle,
                                 validate_arguments)
from tunix_agentic.core.trajectory import ToolCall, ToolOutput


class Recorder(BaseTool):
    "A stateful tool that records every lifecycle call and its kwargs."
    name, description, blocking = 'rec', 'records calls', False
    parameters = {'type': 'object', 'properties': {'x': {'type': 'integer'}, 'city': {'type': 'string'}}}
    def __init__(self, fail_release=False):
        super().__init__(); self.log, self.fail_release = [], fail_release
    async def create(self, instance_id=None, **kw):
        iid = await super().create(instance_id, **kw); self.log.append(('create', kw)); return iid
    async def execute(self, instance_id, parameters, **kw):
        self.log.append(('execute', parameters, kw))
        if parameters.get('x') == -1: raise RuntimeError('negative x')
        if parameters.get('x') == -2: await asyncio.sleep(60)
        self.instances[instance_id]['reward'] += 0.5
        return f'x={parameters.get("x")} city={kw.get("city", parameters.get("city"))}', 0.1, {'m': 1}
    async def calc_reward(self, instance_id, **kw):
        self.log.append(('calc_reward', kw)); return self.instances[instance_id]['reward']
    async def release(self, instance_id, **kw):
        self.log.append(('release', kw)); await super().release(instance_id)
        if self.fail_release: raise OSError('release failed')


def test_schema_matches_chat_template_form():
    def lookup(city: str, days: int = 1) -> str:
        """Look up a forecast.

        Args:
            city: City name.
            days: Number of days.
        """
        return city
    t = FunctionTool.from_function(lookup)
    from transformers.utils import get_json_schema
    ref = get_json_schema(lookup)
    assert t.schema['function']['parameters'] == ref['function']['parameters']
    assert t.schema['function']['name'] == 'lookup' and t.schema['function']['description'] == 'Look up a forecast.'
    assert ToolManager([lookup]).schemas == [t.schema]


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_lifecycle_with_tools_kwargs():
    rec = Recorder()
    kw = {'rec': {'create_kwargs': {'seed': 3}, 'execute_kwargs': {'city': 'Beijing'},
                  'calc_reward_kwargs': {'final': True}, 'release_kwargs': {'why': 'done'}}}
    async with ToolManager([rec]).session(kw) as s:
        outs = await s.execute([ToolCall('rec', {'x': 1, 'city': 'Paris'}), ToolCall('rec', {'x': 2})])
        rewards = await s.calc_rewards()
    assert [o.output for o in outs] == ['x=1 city=Beijing', 'x=2 city=Beijing']  # dataset wins
    assert [o.reward for o in outs] == [0.1, 0.1] and outs[0].metadata['m'] == 1
    assert rewards == {'rec': 1.0}
    kinds = [e[0] for e in rec.log]
    assert kinds == ['create', 'execute', 'execute', 'calc_reward', 'release']
    assert rec.log[0][1] == {'seed': 3} and rec.log[3][1] == {'final': True} and rec.log[4][1] == {'why': 'done'}
    assert rec.instances == {}


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_release_on_error_timeout_and_cancel():
    rec = Recorder(fail_release=True)
    mgr = ToolManager([rec], call_timeout=0.05)
    # an exception inside the episode
    with pytest.raises(ValueError):
        async with mgr.session() as s:
            await s.execute([ToolCall('rec', {'x': 1})]); raise ValueError('episode bug')
    assert rec.instances == {}
    # a tool timeout
    async with mgr.session() as s:
        (o,) = await s.execute([ToolCall('rec', {'x': -2})])
    assert o.error == 'rec timed out after 0.05 s' and rec.instances == {}
    # the episode cancelled while a call runs
    slow = ToolManager([rec], call_timeout=None)
    started = asyncio.Event()
    async def episode():
        async with slow.session() as s:
            started.set(); await s.execute([ToolCall('rec', {'x': -2})])
    t = asyncio.create_task(episode())
    await started.wait(); await asyncio.sleep(0.01)
    t.cancel()
    with pytest.raises(asyncio.CancelledError): await t
    assert rec.instances == {}
    assert [e[0] for e in rec.log].count('release') == 3  # failing release() logged, not raised


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_calls_run_concurrently_in_order_with_ids():
    "N calls that each wait until all N have started: only possible if they run concurrently."
    n, started, gate = 16, [], asyncio.Event()
    async def wait_for_all(i: int) -> str:
        """Wait until every call has started.

        Args:
            i: Call index.
        """
        started.append(i)
        if len(started) == n: gate.set()
        await asyncio.wait_for(gate.wait(), 5)
        await asyncio.sleep(0.001 * (n - i))  # finish in reverse order
        return f'done {i}'
    mgr = ToolManager([wait_for_all])
    calls = [ToolCall('wait_for_all', {'i': i}, id=(f'id{i}' if i % 2 else None)) for i in range(n)]
    outs = await mgr.session().execute(calls)
    assert [o.output for o in outs] == [f'done {i}' for i in range(n)]
    assert [o.call_id for o in outs] == [f'id{i}' if i % 2 else f'call_{i}' for i in range(n)]


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_blocking_sync_tool_does_not_block_loop():
    ev = threading.Event()
    def block(seconds: float) -> str:
        """Block a thread.

        Args:
            seconds: Max seconds.
        """
        ev.wait(seconds); return 'unblocked'
    mgr = ToolManager([block])
    task = asyncio.create_task(mgr.session().execute([ToolCall('block', {'seconds': 10})]))
    await asyncio.sleep(0.05)  # the loop runs while the tool blocks its worker thread
    ev.set()
    (o,) = await task
    assert o.output == 'unblocked'


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_every_failure_is_a_message():
    def boom(x: int) -> int:
        """Raise.

        Args:
            x: anything
        """
        raise KeyError('kaboom')
    def tool_error(x: int) -> int:
        """Raise a ToolError.

        Args:
            x: anything
        """
        raise ToolError('x must be prime')
    mgr = ToolManager(calculator_tools() + [boom, tool_error])
    outs = await mgr.session().execute([
        ToolCall('nope', {}), ToolCall('add', {'a': 1}), ToolCall('add', {'a': 1, 'b': 2, 'c': 3}),
        ToolCall('boom', {'x': 1}), ToolCall('tool_error', {'x': 4}), ToolCall('divide', {'a': 5, 'b': 0}),
        ToolCall('add', '[1, 2]'), ToolCall('add', 'not json'), ToolCall(7, {})])
    errs = [o.error for o in outs]
    assert errs[0] == 'unknown tool \'nope\'; available tools: add, subtract, multiply, divide, boom, tool_error'
    assert errs[1] == "invalid arguments for add: arguments: 'b' is required"
    assert errs[2] == "invalid arguments for add: unexpected argument 'c'; expected: a, b"
    assert errs[3] == "KeyError: 'kaboom'"  # FunctionTool.forward catches; execute re-raises as ToolError
    assert errs[4] == 'x must be prime'
    assert errs[5] == 'division by zero: cannot divide 5 by 0'
    assert errs[6] == 'arguments of add must be a JSON object, got [1, 2]'
    assert errs[7] == "arguments of add are not valid JSON: 'not json'"
    assert errs[8].startswith('unknown tool 7;') and outs[8].name == '7'
    assert all(isinstance(o.to_message()['content'], str) for o in outs)


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_output_truncation_budget():
    def spam(n: int) -> str:
        """Return n characters.

        Args:
            n: How many.
        """
        return 'H' * (n // 2) + 'T' * (n - n // 2)
    mgr = ToolManager([spam], max_output_chars=200)
    (o,) = await mgr.session().execute([ToolCall('spam', {'n': 1_000_000})])
    assert len(o.output) <= 200 and o.output.startswith('HHH') and o.output.endswith('TTT')
    assert 'characters cut' in o.output


@given(st.text(max_size=500), st.integers(min_value=0, max_value=300))
@settings(max_examples=300, deadline=None)
def test_truncate_middle_properties(text, k):
    out = truncate_middle(text, k)
    assert len(out) <= max(k, 0) or out == text
    if len(text) <= k: assert out == text
    elif k >= 60:
        kept = out.split('\n[... ')[0]
        assert text.startswith(kept) and 'characters cut' in out


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_rate_limiter_integration():
    peak, cur = 0, 0
    async def work(i: int) -> int:
        """Work.

        Args:
            i: index
        """
        nonlocal peak, cur
        cur += 1; peak = max(peak, cur); await asyncio.sleep(0.002); cur -= 1
        return i
    lim = ToolRateLimiter(RateLimiter(max_concurrency=3), {'work': RateLimiter(max_concurrency=2)})
    mgr = ToolManager([work], rate_limiter=lim)
    outs = await mgr.session().execute([ToolCall('work', {'i': i}) for i in range(20)])
    assert [o.output for o in outs] == [str(i) for i in range(20)]
    assert peak == 2 and lim.in_flight == {'work': 0, 'global': 0}


ints = st.integers(min_value=-10**40, max_value=10**40)

@given(ints, ints)
@settings(max_examples=300, deadline=None)
def test_calculator_exact(a, b):
    t = {x.name: x for x in calculator_tools()}
    assert int(t['add'].forward(a=a, b=b).output) == a + b
    assert int(t['subtract'].forward(a=a, b=b).output) == a - b
    assert int(t['multiply'].forward(a=a, b=b).output) == a * b
    d = t['divide'].forward(a=a, b=b)
    if b == 0: assert d.error.startswith('division by zero')
    else: assert Fraction(d.output) == Fraction(a, b)


def test_exact_str_choice():
    assert exact_str(Fraction(1, 3)) == '1/3' and exact_str(Fraction(-5, 4)) == '-1.25'
    assert exact_str(Fraction(3, 1)) == '3' and exact_str(Fraction(-1, 20)) == '-0.05'


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_gsm8k_tool_through_session():
    mgr = ToolManager([Gsm8kTool()])
    async with mgr.session({'calc_gsm8k_reward': {'create_kwargs': {'ground_truth': '18'}}}) as s:
        o = await s.execute([ToolCall('calc_gsm8k_reward', {'answer': '17'})])
        o += await s.execute([ToolCall('calc_gsm8k_reward', {'answer': 'The answer is #### 18'})])
        r = await s.calc_rewards()
    assert [x.reward for x in o] == [-0.05, 0.0] and r == {'calc_gsm8k_reward': 1.0}
    # without a ground truth the tool is unavailable, not a crash
    async with mgr.session() as s:
        (o,) = await s.execute([ToolCall('calc_gsm8k_reward', {'answer': '1'})])
        assert o.error.startswith('tool calc_gsm8k_reward is unavailable') and await s.calc_rewards() == {}


def test_validator_json_schema_subset():
    s = {'type': 'object', 'properties': {'n': {'type': ['integer', 'null']},
                                          'o': {'anyOf': [{'type': 'string'}, {'type': 'array'}]}}}
    assert validate_arguments({'n': None, 'o': []}, s) == []
    assert validate_arguments({'n': 1.5}, s) == ["'n' must be of type integer or null, got float 1.5"]
    assert validate_arguments({'o': 3}, s) == ["arguments.o matches none of the allowed forms, got 3"] or \
        validate_arguments({'o': 3}, s)[0].endswith('got 3')
