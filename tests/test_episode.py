"""One `Episode`, every driver: the collector and the stepper's `EpisodeDriver` produce identical
trajectories (ids, mask, logprobs, messages, steps, status, reward) and metrics over random scripts
that take the unhappy paths: parse errors, tool errors, unknown tools, two calls in a turn, cut
responses (`max_length`, a prompt that alone fills `max_seq_len`), `max_turns`, an aborted request,
a hung engine (timeout), and a `final_reward_fn` (plain, `RewardOutput`, broken)."""
import asyncio

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.rollout.episode import Episode
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.ui.episode_driver import EpisodeDriver, run_async
from tunix_agentic.engines.engine import GenerateOutput, SamplingParams, ScriptedEngine, _sp_text_for
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.core.trajectory import RewardOutput, TrajectoryStatus as S

from conftest import CALC_TASK, calc_group

TOK = build_tiny_tokenizer()
TASK = CALC_TASK
ABORT, HANG = '<abort>', '<hang>'


def call(name, **args):
    import json
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


TURNS = [call('multiply', a=12, b=34), call('add', a=408, b=17),            # good calls
         call('divide', a=1, b=0), call('add', a='x', b=1),                   # tool errors
         call('sqrt', x=2),                                                   # unknown tool
         'broken <tool_call>{"name": </tool_call>',                           # parse error
         call('add', a=1, b=2) + '\n' + call('multiply', a=3, b=4),           # two calls
         '12*34 = 408 and 408 + 17 = 425. #### 425', '#### 1', 'I am not sure.',
         'x ' * 150,                                                          # long: cut
         ABORT]
FINAL = {None: None, 'const': lambda task, t: 0.25,
         'output': lambda task, t: RewardOutput(reward=0.5 * len(t.steps)),
         'broken': lambda task, t: 1 / 0}


class Script(ScriptedEngine):
    "Scripted turns; `ABORT` makes the engine abort the request, `HANG` never answers."
    async def agenerate(self, prompt_ids, params=None):
        text = _sp_text_for(self, prompt_ids)
        if text == HANG: await asyncio.sleep(3600)
        if text == ABORT: return GenerateOutput([], [], 'abort')
        return await super().agenerate(prompt_ids, params)


def envs(max_turns=5): return calc_group(max_turns)


def strip(x):
    "Drop measured times (the only thing two runs of one episode may differ in)."
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != 'latency_s' and not k.startswith('time_')}
    if isinstance(x, list): return [strip(v) for v in x]
    return x


def both(script, cfg, final=None, typed=False, logprob=-0.5, max_turns=5):
    "The same episode through the collector and through the stepper's driver."
    coll = TrajectoryCollector(Script(TOK, script, logprob=logprob), TOK, envs(max_turns), config=cfg,
                               final_reward_fn=final)
    ref = run_async(coll.collect(TASK, env_seed=11))
    d = EpisodeDriver(TOK, None if typed else Script(TOK, script, logprob=logprob), cfg.episode,
                      final_reward_fn=final)
    t = run_async(d.reset(envs(max_turns).make(TASK), TASK, seed=11,
                          sampling_seed=ref.metrics['sampling_seed'], episode_id=ref.episode_id))
    while not d.done:
        t = run_async(d.step(text=script[min(d.turn, len(script) - 1)] if typed else None))
    return ref, t, coll.states[ref.episode_id].history, d


def check_equal(ref, t, typed=False):
    a, b = strip(ref.to_dict()), strip(t.to_dict())
    if typed:  # a typed step says so; nothing was sampled, so no policy version
        for s in b['steps']: s['source'] = 'policy'
        a['metrics'].pop('policy_version_last'); b['metrics'].pop('policy_version_last')
    for k in ('input_ids', 'response_mask', 'logprobs', 'prompt_len', 'messages', 'status', 'reward',
              'error', 'metrics', 'steps', 'episode_id', 'env_name', 'task'):
        assert a[k] == b[k], k
    assert a == b


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(st.sampled_from(TURNS), min_size=1, max_size=6),
       max_turns=st.integers(1, 5), max_seq_len=st.sampled_from([300, 510, 530, 600, 1024]),
       max_new_tokens=st.sampled_from([12, 40, 256]), final=st.sampled_from(list(FINAL)))
def test_collector_and_stepper_agree_on_random_scripts(script, max_turns, max_seq_len,
                                                       max_new_tokens, final):
    cfg = CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(
        max_seq_len=max_seq_len, sampling=SamplingParams(max_new_tokens=max_new_tokens)))
    ref, t, states, d = both(script, cfg, FINAL[final], max_turns=max_turns)
    check_equal(ref, t)
    assert d.status_history == states  # the same visible states, the final one included
    assert t.status.is_terminal


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(st.sampled_from([x for x in TURNS if x != ABORT]), min_size=1, max_size=5),
       max_turns=st.integers(1, 5), max_seq_len=st.sampled_from([510, 530, 600, 1024]))
def test_typed_turns_are_the_scripted_policys_turns(script, max_turns, max_seq_len):
    "A person typing the script gives the collector's episode (logprob 0.0: nothing was sampled)."
    cfg = CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(
        max_seq_len=max_seq_len, sampling=SamplingParams(max_new_tokens=4096)))
    ref, t, states, d = both(script, cfg, typed=True, logprob=0.0, max_turns=max_turns)
    assert all(s.source == 'human' for s in t.steps)
    check_equal(ref, t, typed=True)


SCRIPT = TURNS[0:2] + [TURNS[7]]


@pytest.mark.parametrize('max_seq_len', [510, 530])
def test_max_length_counts_agree(max_seq_len):
    "The case that drifted: at 510 the collector counted parse_errors=1 and the stepper 0."
    ref, t, _, _ = both(SCRIPT, CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(max_seq_len=max_seq_len)))
    check_equal(ref, t)
    cut = max_seq_len == 510  # the first turn is cut (and so unparseable); at 530 the tool answer
    assert ref.status == S.MAX_LENGTH and len(ref.input_ids) <= max_seq_len
    assert (ref.metrics['truncated_turns'], ref.metrics['parse_errors']) == ((1, 1) if cut else (0, 0))


def test_final_reward_fn_applies_in_the_stepper_too():
    ref, t, _, _ = both(SCRIPT, CollectConfig.tiny(group_size=1), FINAL['output'])
    check_equal(ref, t)
    assert (t.status, t.reward, t.steps[-1].reward) == (S.DONE, 2.5, 2.5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize('hang_at', [0, 2])
def test_a_hung_engine_times_out_alike(hang_at):
    script = SCRIPT[:hang_at] + [HANG]
    ref, t, _, d = both(script, CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(episode_timeout_s=2.0)))
    assert ref.status == t.status == S.TIMEOUT and ref.error and t.error
    t.error = ref.error  # the collector's clock runs per episode, the stepper's per turn
    check_equal(ref, t)
    assert ref.metrics['turns'] == hang_at and d.turn == hang_at + 1  # Back can undo the hung turn


def test_model_output_never_raises():
    "Whatever the engine returns (odd ids, cut mid-token, no stop), the episode goes on or ends."
    from tunix_agentic.envs.agents import ToolAgent
    cfg = EpisodeConfig.tiny()
    ep = Episode(TASK, envs(3).make(TASK), ToolAgent(), None, TOK, cfg, env_seed=1)
    run_async(ep.start())
    for ids in ([], [TOK.convert_tokens_to_ids('<|im_start|>')] * 3, list(range(40)), [10**6]):
        if ep.done: break
        run_async(ep.advance(GenerateOutput(ids, [0.0] * len(ids), 'length')))
    traj = ep.finish()
    assert traj.status.is_terminal and len(traj.input_ids) <= cfg.max_seq_len
