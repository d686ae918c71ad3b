"""Headless tests of tunix_agentic.widgets: renderings, metrics plot, dump viewer, episode stepper.

Buttons are pressed with `button.click()`; checks read widget state and the rendered HTML."""
import html, json, logging, re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
matplotlib.use('Agg')
import pytest

from tunix_agentic.types import Action, Step, ToolCall, Trajectory
from tunix_agentic import widgets as wd


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
        if tag == 'span' and self._cur is not None: self.spans.append(tuple(self._cur)); self._cur = None

def token_spans(h: str) -> list[tuple[dict, str]]:
    p = _Spans(); p.feed(h); return p.spans

EVIL = '<script>alert("x")</script>&\'"'

def make_traj(reward=1.0, status='done', env='calc', eid='e0', group='g0', n_prompt=3) -> Trajectory:
    msgs = [{'role': 'system', 'content': 'calc'}, {'role': 'user', 'content': EVIL},
            {'role': 'assistant', 'content': '', 'tool_calls': [ToolCall('add', {'a': 1, 'b': EVIL}).to_openai()]},
            {'role': 'tool', 'name': 'add', 'content': 'Error: ' + EVIL},
            {'role': 'assistant', 'content': 'done ' + EVIL}]
    mask = [0] * n_prompt + [1, 1, 0, 0, 1, 1]
    return Trajectory(task={'question': EVIL}, messages=msgs, reward=reward, status=status, env_name=env,
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
    h = wd.render_trajectory(make_traj())
    assert '<script>' not in h and 'alert("x")' not in h
    assert h.count('&lt;script&gt;') >= 6  # user msg, call args, tool error, answer, parse error, task
    assert 'bad &lt;script&gt;' in h  # parse errors shown on their step


def test_token_strip_matches_mask_and_hover():
    t = make_traj()
    spans = token_spans(wd.render_tokens(t.input_ids, t.response_mask, t.logprobs))
    assert len(spans) == len(t.input_ids)
    for j, (a, text) in enumerate(spans):
        m = t.response_mask[j]
        assert f'ta-mask{m}' in a['class']
        assert wd.MASK_COLORS[m] in a['style']
        assert a['title'].startswith(f'#{j} id={t.input_ids[j]} mask={m}')
        assert a['title'].endswith(f'logprob={t.logprobs[j]:.4f}')


def test_token_strip_escapes_token_text_and_title():
    class Tok:
        def decode(self, ids): return {0: '<im>', 1: '"q"', 2: '\n'}.get(ids[0], 'x')
    h = wd.render_tokens([0, 1, 2], [0, 1, 1], [0, -1, -2], tokenizer=Tok())
    spans = token_spans(h)
    assert [s[1] for s in spans] == ['<im>', '"q"', '↵\n']  # what the browser shows
    assert "text='<im>'" in spans[0][0]['title'] and '<im>' not in h  # escaped in the source
    assert 'logprob=-2.0000' in spans[2][0]['title']


def test_chat_pairs_steps_with_assistant_turns():
    t = make_traj(reward=0.75)
    h = wd.render_chat(t.messages, t.steps)
    assert h.count('class="ta-step"') == 2
    assert h.index('parse error') < h.index('tool · add') < h.index('reward 0.75')


def test_render_trajectory_from_dict_and_header():
    t = make_traj(status='max_turns', reward=0.0)
    h = wd.render_trajectory(t.to_dict())
    assert h == wd.render_trajectory(t)
    assert '>max_turns<' in h and 'env calc' in h and 'episode e0' in h
    assert 'time/model_s' in h


# ---------------------------------------------------------------- dumps, metrics, plot
def test_load_dump_dir_steps_and_torn_line(tmp_path, caplog):
    write_dump(tmp_path, 10, [make_traj(eid='a')])
    write_dump(tmp_path, 2, [make_traj(eid='b'), make_traj(eid='c')], torn='{"task": {"q')
    (tmp_path / 'extra.jsonl').write_text(json.dumps(make_traj(eid='d').to_dict()) + '\n')
    with caplog.at_level(logging.WARNING):
        d = wd.load_dump_dir(tmp_path)
    assert list(d) == [2, 10, 11]
    assert [t.episode_id for t in d[2]] == ['b', 'c']
    assert 'skipped unreadable line' in caplog.text


def test_metrics_plot_curves(tmp_path):
    for s in range(4):
        write_dump(tmp_path, s, [make_traj(reward=float(e < s), status='done' if e < s else 'error',
                                           eid=f'{s}{e}') for e in range(4)])
    rows = wd.dump_metrics(tmp_path)
    assert [rows[s]['reward/mean'] for s in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert rows[0].get('status/done') is None and rows[3]['status/error'] == 0.25
    fig = wd.plot_metrics(tmp_path, keys=['reward/mean', 'status/done', 'metrics/time/model_s'])
    from matplotlib.figure import Figure
    assert isinstance(fig, Figure)
    ys = [list(ax.lines[0].get_ydata()) for ax in fig.axes]
    assert ys[0] == [0.0, 0.25, 0.5, 0.75]
    assert ys[1][0] != ys[1][0] and ys[1][1:] == [0.25, 0.5, 0.75]  # missing -> NaN gap
    assert ys[2] == [0.5] * 4
    fig.savefig(tmp_path / 'm.png')
    assert (tmp_path / 'm.png').stat().st_size > 1000


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
    v = wd.DumpViewer(dump_dir)
    assert v.step == 5 and v.step_label.value == 'step 5 (2/2)'
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
    v = wd.DumpViewer(dump_dir)
    v.step_slider.value = 0
    write_dump(dump_dir, 9, [make_traj(reward=2.0, eid='new')])
    v.refresh_button.click()
    assert v.step == 0  # stays where the user was
    assert v.reward_filter.max == 2.0 and v.reward_filter.value == (0.0, 2.0)
    v.step_slider.value = v.step_slider.max
    assert v.step == 9 and 'new' in v.view.value
    assert v.plot.value == b''
    v.plot_button.click()
    assert v.plot.value[:4] == b'\x89PNG'


def test_dump_viewer_empty_folder(tmp_path):
    v = wd.DumpViewer(tmp_path)
    assert v.step is None and v.episodes == [] and 'no dumps yet' in v.view.value
    v.next_button.click(); v.refresh_button.click()
    write_dump(tmp_path, 1, [make_traj(eid='first')])
    v.refresh_button.click()
    assert v.step == 1 and 'first' in v.view.value
    with pytest.raises(FileNotFoundError, match='missing'): wd.DumpViewer(tmp_path / 'missing')
