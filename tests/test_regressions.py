"""Regression tests for the defects issue 10's independent checks found, one test each where no
other test file pins it: the GSM8K checker the tool and the reward share, tool-argument
validation by jsonschema, unique call ids, parser errors a model reads without an invisible
character, the metrics figure's picture form without seed curves, a stepper turn typed wrong,
and the packaging files."""
import asyncio, configparser, re
from pathlib import Path

import pytest

from tunix_agentic.tools.builtin import Gsm8kTool, calculator_tools
from tunix_agentic.chat.parsers import get_tool_parser as get_parser
from tunix_agentic.envs.rewards import gsm8k_reward
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.base import FunctionTool, ToolManager, validate_arguments
from tunix_agentic.core.trajectory import Action, ToolCall

from conftest import CALC_TASK, calc_group

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('answer,truth,right', [
    ('#### 1/2', '0.5', True), ('#### 0.50', '1/2', True), ('#### 1,000', '1000', True),
    ('#### $18', '18', True), ('The answer is 18', '#### 18', True), ('#### 17', '18', False),
    ('no number', '18', False)])
def test_gsm8k_tool_and_reward_agree(answer, truth, right):
    "Regression: `#### 1/2` against the truth `0.5` was right for the tool and 0.0 for the reward."
    tool = Gsm8kTool().forward(answer=answer, ground_truth=truth).reward
    reward = gsm8k_reward({'answer': truth}, Action(content=answer)).reward
    assert tool == reward == float(right)


@pytest.mark.parametrize('prop,bad,msg', [
    ({'type': 'integer', 'minimum': 0}, -1, "'x' must be >= 0, got -1"),
    ({'type': 'string', 'maxLength': 3}, 'abcd', "'x' must have at most 3 characters, got 'abcd'"),
    ({'type': 'string', 'pattern': '^[a-z]+$'}, 'A1',
     "'x' must match the pattern '^[a-z]+$', got 'A1'"),
    ({'const': 'yes'}, 'no', "'x' must be 'yes', got 'no'"),
    ({'type': 'array', 'minItems': 2}, [1], "'x' must have at least 2 items, got [1]"),
    ({'$ref': '#/$defs/pos'}, -5, "'x' must be >= 1, got -5")])
def test_argument_validation_holds_every_keyword(prop, bad, msg):
    "Regression: values breaking minimum, maxLength, pattern, const, minItems or a `$ref` passed."
    schema = {'type': 'object', 'properties': {'x': prop}, '$defs': {'pos': {'type': 'integer',
                                                                              'minimum': 1}}}
    assert validate_arguments({'x': bad}, schema) == [msg]
    assert validate_arguments({}, schema) == []  # the argument is optional: absent is fine


def test_validation_errors_reach_the_model_as_tool_errors():
    "The jsonschema check runs on a real call: the tool is not run and the error names the value."
    ran = []
    def pick(n: int) -> int:
        """Pick a number.

        Args:
            n: a number from 1 to 3
        """
        ran.append(n); return n
    tool = FunctionTool(pick)
    tool.parameters['properties']['n'].update(minimum=1, maximum=3)
    async def go():
        async with ToolManager([tool]).session() as s:
            return await s.execute([ToolCall('pick', {'n': 7}), ToolCall('pick', {'n': 2})])
    bad, good = asyncio.run(go())
    assert ran == [2] and good.ok and not bad.ok and '7' in bad.error, bad.error


def test_call_ids_are_unique_within_a_turn():
    "Regression: two model-written calls with the same id kept it."
    text = ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "c"}</tool_call>'
            '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}, "id": "c"}</tool_call>'
            '<tool_call>{"name": "add", "arguments": {"a": 5, "b": 6}, "id": "c"}</tool_call>')
    calls = get_parser('qwen').parse(text).calls
    assert [c.id for c in calls] == ['c', 'c_1', 'c_2']
    # the tool session makes them unique as well (calls that reach it by another path)
    async def go():
        async with ToolManager(calculator_tools()).session() as s:
            return await s.execute([{'function': {'name': 'add', 'arguments': {'a': 1, 'b': 1}},
                                     'id': 'x'}] * 2 + [ToolCall('add', {'a': 2, 'b': 2})])
    outs = asyncio.run(go())
    ids = [o.call_id for o in outs]
    assert len(set(ids)) == 3 and ids[:2] == ['x', 'x_1'], ids


def test_parser_errors_have_no_invisible_character():
    "Regression: a malformed call's error named the tag, which the encoder broke with a `\\u200b`."
    res = get_parser('qwen').parse('<tool_call>\n{"name": "add", "arguments": \n</tool_call>')
    assert res.errors and res.errors[0].startswith('invalid JSON in tool_call block')
    assert '\u200b' not in res.errors[0] and '<tool_call>' not in res.errors[0]


def test_stepper_goes_on_after_a_call_typed_wrong():
    """Regression (the stepper tutorial): after a typed malformed call, an engine that reads the
    tool results from the prompt did `int()` on the error text; the error text showed `\\u200b`."""
    from tunix_agentic.rollout.episode_config import EpisodeConfig
    from tunix_agentic.ui.stepper import EpisodeStepper
    tok = build_tiny_tokenizer()
    def call(name, a, b):
        body = f'{{"name": "{name}", "arguments": {{"a": {a}, "b": {b}}}}}'
        return f'<tool_call>\n{body}\n</tool_call>'
    def oracle(prompt: str) -> str:  # the tutorial's oracle: only numeric results count
        results = re.findall(r'<tool_response>\n(-?\d+)\n</tool_response>', prompt)
        if not results: return call('multiply', 12, 34)
        if len(results) == 1: return call('add', results[0], 17)
        return f'#### {results[1]}'
    s = EpisodeStepper(calc_group(), [CALC_TASK], tok, config=EpisodeConfig.tiny(),
                       engines={'oracle': ScriptedEngine(tok, oracle)})
    s.text_input.value = '<tool_call>\n{"name": "add", "arguments": \n</tool_call>'
    s.send_button.click()
    error = s.trajectory.messages[-1]['content']
    assert error.startswith('Error: could not parse the tool call: invalid JSON in tool_call block')
    assert '\u200b' not in error
    while not s.step_button.disabled: s.step_button.click()
    t = s.trajectory
    assert (s.message.value, t.status, t.reward, t.num_turns) == ('', 'done', 1.0, 4)


def test_metrics_figure_is_a_picture_without_seed_curves():
    "Regression: JupyterLab showed `<Figure size ...>` as text; `env_seed` was drawn as a metric."
    from tunix_agentic.core.trajectory import Trajectory
    from tunix_agentic.ui.viewer import plot_metrics
    def traj(step, i):
        return Trajectory(episode_id=f'e{step}{i}', reward=float(i), status='done',
                          metrics={'turns': 2, 'env_seed': 1000 + i, 'sampling_seed': 7 * i,
                                   'tool_calls': i})
    fig = plot_metrics({s: [traj(s, i) for i in range(3)] for s in range(3)})
    assert fig._repr_png_()[:4] == b'\x89PNG'
    titles = [ax.get_title() for ax in fig.axes]
    assert 'metrics/tool_calls' in titles, titles
    assert not [t for t in titles if 'seed' in t or t.endswith('_id')], titles


def test_license_matches_setup_and_settings_have_no_placeholders():
    "Regression: no LICENSE for setup.py's Apache-2.0; a placeholder owner and email in settings."
    assert (ROOT / 'LICENSE').read_text().split()[:3] == ['Apache', 'License', 'Version']
    assert "license='Apache-2.0'" in (ROOT / 'setup.py').read_text()
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / 'settings.ini')
    s = cfg['DEFAULT']
    assert s['license'] == 'apache2'
    for key in ('user', 'author', 'author_email', 'git_url', 'doc_host'):
        v = s.get(key, '')
        assert not re.search(r'example\.(com|org)|your[-_ ]?(name|email)|placeholder|changeme|'
                             r'@users\.noreply', v, re.I), f'settings.ini {key} = {v!r}'
