"""Headless tests of the widgets (`widgets`, `viewer`, `episode_driver`, `stepper`): renderings,
metrics plot, dump viewer, episode stepper.

Buttons are pressed with `button.click()`; checks read widget state and the rendered HTML."""
import html, json, logging, re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
matplotlib.use('Agg')
import pytest

from tunix_agentic.chat.encoder import response_spans as spans
from tunix_agentic.core.trajectory import Action, Step, ToolCall, Trajectory
from tunix_agentic.ui.render import MASK_COLORS, render_chat, render_tokens, render_trajectory
from tunix_agentic.ui.viewer import DumpViewer, dump_metrics, load_dump_dir, plot_metrics
from tunix_agentic.ui.episode_driver import EpisodeDriver, run_async
from tunix_agentic.ui.stepper import EpisodeStepper


# ---------------------------------------------------------------- helpers
class _Spans(HTMLParser):
    "Collect (attrs, text) of every token span, to check the strip as a browser would parse it."
    def __init__(self):
        super().__init__(); self.spans, self._cur = [], None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'span' and 'ta-tok' in (a.get('class') or ''): self._cur = [a, '']
    def handle_data(self, data):
        if self._cur is not None: self._cur[1] += data
    def handle_endtag(self, tag):
        if tag == 'span' and self._cur is not None:
            self.spans.append(tuple(self._cur)); self._cur = None

def token_spans(h: str) -> list[tuple[dict, str]]:
    p = _Spans(); p.feed(h); return p.spans

EVIL = '<script>alert("x")</script>&\'"'

def make_traj(reward=1.0, status='done', env='calc', eid='e0', group='g0',
              n_prompt=3) -> Trajectory:
    msgs = [{'role': 'system', 'content': 'calc'}, {'role': 'user', 'content': EVIL},
            {'role': 'assistant', 'content': '',
             'tool_calls': [ToolCall('add', {'a': 1, 'b': EVIL}).to_openai()]},
            {'role': 'tool', 'name': 'add', 'content': 'Error: ' + EVIL},
            {'role': 'assistant', 'content': 'done ' + EVIL}]
    mask = [0] * n_prompt + [1, 1, 0, 0, 1, 1]
    return Trajectory(task={'question': EVIL}, messages=msgs, reward=reward, status=status,
                      env_name=env,
                      steps=[Step(reward=0.0, action=Action(parse_errors=['bad ' + EVIL])),
                             Step(reward=reward, done=True)],
                      input_ids=list(range(len(mask))), response_mask=mask,
                      logprobs=[-0.25 * m for m in mask], episode_id=eid, group_id=group,
                      metrics={'tool_calls': 1, 'time': {'model_s': 0.5}})


def write_dump(d: Path, step: int, trajs, torn: str | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f'step_{step:06d}.jsonl'
    with open(p, 'a') as f:
        for t in trajs: f.write(json.dumps(t.to_dict()) + '\n')
        if torn: f.write(torn)
    return p


# ---------------------------------------------------------------- renderings
def test_untrusted_text_is_escaped_everywhere():
    h = render_trajectory(make_traj())
    assert '<script>' not in h and 'alert("x")' not in h
    # user msg, call args, tool error, answer, parse error, task
    assert h.count('&lt;script&gt;') >= 6
    assert 'bad &lt;script&gt;' in h  # parse errors shown on their step


def test_token_strip_matches_mask_and_hover():
    t = make_traj()
    spans = token_spans(render_tokens(t.input_ids, t.response_mask, t.logprobs))
    assert len(spans) == len(t.input_ids)
    for j, (a, text) in enumerate(spans):
        m = t.response_mask[j]
        assert f'ta-mask{m}' in a['class']
        assert MASK_COLORS[m] in a['style']
        assert a['title'].startswith(f'#{j} id={t.input_ids[j]} mask={m}')
        assert a['title'].endswith(f'logprob={t.logprobs[j]:.4f}')


def test_token_strip_escapes_token_text_and_title():
    class Tok:
        def decode(self, ids): return {0: '<im>', 1: '"q"', 2: '\n'}.get(ids[0], 'x')
    h = render_tokens([0, 1, 2], [0, 1, 1], [0, -1, -2], tokenizer=Tok())
    spans = token_spans(h)
    assert [s[1] for s in spans] == ['<im>', '"q"', '↵\n']  # what the browser shows
    assert "text='<im>'" in spans[0][0]['title'] and '<im>' not in h  # escaped in the source
    assert 'logprob=-2.0000' in spans[2][0]['title']


def test_chat_pairs_steps_with_assistant_turns():
    t = make_traj(reward=0.75)
    h = render_chat(t.messages, t.steps)
    assert h.count('class="ta-step"') == 2
    assert h.index('parse error') < h.index('tool &middot; add') < h.index('reward 0.75')


def test_render_trajectory_from_dict_and_header():
    t = make_traj(status='max_turns', reward=0.0)
    h = render_trajectory(t.to_dict())
    assert h == render_trajectory(t)
    assert '>max_turns<' in h and 'env calc' in h and 'episode e0' in h
    assert 'time/model_s' in h


# ---------------------------------------------------------------- dumps, metrics, plot
def test_load_dump_dir_steps_and_torn_line(tmp_path, caplog):
    write_dump(tmp_path, 10, [make_traj(eid='a')])
    write_dump(tmp_path, 2, [make_traj(eid='b'), make_traj(eid='c')], torn='{"task": {"q')
    (tmp_path / 'notes.jsonl').write_text('not a dump\n')  # not a step file: ignored
    with pytest.warns(RuntimeWarning, match='torn last line'):
        d = load_dump_dir(tmp_path)
    assert list(d) == [2, 10]
    assert [t.episode_id for t in d[2]] == ['b', 'c']
    # a bad line in the middle: dumps.load_step refuses the file, the viewer keeps what parses
    p = write_dump(tmp_path, 3, [make_traj(eid='x')], torn='garbage\n')
    write_dump(tmp_path, 3, [make_traj(eid='y')])
    with caplog.at_level(logging.WARNING), pytest.warns(RuntimeWarning, match='skipping line 2'):
        d = load_dump_dir(tmp_path)
    assert [t.episode_id for t in d[3]] == ['x', 'y'] and 'reading the lines that parse' in caplog.text


def test_metrics_plot_curves(tmp_path):
    for s in range(4):
        write_dump(tmp_path, s, [make_traj(reward=float(e < s), status='done' if e < s else 'error',
                                           eid=f'{s}{e}') for e in range(4)])
    rows = dump_metrics(tmp_path)
    assert [rows[s]['reward/mean'] for s in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert rows[0]['status/done'] == 0.0 and rows[3]['status/error'] == 0.25  # share, not missing
    fig = plot_metrics(tmp_path, keys=['reward/mean', 'status/done', 'metrics/time/model_s'])
    from matplotlib.figure import Figure
    assert isinstance(fig, Figure)
    ys = [list(ax.lines[0].get_ydata()) for ax in fig.axes]
    assert ys[0] == [0.0, 0.25, 0.5, 0.75]
    assert ys[1] == [0.0, 0.25, 0.5, 0.75]
    assert ys[2] == [0.5] * 4
    fig.savefig(tmp_path / 'm.png')
    assert (tmp_path / 'm.png').stat().st_size > 1000
    late = make_traj(eid='late'); late.metrics['only_late'] = 2.0
    write_dump(tmp_path, 3, [late])
    y2 = list(plot_metrics(tmp_path, keys=['metrics/only_late']).axes[0].lines[0].get_ydata())
    assert all(y != y for y in y2[:3]) and y2[3] == 2.0  # missing elsewhere: NaN gaps, not zeros


# ---------------------------------------------------------------- dump viewer
@pytest.fixture
def dump_dir(tmp_path):
    for s in (0, 5):
        write_dump(tmp_path, s, [make_traj(reward=r, status=st, env=env, eid=f's{s}-{j}')
                                 for j, (r, st, env) in enumerate([(1.0, 'done', 'calc'),
                                                                   (0.0, 'error', 'calc'),
                                                                   (0.5, 'done', 'gsm8k'),
                                                                   (0.0, 'timeout', 'gsm8k')])])
    return tmp_path


def test_dump_viewer_slider_filters_and_buttons(dump_dir):
    v = DumpViewer(dump_dir)
    assert v.step == 5 and v.step_label.value == 'step 5 (2/2)' and v.folder.notes[5] == []
    assert len(v.episode_list.options) == 4 and 's5-0' in v.view.value
    v.next_button.click(); v.next_button.click()
    assert v.episode_list.value == 2 and 's5-2' in v.view.value
    v.prev_button.click()
    assert 's5-1' in v.view.value
    v.step_slider.value = 0
    assert v.step == 0 and 's0-0' in v.view.value
    v.status_filter.value = 'done'
    assert [t.episode_id for t in v.episodes] == ['s0-0', 's0-2']
    v.env_filter.value = 'gsm8k'
    assert [t.episode_id for t in v.episodes] == ['s0-2'] and 's0-2' in v.view.value
    v.reward_filter.value = (0.9, 1.0)
    assert v.episodes == [] and 'no episode matches' in v.view.value
    assert v.summary.value == '0 of 4 episodes match'
    v.next_button.click()  # nothing to move to: no error
    with pytest.raises(IndexError, match='0 episodes match'): v.open(0)


def test_dump_viewer_refresh_sees_new_steps_and_plots(dump_dir):
    v = DumpViewer(dump_dir)
    v.step_slider.value = 0
    write_dump(dump_dir, 9, [make_traj(reward=2.0, eid='new', env='web')])
    write_dump(dump_dir, 0, [make_traj(reward=0.25, eid='late-0')])  # the run appends to step 0
    v.refresh_button.click()
    assert v.step == 0 and len(v.episodes) == 5  # stays where the user was; changed file re-read
    assert v.env_filter.options == ('all', 'calc', 'gsm8k')  # step 9 not visited yet
    v.step_slider.value = v.step_slider.max
    assert v.step == 9 and 'new' in v.view.value and v.step_label.value == 'step 9 (3/3)'
    # the reward filter was at its full range, so it follows the range as it grows
    assert v.reward_filter.max == 2.0 and v.reward_filter.value == (0.0, 2.0)
    assert v.env_filter.options == ('all', 'calc', 'gsm8k', 'web')
    drawn = v.plot.value  # drawn when the viewer was made (an empty Image is a broken picture)
    assert drawn[:4] == b'\x89PNG'
    v.plot_button.click()
    assert v.plot.value[:4] == b'\x89PNG' and v.plot.value != drawn  # now with step 9


def test_dump_viewer_narrowed_reward_filter_stays_and_memory_is_bounded(dump_dir):
    v = DumpViewer(dump_dir, keep_steps=1)
    v.reward_filter.value = (0.5, 1.0)
    write_dump(dump_dir, 7, [make_traj(reward=-3.0, eid='neg'), make_traj(reward=0.75, eid='ok')])
    v.refresh_button.click(); v.step_slider.value = 2
    assert v.step == 7 and (v.reward_filter.min, v.reward_filter.max) == (-3.0, 1.0)
    assert v.reward_filter.value == (0.5, 1.0)  # the user's choice is kept
    assert [t.episode_id for t in v.episodes] == ['ok']
    assert list(v.folder._episodes) == [7]  # keep_steps=1: only the step on show is in memory
    rows = dump_metrics(v.folder)
    assert rows[7]['reward/mean'] == -1.125 and list(rows) == [0, 5, 7]


def test_dump_viewer_empty_folder(tmp_path):
    v = DumpViewer(tmp_path)
    assert v.step is None and v.episodes == [] and 'no dumps yet' in v.view.value
    v.next_button.click(); v.refresh_button.click()
    write_dump(tmp_path, 1, [make_traj(eid='first')])
    v.refresh_button.click()
    assert v.step == 1 and 'first' in v.view.value
    with pytest.raises(FileNotFoundError, match='missing'): DumpViewer(tmp_path / 'missing')


def test_dump_viewer_reports_torn_line(dump_dir):
    write_dump(dump_dir, 5, [], torn='{"cut')
    v = DumpViewer(dump_dir)
    assert len(v.episodes) == 4 and 'torn last line' in v.summary.value


# ---------------------------------------------------------------- episode stepper
from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.rollout.dumps import DumpWriter
from tunix_agentic.engines.engine import ScriptedEngine, SamplingParams
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools
from conftest import CALC_SCRIPT, CALC_TASK, QA_TASK, calc_group

TOK = build_tiny_tokenizer()
IM_END = TOK.convert_tokens_to_ids('<|im_end|>')
SCRIPT, TASK, QA = CALC_SCRIPT, CALC_TASK, QA_TASK


def group(max_turns=5): return calc_group(max_turns, qa=True)


def no_timings(x):
    "Drop measured latencies (the only thing a replay may change)."
    if isinstance(x, dict): return {k: no_timings(v) for k, v in x.items() if k != 'latency_s'}
    if isinstance(x, list): return [no_timings(v) for v in x]
    return x


def stepper(engines='scripted', **kw):
    if engines == 'scripted': engines = {'scripted': ScriptedEngine(TOK, SCRIPT, logprob=-0.75)}
    return EpisodeStepper(group(kw.pop('max_turns', 5)), [TASK, QA], TOK, engines=engines,
                          config=kw.pop('config', EpisodeConfig.tiny()), **kw)


@pytest.mark.timeout(60)
def test_driver_matches_collector_token_for_token():
    cfg = CollectConfig.tiny(group_size=1)
    d = EpisodeDriver(TOK, ScriptedEngine(TOK, SCRIPT, logprob=-0.75), cfg.episode)
    run_async(d.reset(group().make(TASK), TASK, seed=11))
    while not d.done: t = run_async(d.step())
    coll = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT, logprob=-0.75), TOK, group(),
                               config=cfg)
    ref = run_async(coll.collect(TASK, env_seed=11))
    for k in ('input_ids', 'response_mask', 'logprobs', 'messages', 'prompt_len', 'reward',
              'status'):
        assert getattr(t, k) == getattr(ref, k), k
    assert [s.reward for s in t.steps] == [s.reward for s in ref.steps]
    assert [s.mc_return for s in t.steps] == [s.mc_return for s in ref.steps]
    for k in ('turns', 'tool_calls', 'tool_errors', 'parse_errors', 'drift'):
        assert t.metrics[k] == ref.metrics[k], k
    # golden rules: mask 1 exactly on the sampled turns (<|im_end|> included)
    assert [t.input_ids[a:b] for a, b in spans(t.response_mask)] == \
        [TOK.encode(s, add_special_tokens=False) + [IM_END] for s in SCRIPT]
    assert len(d.history) == 4 and [h.num_turns for h in d.history] == [0, 1, 2, 3]
    assert d.status_history == coll.states[ref.episode_id].history  # the same visible states


@pytest.mark.timeout(60)
def test_stepper_buttons_chat_and_token_strip():
    s = stepper()
    assert s.env_dropdown.options == ('calc', 'qa')
    assert [o[1] for o in s.task_dropdown.options] == [0]  # routed by task_type
    t = s.trajectory
    assert t.status == 'running' and t.num_turns == 0 and s.back_button.disabled
    assert len(token_spans(s.tokens_html.value)) == t.prompt_len == len(t.input_ids)
    s.step_button.click()
    chat = s.chat_html.value
    assert 'parsed call multiply({&quot;a&quot;: 12, &quot;b&quot;: 34})' in chat
    assert 'tool &middot; multiply' in chat and '>408</pre>' in chat  # tool output
    assert 'reward 0' in chat and '>running<' in s.state_html.value
    assert 'turn 1/5' in s.state_html.value  # the env's turn budget
    s.step_button.click(); s.step_button.click()
    t = s.trajectory
    assert (t.status, t.reward, t.num_turns) == ('done', 1.0, 3)
    assert '>done<' in s.state_html.value and 'reward 1' in s.chat_html.value
    assert s.step_button.disabled and s.send_button.disabled and not s.back_button.disabled
    # the strip: one span per token, class and colour by mask, hover = id, decoded text, logprob
    sp = token_spans(s.tokens_html.value)
    assert len(sp) == len(t.input_ids)
    for j, (a, text) in enumerate(sp):
        m, i = t.response_mask[j], t.input_ids[j]
        assert f'ta-mask{m}' in a['class'] and MASK_COLORS[m] in a['style']
        assert a['title'] == \
            f'#{j} id={i} mask={m} text={TOK.decode([i])!r} logprob={t.logprobs[j]:.4f}'
    assert ''.join(txt for (a, txt) in sp if 'ta-mask1' in a['class']).replace('↵\n', '\n') == \
        ''.join(x + '<|im_end|>' for x in SCRIPT)


@pytest.mark.timeout(60)
def test_stepper_back_replays_and_continues_identically():
    s = stepper()
    for _ in range(3): s.step_button.click()
    full = s.trajectory
    hist = [h.input_ids for h in s.driver.history]
    s.back_button.click(); s.back_button.click()
    assert s.driver.turn == 1 and s.trajectory.status == 'running'
    assert [h.input_ids for h in s.driver.history] == hist[:2]
    assert s.trajectory.input_ids == hist[1]
    s.step_button.click(); s.step_button.click()  # continue live from the restored state
    assert no_timings(s.trajectory.to_dict()) == no_timings(full.to_dict())
    for _ in range(3): s.back_button.click()
    assert s.driver.turn == 0 and s.back_button.disabled and s.trajectory.input_ids == hist[0]


@pytest.mark.timeout(60)
def test_stepper_typed_turns_reset_and_env_switch():
    s = stepper()
    s.text_input.value = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
    s.send_button.click()
    t = s.trajectory
    assert s.text_input.value == '' and t.steps[0].source == 'human'
    assert 'typed by a person' in s.chat_html.value and 'parsed call add' in s.chat_html.value
    a, b = spans(t.response_mask)[0]
    typed = TOK.encode(t.steps[0].model_response, add_special_tokens=False)
    assert t.input_ids[a:b] == typed + [IM_END]
    assert t.logprobs[a:b] == [0.0] * (b - a)  # nothing was sampled
    s.text_input.value = 'broken <tool_call>{"name": </tool_call>'
    s.send_button.click()
    assert 'parse error' in s.chat_html.value and s.trajectory.metrics['parse_errors'] == 1
    s.send_button.click()  # empty box
    assert 'type an assistant turn first' in s.message.value
    s.seed_input.value = 5
    s.reset_button.click()
    assert s.driver.turn == 0 and s.driver.seed == 5 and s.message.value == ''
    s.env_dropdown.value = 'qa'  # other tasks, new episode, no tools in the prompt
    assert [o[1] for o in s.task_dropdown.options] == [1]
    assert 'Capital of France' in s.chat_html.value and s.trajectory.env_name == 'qa'
    s.text_input.value = 'Paris'
    s.send_button.click()
    assert (s.trajectory.status, s.trajectory.reward) == ('done', 1.0)


@pytest.mark.timeout(60)
def test_stepper_budgets_and_errors_are_shown_not_raised():
    s = stepper(engines=None)
    assert s.step_button.disabled and s.engine_dropdown.disabled
    s.step()  # called anyway: a message, no exception
    assert 'no engine' in s.message.value and s.driver.turn == 0
    # max_turns: one turn allowed, the turn calls a tool
    s = stepper(max_turns=1)
    s.step_button.click()
    assert s.trajectory.status == 'max_turns' and s.step_button.disabled
    s.driver.engine = None
    with pytest.raises(ValueError, match='has ended'): run_async(s.driver.step('x'))
    # max_length: the budget is spent by the first turn
    n = s.driver.history[0].prompt_len
    s = stepper(config=EpisodeConfig.tiny(max_seq_len=n + 5))
    s.step_button.click()
    t = s.trajectory
    assert t.status == 'max_length' and len(t.input_ids) <= n + 5
    assert 'cut at max tokens' in s.chat_html.value


@pytest.mark.timeout(60)
def test_buttons_work_inside_a_running_event_loop():
    "As in Jupyter, where the kernel's loop runs while callbacks fire."
    import asyncio
    s = stepper()
    async def in_kernel():
        s.step_button.click(); s.back_button.click(); s.step_button.click()
        return s.trajectory.num_turns
    assert asyncio.run(in_kernel()) == 1


@pytest.mark.timeout(120)
def test_viewer_opens_collector_dumps_and_plots(tmp_path):
    coll = TrajectoryCollector(ScriptedEngine(TOK, SCRIPT), TOK, group(),
                               config=CollectConfig.tiny(group_size=2))
    for step in range(2):
        trajs = coll.run([TASK, QA], step=step)
        with DumpWriter(tmp_path, step) as w:
            for t in trajs: w.write(t)
    v = DumpViewer(tmp_path, TOK)
    assert v.env_filter.options == ('all', 'calc', 'qa') and len(v.episodes) == 4
    v.env_filter.value = 'calc'
    t = v.episodes[0]
    assert t.status == 'done' and 'parsed call multiply' in v.view.value
    assert len(token_spans(v.view.value)) == len(t.input_ids)
    rows = dump_metrics(tmp_path)
    assert set(rows) == {0, 1}
    assert rows[0]['metrics/tool_calls'] == 1.5  # calc 2 calls, qa 1 (the script's first turn)
    fig = plot_metrics(tmp_path)
    assert [ax.get_title() for ax in fig.axes][0] == 'reward/mean'
    v.plot_button.click()
    assert v.plot.value[:4] == b'\x89PNG'


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stepper_with_tiny_model_matches_collector():
    from tunix_agentic.models.default import load_default
    from tunix_agentic.engines.jax_engine import JaxEngine
    model, mcfg, tok = load_default()
    pol = JaxEngine(model, mcfg, tok)
    cfg = CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(
        sampling=SamplingParams(max_new_tokens=12)))
    s = EpisodeStepper(group(2), [TASK], tok, engines={'tiny': pol}, config=cfg.episode, seed=3)
    while not s.step_button.disabled: s.step_button.click()
    t = s.trajectory
    assert s.message.value == '' and t.num_turns >= 1 and sum(t.response_mask) > 0
    coll = TrajectoryCollector(pol, tok, group(2), config=cfg)
    ref = run_async(coll.collect(TASK, env_seed=3, sampling_seed=s.driver.sampling_seed))
    assert (t.input_ids, t.response_mask, t.logprobs, t.status) == \
        (ref.input_ids, ref.response_mask, ref.logprobs, ref.status)


class SlowOrBroken(ScriptedEngine):
    "Scripted, but the turn given by `slow_turn` sleeps and `broken_turn` raises."
    def __init__(self, *a, slow_turn=None, broken_turn=None, **kw):
        super().__init__(*a, **kw); self.slow_turn, self.broken_turn = slow_turn, broken_turn
    def generate(self, prompts, params):
        import time
        turn = self.calls
        if turn == self.broken_turn: self.calls += 1; raise RuntimeError('engine exploded')
        if turn == self.slow_turn: time.sleep(8.0)
        return super().generate(prompts, params)


@pytest.mark.timeout(60)
def test_stepper_timeout_and_engine_error_end_the_episode_and_back_undoes_them():
    pol = SlowOrBroken(TOK, SCRIPT, slow_turn=1)
    # wide margins: the first turn must fit in the budget even on a loaded machine (0.3 s did not)
    s = stepper(engines={'p': pol}, config=EpisodeConfig.tiny(episode_timeout_s=4.0))
    s.step_button.click()
    assert s.trajectory.status == 'running'
    s.step_button.click()  # sleeps 8 s > 4 s
    t = s.trajectory
    assert t.status == 'timeout' and 'longer than 4 s' in t.error and s.driver.turn == 2, t.error
    assert '>timeout<' in s.state_html.value and 'longer than 4 s' in s.state_html.value
    assert s.step_button.disabled
    import time; time.sleep(8.5)  # the engine's worker finishes the abandoned request
    s.back_button.click()  # undo the failed turn: live again after turn 1
    assert s.trajectory.status == 'running' and s.driver.turn == 1
    pol.slow_turn, pol.broken_turn = None, pol.calls
    s.step_button.click()
    t = s.trajectory
    assert t.status == 'error' and 'RuntimeError: engine exploded' in t.error
    s.back_button.click(); s.step_button.click(); s.step_button.click()
    assert (s.trajectory.status, s.trajectory.reward) == ('done', 1.0)


@pytest.mark.timeout(60)
def test_stepper_with_env_factories_and_two_engines():
    from tunix_agentic.envs.environments import ToolEnvironment
    envs = {'calc3': lambda task: ToolEnvironment(task, tools=calculator_tools(), reward_fn='gsm8k',
                                                  max_turns=3)}
    wrong = ScriptedEngine(TOK, ['#### 1'])
    s = EpisodeStepper(envs, [TASK], TOK, config=EpisodeConfig.tiny(),
                       engines={'oracle': ScriptedEngine(TOK, SCRIPT), 'wrong': wrong})
    assert s.env_dropdown.options == ('calc3',) and s.driver.max_turns == 3
    s.step_button.click()  # oracle: multiply
    s.engine_dropdown.value = 'wrong'
    s.step_button.click()  # wrong answers at once
    t = s.trajectory
    assert (t.status, t.reward, t.num_turns, wrong.calls) == ('done', 0.0, 2, 1)


@pytest.mark.timeout(60)
def test_stepper_shows_a_failing_reset():
    bad = {'task_type': 'calc', 'prompt_missing': True}
    s = EpisodeStepper(group(), [TASK, bad], TOK, engines={'p': ScriptedEngine(TOK, SCRIPT)},
                       config=EpisodeConfig.tiny())
    s.step_button.click()
    s.task_dropdown.value = 1  # its env cannot start: no question in the task
    assert 'reset failed' in s.message.value and 'question' in s.message.value
    assert s.chat_html.value == '' and s.step_button.disabled and s.send_button.disabled
    s.task_dropdown.value = 0
    assert s.message.value == '' and s.trajectory.num_turns == 0 and not s.step_button.disabled
