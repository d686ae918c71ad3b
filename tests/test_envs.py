"""Environments, agents and rewards: async paths, routing, release of tool instances, never-raise."""
import asyncio, random

import pytest

from tunix_agentic.envs.agents import ToolAgent, observation_to_messages
from tunix_agentic.envs.environments import BaseEnv, EnvGroup, EnvSpec, SingleTurnEnv, ToolEnvironment, TOOLSETS
from tunix_agentic.envs.rewards import (extract_gsm8k_answer, get_reward_fn, gsm8k_reward, mc_returns,
                                   normalize_number, weighted_reward)
from tunix_agentic.tools.base import BaseTool, ToolManager
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import Action, ToolCall, ToolOutput


class CountingTool(BaseTool):
    "A stateful tool that records its live instances (to prove every episode releases them)."
    live: set = set()
    def __init__(self):
        super().__init__(name='count', description='Count calls.',
                         parameters={'type': 'object', 'properties': {}, 'required': []})
    async def create(self, instance_id=None, **kw):
        iid = await super().create(instance_id, **kw)
        CountingTool.live.add(iid)
        return iid
    async def execute(self, instance_id, parameters, **kw): return 'counted', 0.25, {}
    async def release(self, instance_id, **kw):
        CountingTool.live.discard(instance_id)
        await super().release(instance_id, **kw)


def arithmetic(rng: random.Random) -> dict:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return {'question': f'What is {a}*{b}?', 'answer': str(a * b)}


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_tool_env_multi_turn_calculator_and_release():
    CountingTool.live.clear()
    env = ToolEnvironment({'question': 'What is 12*34+17?', 'answer': '#### 425'},
                          calculator_tools() + [CountingTool()], 'gsm8k', max_turns=5)
    start = await env.reset(seed=3)
    assert start.observation == {'question': 'What is 12*34+17?'} and start.seed == 3
    assert [t['function']['name'] for t in start.tools] == ['add', 'subtract', 'multiply', 'divide', 'count']
    res = await env.step(Action(tool_calls=[ToolCall('multiply', {'a': 12, 'b': 34}),
                                            ToolCall('count', {})]))
    assert [o.to_text() for o in res.observation['tool_outputs']] == ['408', 'counted']
    assert (res.reward, res.done, res.tool_calls, res.tool_errors) == (0.25, False, 2, 0)
    assert len(CountingTool.live) <= 1
    res = await env.step(Action(content='#### 425'))
    assert (res.reward, res.done, res.status) == (1.0, True, 'done')
    await env.close(); await env.close()  # idempotent
    assert CountingTool.live == set()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_step_never_raises():
    env = ToolEnvironment({'question': 'q', 'answer': '1'}, calculator_tools(), 'gsm8k', max_turns=3)
    await env.reset(seed=0)
    res = await env.step(Action(tool_calls=[ToolCall('divide', {'a': 1, 'b': 0})]))
    assert not res.done and res.tool_errors == 1 and res.observation['tool_outputs'][0].error
    res = await env.step(Action(tool_calls=[ToolCall('nope', {'x': 1})]))
    assert not res.done and res.tool_errors == 1
    class Exploding:
        schemas = []
        def session(self, tools_kwargs=None): raise RuntimeError('no sessions today')
    bad = ToolEnvironment({'question': 'q'}, Exploding(), 'gsm8k')
    with pytest.raises(RuntimeError):  # reset may raise; the collector turns that into status=error
        await bad.reset()
    def crash(task, action): raise ValueError('reward bug')
    env2 = SingleTurnEnv({'question': 'q', 'answer': 'a'}, crash)
    await env2.reset()
    res = await env2.step('a')
    assert (res.reward, res.done, res.status) == (0.0, True, 'error') and 'reward bug' in res.error
    res = await env2.step('again')  # after the end: still no exception
    assert res.status == 'error'


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_seeded_reset_same_episode_for_a_group():
    async def question(seed):
        env = ToolEnvironment(arithmetic, calculator_tools(), 'gsm8k')
        obs = (await env.reset(seed=seed)).observation
        await env.close()
        return obs['question'], env.task['answer']
    group = await asyncio.gather(*[question(11) for _ in range(4)])
    assert len(set(group)) == 1
    assert await question(12) != group[0]


def test_env_group_routing_and_errors():
    g = EnvGroup({'calc': EnvSpec(env='tool', tools='calculator', reward_fn='gsm8k', max_turns=6),
                  'qa': EnvSpec(env='single_turn', reward_fn='exact_match', max_turns=1)})
    e = g.make({'task_type': 'calc', 'question': 'q', 'answer': '1'})
    assert isinstance(e, ToolEnvironment) and e.max_turns == 6 and e.name == 'calc'
    assert isinstance(g.make({'task_type': 'qa', 'question': 'q', 'answer': 'a'}), SingleTurnEnv)
    with pytest.raises(KeyError, match=r"unknown task_type 'web'; known task types: \['calc', 'qa'\]"):
        g.make({'task_type': 'web'})
    with pytest.raises(KeyError, match='known task types'):
        g.make({'question': 'no type, no default'})
    single = EnvGroup({'calc': {'tools': 'calculator'}})
    assert single.make({'question': 'q'}).name == 'calc'  # one type: rows need no task_type
    with pytest.raises(KeyError, match='known toolsets'):
        EnvGroup({'x': {'tools': 'nope'}}).make({'question': 'q'})
    env = BaseEnv.from_dict({'env': 'tool', 'tools': 'calculator', 'reward_fn': {'gsm8k': 1, 'format': 0.1},
                             'max_turns': 2, 'task': {'question': 'q', 'answer': '2'}})
    assert env.max_turns == 2 and len(env.tool_schemas) == 4 and 'calculator' in TOOLSETS


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_tools_kwargs_reach_stateful_tools():
    from tunix_agentic.tools.builtin import Gsm8kTool
    env = ToolEnvironment({'question': 'q', 'answer': '#### 7',
                           'tools_kwargs': {'calc_gsm8k_reward': {'create_kwargs': {'ground_truth': '7'}}}},
                          [Gsm8kTool()], reward_fn=None, max_turns=3)
    await env.reset(seed=0)
    name = env.tool_schemas[0]['function']['name']
    await env.step(Action(tool_calls=[ToolCall(name, {'answer': '7'})]))
    res = await env.step(Action(content='7'))
    await env.close()
    assert res.done and res.info['tools'] and res.reward == sum(res.info['tools'].values())


def test_agent_parses_and_observes():
    agent = ToolAgent('sys', 'qwen', tools=[{'type': 'function', 'function': {'name': 'add'}}])
    first = agent.prompt({'question': '1+2?'})
    a = agent.parse('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    assert [c.name for c in a.tool_calls] == ['add'] and not a.is_final
    tool = agent.observe({'tool_outputs': [ToolOutput('add', output='3', call_id='c0')]})
    bad = agent.parse('<tool_call>\n{"name": "add", "arguments": \n</tool_call>')
    assert bad.parse_errors and not bad.is_final
    fin = agent.parse('3')
    assert fin.is_final
    assert [m['role'] for m in first + tool] == ['system', 'user', 'tool']
    agent.reset(tools=[])
    assert agent.tools == []
    assert observation_to_messages('hi') == [{'role': 'user', 'content': 'hi'}]
    with pytest.raises(TypeError): observation_to_messages(3)


@pytest.mark.parametrize('text,want', [('#### 1,234', '1234'), ('$5.00', '5'), ('x = 3.0.', '3'),
                                       ('#### -7', '-7'), ('0.25 or 0.5', '0.5'), ('no', None)])
def test_gsm8k_extraction(text, want):
    assert extract_gsm8k_answer(text) == want


def test_rewards_compose_and_returns():
    task = {'answer': 'Janet pays 3*6 = 18 dollars. #### 18'}
    assert gsm8k_reward(task, 'She pays $18.').reward == 1.0
    assert normalize_number('1,000,000.0') == '1000000'
    w = weighted_reward({'gsm8k': 0.9, 'format': 0.1})
    out = w(task, Action(content='#### 18'))
    assert out.reward == pytest.approx(1.0) and out.metadata == {'gsm8k': 1.0, 'format': 1.0}
    assert get_reward_fn(w) is w
    assert mc_returns([0.25, 0.0, 1.0], gamma=0.5) == pytest.approx([0.25 + 0.25, 0.5, 1.0])
    with pytest.raises(ValueError, match='gamma'): mc_returns([1.0], gamma=1.5)
