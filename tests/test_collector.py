"""TrajectoryCollector end to end: golden token rules, groups, budgets, statuses, release, state, dumps."""
import asyncio, random, time

import pytest

from tunix_agentic.chat.encoder import response_spans as spans
from tunix_agentic.rollout.workers import multiply_solver
from tunix_agentic.rollout.collector import CollectConfig, EpisodeState, TrajectoryCollector, derive_seed
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.rollout.dumps import DumpWriter, load_step
from tunix_agentic.envs.environments import EnvGroup, EnvSpec, ToolEnvironment
from tunix_agentic.engines.engine import BaseEngine, GenerateOutput, ScriptedEngine, SamplingParams
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.base import BaseTool
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import TrajectoryStatus as S

from conftest import CALC_SCRIPT, CALC_TASK, calc_group

TOK = build_tiny_tokenizer()
SCRIPT, TASK = CALC_SCRIPT, CALC_TASK
CALL_FOREVER = ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 1}}\n</tool_call>']


class Tracked(BaseTool):
    "A stateful tool that records live instances and can sleep (to prove release on every path)."
    live: set = set()
    def __init__(self, sleep_s=0.0):
        super().__init__(name='tracked', description='A tracked tool.',
                         parameters={'type': 'object', 'properties': {}, 'required': []})
        self.sleep_s = sleep_s
    async def create(self, instance_id=None, **kw):
        iid = await super().create(instance_id, **kw); Tracked.live.add(iid); return iid
    async def execute(self, instance_id, parameters, **kw):
        await asyncio.sleep(self.sleep_s); return 'ok', 0.0, {}
    async def release(self, instance_id, **kw):
        Tracked.live.discard(instance_id); await super().release(instance_id, **kw)


@pytest.mark.timeout(60)
def test_calculator_episode_golden_token_rules():
    engine = ScriptedEngine(TOK, SCRIPT, logprob=-0.75)
    coll = TrajectoryCollector(engine, TOK, calc_group(), config=CollectConfig.tiny(group_size=1))
    [t] = coll.run([TASK])
    assert (t.status, t.reward, t.error) == (S.DONE, 1.0, None)
    assert [s.mc_return for s in t.steps] == [1.0, 1.0, 1.0]
    # prompt = the first render (system + user, tools through the template, generation prompt)
    first = t.messages[:2]
    assert TOK.apply_chat_template(first, tools=calculator_group_schemas(), add_generation_prompt=True,
                                   tokenize=True) == t.input_ids[:t.prompt_len]
    # mask 1 exactly on the sampled tokens, <|im_end|> included; decoding them gives the outputs
    im_end = TOK.convert_tokens_to_ids('<|im_end|>')
    runs = spans(t.response_mask)
    assert [TOK.decode(t.input_ids[a:b]) for a, b in runs] == [s + '<|im_end|>' for s in SCRIPT]
    assert all(t.input_ids[b - 1] == im_end for a, b in runs)
    assert [t.input_ids[a:b] for a, b in runs] == [TOK.encode(s, add_special_tokens=False) + [im_end]
                                                   for s in SCRIPT]
    # logprobs: the engine's on mask 1, 0.0 on mask 0
    assert all(lp == (-0.75 if m else 0.0) for lp, m in zip(t.logprobs, t.response_mask))
    # the whole sequence is what the template renders for the messages (no drift, nothing extra)
    full = TOK.apply_chat_template(t.messages, tools=calculator_group_schemas(), tokenize=True)
    assert full[:len(t.input_ids)] == t.input_ids and t.metrics['drift'] == 0
    # the mask-0 stretches between turns are exactly tool responses and template scaffolding
    gaps = [TOK.decode(t.input_ids[b:a2]) for (_, b), (a2, _) in zip(runs, runs[1:])]
    assert gaps == ['\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
                    '\n<|im_start|>user\n<tool_response>\n425\n</tool_response><|im_end|>\n<|im_start|>assistant\n']
    m = t.metrics
    assert (m['turns'], m['tool_calls'], m['tool_errors'], m['parse_errors']) == (3, 2, 0, 0)
    assert m['response_tokens'] == sum(t.response_mask) and m['total_tokens'] == len(t.input_ids)
    assert abs(m['time_model_s'] + m['time_tools_s'] + m['time_framework_s'] - m['time_total_s']) < 1e-6
    assert coll.states[t.episode_id].history == ['pending', 'running', 'tool_calling', 'running',
                                                 'tool_calling', 'running', 'done']


def calculator_group_schemas():
    return [t.schema for t in calculator_tools()]


def arithmetic(rng: random.Random) -> dict:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return {'question': f'What is {a}*{b}?', 'answer': str(a * b)}


# reads the question, calls multiply, then answers from the tool result
solver = multiply_solver


@pytest.mark.timeout(60)
def test_groups_share_the_seeded_reset():
    coll = TrajectoryCollector(ScriptedEngine(TOK, solver), TOK,
                               lambda row: ToolEnvironment(arithmetic, calculator_tools(), 'gsm8k'),
                               config=CollectConfig.tiny(group_size=4, seed=5))
    trajs = coll.run([{}, {}, {}])
    assert len(trajs) == 12 and all(t.status == S.DONE and t.reward == 1.0 for t in trajs)
    by_group = {}
    for t in trajs: by_group.setdefault(t.group_id, []).append(t)
    assert len(by_group) == 3
    questions = []
    for gid, members in by_group.items():
        assert len({m.messages[1]['content'] for m in members}) == 1  # same seeded episode
        assert len({m.metrics['env_seed'] for m in members}) == 1
        assert len({m.metrics['sampling_seed'] for m in members}) == 4  # distinct sampling seeds
        assert [m.episode_id for m in members] == [f'{gid}.{k}' for k in range(4)]
        questions.append(members[0].messages[1]['content'])
    assert len(set(questions)) == 3  # different groups, different draws
    # reproducible: the same base seed draws the same tasks again
    again = TrajectoryCollector(ScriptedEngine(TOK, solver), TOK,
                                lambda row: ToolEnvironment(arithmetic, calculator_tools(), 'gsm8k'),
                                config=CollectConfig.tiny(group_size=4, seed=5)).run([{}, {}, {}])
    assert [t.messages[1]['content'] for t in again] == [t.messages[1]['content'] for t in trajs]
    # a task's own seed is its env seed
    seeded = coll.run([{'seed': 99}, {'seed': 99}])
    assert len({t.messages[1]['content'] for t in seeded}) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize('room,turns,truncated', [
    (32, 1, 0),   # the first tool result overshoots: dropped, episode ends after turn 1
    (12, 1, 1),   # the first response is cut by the token budget (finish_reason 'length')
    (62, 2, 1)])  # the second response is cut
def test_over_size_ends_cleanly_with_max_length(room, turns, truncated):
    Tracked.live.clear()
    make = lambda n: TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, calc_group(extra_tools=[Tracked()]),
                                         config=CollectConfig.tiny(group_size=2, episode=EpisodeConfig.tiny(max_seq_len=n)))
    prompt_len = make(4096).run([TASK])[0].prompt_len
    coll = make(prompt_len + room)
    for t in coll.run([TASK]):
        assert t.status == S.MAX_LENGTH and t.error is None
        assert len(t.input_ids) <= prompt_len + room
        assert (t.metrics['turns'], t.metrics['truncated_turns']) == (turns, truncated)
        assert len(t.input_ids) == len(t.response_mask) == len(t.logprobs)
        assert t.metrics['drift'] == 0 and t.reward == 0.0
    assert Tracked.live == set()


@pytest.mark.timeout(60)
def test_max_turns_is_the_envs():
    "One turn budget, the environment's: 3 here, and 8 is not capped by any episode config."
    for budget in (3, 8):
        coll = TrajectoryCollector(ScriptedEngine(TOK, CALL_FOREVER), TOK, calc_group(max_turns=budget),
                                   config=CollectConfig.tiny(group_size=2))
        for t in coll.run([TASK]):
            assert (t.status, t.metrics['turns'], t.metrics['tool_calls']) == (S.MAX_TURNS, budget, budget)
            assert len(spans(t.response_mask)) == budget
            assert t.input_ids[-1] == TOK.convert_tokens_to_ids('<|im_end|>')
            assert t.steps[-1].status == S.MAX_TURNS and t.steps[0].status is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_turns'"):
        CollectConfig.tiny(max_turns=2)


class SlowEngine(ScriptedEngine):
    def generate(self, prompts, params):
        time.sleep(0.3)
        return super().generate(prompts, params)


@pytest.mark.timeout(60)
def test_timeout_status_from_slow_model_and_slow_tool():
    Tracked.live.clear()
    coll = TrajectoryCollector(SlowEngine(TOK, SCRIPT), TOK, calc_group(extra_tools=[Tracked()]),
                               config=CollectConfig.tiny(group_size=2, episode=EpisodeConfig.tiny(episode_timeout_s=0.1)))
    for t in coll.run([TASK]):
        assert t.status == S.TIMEOUT and 'exceeded' in t.error
    slow_tool = ['<tool_call>\n{"name": "tracked", "arguments": {}}\n</tool_call>']
    coll = TrajectoryCollector(ScriptedEngine(TOK, slow_tool), TOK, calc_group(extra_tools=[Tracked(5.0)]),
                               config=CollectConfig.tiny(group_size=3, episode=EpisodeConfig.tiny(episode_timeout_s=0.2)))
    t0 = time.monotonic()
    trajs = coll.run([TASK])
    assert time.monotonic() - t0 < 4.0
    assert all(t.status == S.TIMEOUT and t.metrics['turns'] == 1 for t in trajs)
    assert all(coll.states[t.episode_id].history[-2:] == ['tool_calling', 'timeout'] for t in trajs)
    assert Tracked.live == set()  # released despite the cancellation mid-call


class Aborting(BaseEngine):
    def generate(self, prompts, params): return [GenerateOutput([], [], 'abort') for _ in prompts]


class Broken(BaseEngine):
    def generate(self, prompts, params): raise RuntimeError('device lost')


@pytest.mark.timeout(60)
def test_failures_become_error_status_never_exceptions():
    for engine, msg in [(Aborting(), 'aborted'), (Broken(), 'device lost')]:
        [t] = TrajectoryCollector(engine, TOK, calc_group(), config=CollectConfig.tiny(group_size=1)).run([TASK])
        assert t.status == S.ERROR and msg in t.error
    def bad_env(row): raise ValueError('no such env')
    [t] = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, bad_env,
                              config=CollectConfig.tiny(group_size=1)).run([TASK])
    assert t.status == S.ERROR and 'no such env' in t.error and t.input_ids == []
    [t] = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, calc_group(),
                              config=CollectConfig.tiny(group_size=1)).run([{'task_type': 'web'}])
    assert t.status == S.ERROR and 'known task types' in t.error


@pytest.mark.timeout(60)
def test_concurrency_cap_states_callback_batching_and_version():
    live, peak, seen = set(), [0], []
    def on_state(st: EpisodeState):
        seen.append((st.episode_id, st.status.value))
        if st.status in (S.RUNNING, S.TOOL_CALLING): live.add(st.episode_id)
        else: live.discard(st.episode_id)
        peak[0] = max(peak[0], len(live))
    engine = ScriptedEngine(TOK, SCRIPT)
    engine.update_params(None, version=7)
    coll = TrajectoryCollector(engine, TOK, calc_group(), on_state=on_state,
                               config=CollectConfig.tiny(group_size=4, max_concurrency=6))
    trajs = coll.run([TASK] * 5)
    assert len(trajs) == 20 and all(t.status == S.DONE for t in trajs)
    assert peak[0] <= 6 and all(t.policy_version == 7 for t in trajs)
    assert all(coll.states[t.episode_id].done for t in trajs)
    assert max(engine.batcher.batch_sizes) > 1  # concurrent calls were batched
    assert sum(engine.batcher.batch_sizes) == 60
    assert [s for e, s in seen if e == trajs[0].episode_id][0] == 'pending'


@pytest.mark.timeout(60)
def test_routing_mixed_task_types_and_dumping(tmp_path):
    envs = EnvGroup({'calc': EnvSpec(env='tool', tools='calculator', reward_fn='gsm8k', max_turns=5),
                     'qa': EnvSpec(env='single_turn', reward_fn='exact_match', max_turns=1)})
    def respond(prompt):
        if 'Capital of France' in prompt: return 'Paris'
        return SCRIPT[min(prompt.count('<|im_start|>assistant') - 1, 2)]
    with DumpWriter(tmp_path, 3) as w:
        coll = TrajectoryCollector(ScriptedEngine(TOK, respond), TOK, envs, on_trajectory=w.write,
                                   config=CollectConfig.tiny(group_size=2))
        trajs = coll.run([TASK, {'task_type': 'qa', 'question': 'Capital of France?', 'answer': 'Paris'}], step=3)
    assert [(t.env_name, t.status, t.reward, t.metrics['turns']) for t in trajs] == \
        [('calc', S.DONE, 1.0, 3)] * 2 + [('qa', S.DONE, 1.0, 1)] * 2
    assert trajs[2].messages[0]['role'] == 'system' and 'Tools' not in TOK.decode(trajs[2].input_ids)
    dumped = {t.episode_id: t for t in load_step(tmp_path, 3)}
    assert sorted(dumped) == sorted(t.episode_id for t in trajs) and all(e.startswith('s3-') for e in dumped)
    assert all(dumped[t.episode_id].to_dict() == t.to_dict() for t in trajs)


def test_config_validation_and_seeds():
    with pytest.raises(ValueError, match='max_concurrency'): CollectConfig(max_concurrency=0)
    with pytest.raises(ValueError, match='episode_timeout_s'): CollectConfig(episode=EpisodeConfig(episode_timeout_s=0))
    assert derive_seed(1, 'g0', 0) == derive_seed(1, 'g0', 0) != derive_seed(1, 'g0', 1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_jax_sampler_token_in_token_out():
    "With the tiny random model: every model call saw a prefix of the trajectory and its sampled ids sit there."
    from tunix_agentic.models.default import load_default
    from tunix_agentic.engines.jax_engine import JaxEngine
    model, cfg, tok = load_default()
    calls = []
    class Recording(JaxEngine):
        def generate(self, prompts, params):
            outs = super().generate(prompts, params)
            calls.extend(zip(map(list, prompts), outs))
            return outs
    engine = Recording(model, cfg, tok)
    coll = TrajectoryCollector(engine, tok, calc_group(max_turns=2),
                               config=CollectConfig.tiny(group_size=2, episode=EpisodeConfig.tiny(max_seq_len=1024, sampling=SamplingParams(max_new_tokens=12))))
    trajs = coll.run([TASK])
    assert len(trajs) == 2
    for t in trajs:
        assert t.status in (S.DONE, S.MAX_TURNS, S.MAX_LENGTH) and t.error is None, (t.status, t.error)
        mine = [(p, o) for p, o in calls if t.input_ids[:len(p)] == p
                and t.input_ids[len(p):len(p) + len(o.token_ids)] == o.token_ids]
        assert len(mine) == t.metrics['turns'] >= 1
        for p, o in mine:
            n = len(o.token_ids)
            assert t.response_mask[len(p):len(p) + n] == [1] * n
            assert t.logprobs[len(p):len(p) + n] == pytest.approx(o.logprobs)
        assert sum(t.response_mask) == sum(len(o.token_ids) for _, o in mine)
    assert trajs[0].input_ids[:trajs[0].prompt_len] == trajs[1].input_ids[:trajs[1].prompt_len]


class Paying(BaseTool):
    "A tool whose every call earns a step reward of 0.25."
    def __init__(self):
        super().__init__(name='pay', description='Pays.', parameters={'type': 'object', 'properties': {}})
    async def execute(self, instance_id, parameters, **kw): return 'paid', 0.25, {}


@pytest.mark.timeout(60)
def test_step_rewards_final_reward_and_discounted_returns():
    pay = '<tool_call>\n{"name": "pay", "arguments": {}}\n</tool_call>'
    coll = TrajectoryCollector(ScriptedEngine(TOK, [pay, pay, '#### 425']), TOK,
                               calc_group(extra_tools=[Paying()]),
                               final_reward_fn=lambda task, traj: 0.5,
                               config=CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(gamma=0.5)))
    [t] = coll.run([TASK])
    assert t.status == S.DONE
    assert [s.reward for s in t.steps] == [0.25, 0.25, 1.5]  # tool rewards; answer 1.0 + final 0.5
    assert [s.mc_return for s in t.steps] == pytest.approx([0.25 + 0.5 * 1.0, 0.25 + 0.5 * 1.5, 1.5])
    assert t.reward == pytest.approx(2.0)


@pytest.mark.timeout(60)
def test_rollout_data_dir_dumps_each_step(tmp_path):
    coll = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, calc_group(),
                               config=CollectConfig.tiny(group_size=2, rollout_data_dir=str(tmp_path)))
    first = coll.run([TASK], step=0)
    coll.engine.update_params(None)
    second = coll.run([TASK, TASK], step=1)
    assert coll.run([TASK]) and sorted(p.name for p in tmp_path.iterdir()) == ['step_000000.jsonl',
                                                                               'step_000001.jsonl']
    by_id = lambda ts: sorted((t.to_dict() for t in ts), key=lambda d: d['episode_id'])
    assert by_id(load_step(tmp_path, 0)) == by_id(first)  # finishing order may differ
    assert sorted(t.episode_id for t in load_step(tmp_path, 1)) == sorted(t.episode_id for t in second)
    assert {t.policy_version for t in load_step(tmp_path, 1)} == {1}
    assert all(t.metrics['policy_version_last'] == 1 for t in second)


@pytest.mark.timeout(60)
def test_prompt_longer_than_max_seq_len():
    coll = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, calc_group(),
                               config=CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(max_seq_len=100)))
    [t] = coll.run([TASK])
    assert t.status == S.MAX_LENGTH and 'max_seq_len is 100' in t.error
    assert len(t.input_ids) == t.prompt_len == 100 and sum(t.response_mask) == 0
    assert t.metrics['prompt_too_long'] > 100 and t.metrics['turns'] == 0 and t.steps == []


from hypothesis import given, settings, HealthCheck, strategies as st

_RESPONSES = st.one_of(
    st.tuples(st.sampled_from(['add', 'subtract', 'multiply', 'divide']),
              st.integers(-999, 999), st.integers(-99, 99)).map(
        lambda t: f'<tool_call>\n{{"name": "{t[0]}", "arguments": {{"a": {t[1]}, "b": {t[2]}}}}}\n</tool_call>'),
    st.just('<tool_call>\n{"name": "add", "arguments": \n</tool_call>'),          # malformed JSON
    st.just('<tool_call>\n{"name": "sqrt", "arguments": {"x": 2}}\n</tool_call>'),  # unknown tool
    st.just('<tool_call>\n{"name": "tracked", "arguments": {}}\n</tool_call>'),     # stateful tool
    st.text(alphabet='abc 0123456789#.,$\n', min_size=1, max_size=40),             # an answer
)


@pytest.mark.timeout(300)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(_RESPONSES, min_size=1, max_size=5), room=st.integers(1, 400),
       max_turns=st.integers(1, 5), group=st.integers(1, 3))
def test_property_trajectories_are_token_exact(script, room, max_turns, group):
    "Any mix of calls, bad calls and answers under any budget: the invariants the learner relies on."
    Tracked.live.clear()
    engine = ScriptedEngine(TOK, script)
    envs = calc_group(max_turns=max_turns, extra_tools=[Tracked()])
    prompt_len = TrajectoryCollector(engine, TOK, envs, config=CollectConfig.tiny(group_size=1)) \
        .run([TASK])[0].prompt_len
    cfg = CollectConfig.tiny(group_size=group, episode=EpisodeConfig.tiny(max_seq_len=prompt_len + room))
    trajs = TrajectoryCollector(engine, TOK, envs, config=cfg).run([TASK])
    im_end = TOK.convert_tokens_to_ids('<|im_end|>')
    for t in trajs:
        assert t.status in (S.DONE, S.MAX_TURNS, S.MAX_LENGTH) and t.error is None, (t.status, t.error)
        n = len(t.input_ids)
        assert n == len(t.response_mask) == len(t.logprobs) and n <= cfg.episode.max_seq_len
        assert t.response_mask[:t.prompt_len] == [0] * t.prompt_len
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(t.logprobs, t.response_mask))
        runs = spans(t.response_mask)
        assert len(runs) == t.metrics['turns'] == len(t.steps) <= max_turns
        for k, (a, b) in enumerate(runs):
            want = TOK.encode(script[min(k, len(script) - 1)], add_special_tokens=False) + [im_end]
            got = t.input_ids[a:b]
            if got != want:  # only the last turn may be cut, and only by the token budget
                assert k == len(runs) - 1 and t.status == S.MAX_LENGTH and want[:len(got)] == got
        assert t.metrics['drift'] == 0
        assert t.metrics['tool_calls'] == sum(len(s.action.tool_calls) for s in t.steps)
        if t.status == S.DONE: assert t.steps[-1].action.is_final
    assert Tracked.live == set()


@pytest.mark.timeout(120)
def test_runs_in_two_threads_share_one_heap_freeze_and_leave_none():
    "Collections overlapping in two threads: the heap is frozen while any runs, unfrozen after the last."
    import gc, threading
    frozen_during, results, errors = [], {}, []
    class Probe(ScriptedEngine):
        def generate(self, prompts, params):
            frozen_during.append(gc.get_freeze_count() > 0); time.sleep(0.01)
            return super().generate(prompts, params)
    def run(k):
        try:
            coll = TrajectoryCollector(Probe(TOK, SCRIPT), TOK, calc_group(),
                                       config=CollectConfig.tiny(group_size=2))
            results[k] = coll.run([TASK] * (3 + 5 * k))
        except Exception as e: errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors and [len(results[k]) for k in range(2)] == [6, 16]
    assert all(t.status == S.DONE and t.reward == 1.0 for k in results for t in results[k])
    assert frozen_during and all(frozen_during)
    assert gc.get_freeze_count() == 0
    off = TrajectoryCollector(Probe(TOK, SCRIPT), TOK, calc_group(),
                              config=CollectConfig.tiny(group_size=1, freeze_gc=False))
    frozen_during.clear(); off.run([TASK])
    assert frozen_during and not any(frozen_during)
