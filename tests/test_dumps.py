"""Rollout dumps under a real crash: kill -9 a writing subprocess, then read every complete line."""
import json, os, signal, subprocess, sys, textwrap, time, warnings
from pathlib import Path

import pytest

from tunix_agentic.rollout.dumps import DumpWriter, dump_path, iter_dump, load_dump, load_step, list_dump_steps
from tunix_agentic.core.trajectory import Trajectory, Step, Action

WRITER = textwrap.dedent('''
    import sys, time
    from tunix_agentic.rollout.dumps import DumpWriter
    from tunix_agentic.core.trajectory import Trajectory, Step, Action
    out, pad, chunked = sys.argv[1], int(sys.argv[2]), sys.argv[3] == '1'
    w = DumpWriter(out, 7)
    if chunked:  # a slow file system: each line reaches the file in 4 KiB pieces, so a kill can tear it
        class Chunked:
            def __init__(self, f): self.f, self.closed = f, False
            def write(self, s):
                for k in range(0, len(s), 4096):
                    self.f.write(s[k:k + 4096]); self.f.flush(); time.sleep(0.0005)
            def flush(self): self.f.flush()
            def fileno(self): return self.f.fileno()
            def close(self): self.f.close(); self.closed = True
        w._f = Chunked(w._f)
    i = 0
    while True:  # until killed
        n = 64 + (i * 7919) % pad  # varying sizes, some lines far bigger than the 8 KiB buffer
        t = Trajectory(task={'question': 'x' * n}, episode_id=f'e{i}', reward=float(i % 2), status='done',
                       steps=[Step(model_response='#### 1', action=Action('#### 1'))],
                       input_ids=list(range(n)), response_mask=[i % 2] * n, logprobs=[-0.5] * n)
        w.write(t)
        i += 1
''')


def _expected_ok(rec: dict, i: int):
    assert rec['episode_id'] == f'e{i}'
    n = len(rec['input_ids'])
    assert rec['task']['question'] == 'x' * n and rec['logprobs'] == [-0.5] * n


def _kill_after(tmp_path: Path, min_bytes: int, pad: int, chunked: bool = False) -> Path:
    path = dump_path(tmp_path, 7)
    p = subprocess.Popen([sys.executable, '-c', WRITER, str(tmp_path), str(pad), str(int(chunked))],
                         env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size >= min_bytes: break
            if p.poll() is not None: raise AssertionError(f'writer exited early with {p.returncode}')
            time.sleep(0.005)
        else: raise AssertionError('writer produced too little within 60 s')
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize('min_bytes,pad,chunked', [(200_000, 5_000, False), (3_000_000, 300_000, False),
                                                  (3_000_000, 300_000, True)])
def test_kill9_leaves_every_complete_line_readable(tmp_path, min_bytes, pad, chunked):
    path = _kill_after(tmp_path, min_bytes, pad, chunked)
    data = path.read_bytes()
    complete = data.count(b'\n')
    torn = not data.endswith(b'\n')
    assert complete > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        recs = load_dump(path, as_dicts=True)
    assert len(recs) == complete  # every complete line, nothing more
    for i, r in enumerate(recs): _expected_ok(r, i)
    if torn:  # the torn tail is reported, never raised
        assert any('torn last line' in str(w.message) for w in caught)
    trajs = load_step(tmp_path, 7)
    assert all(isinstance(t, Trajectory) for t in trajs) and len(trajs) == complete
    # appending after the crash (next run, same step) keeps every line readable
    with DumpWriter(tmp_path, 7) as w: w.write(Trajectory(episode_id='after'))
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no torn line any more
        again = load_dump(path, as_dicts=True)
    assert [r['episode_id'] for r in again] == [f'e{i}' for i in range(complete)] + ['after']


def test_torn_last_line_is_skipped_with_warning(tmp_path):
    t = Trajectory(episode_id='a', input_ids=[1], response_mask=[1], logprobs=[-0.1])
    with DumpWriter(tmp_path, 0) as w: w.write(t); w.write(t)
    full = dump_path(tmp_path, 0).read_bytes()
    for cut in (2, 10, len(full) // 2 - 3):  # cut inside the second line (1 only drops its newline)
        p = tmp_path / f'step_{cut:06d}.jsonl'
        p.write_bytes(full[:len(full) - cut])
        with pytest.warns(RuntimeWarning, match='torn last line'):
            assert load_dump(p) == [t]
    assert 0 in list_dump_steps(tmp_path)


def test_corrupt_middle_line_is_an_error(tmp_path):
    p = tmp_path / 'step_000000.jsonl'
    p.write_text('{"episode_id": "a"}\n{"episode_id": \n{"episode_id": "b"}\n')
    with pytest.raises(ValueError, match='line 2'):
        list(iter_dump(p))


def test_writer_roundtrips_a_full_trajectory(tmp_path):
    t = Trajectory(task={'question': 'q', 'answer': '#### 1'}, episode_id='g0.1', group_id='g0',
                   status='max_length', reward=0.5, policy_version=3,
                   steps=[Step(model_response='hi', action=Action('hi'), reward=0.5, mc_return=0.5)],
                   messages=[{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'hi'}],
                   input_ids=[1, 2, 3], response_mask=[0, 1, 1], logprobs=[0.0, -0.25, -0.5],
                   metrics={'turns': 1, 'drift': 0})
    with DumpWriter(tmp_path, 12, fsync=True) as w: w.write(t)
    assert load_step(tmp_path, 12) == [t]
    assert json.loads(dump_path(tmp_path, 12).read_text())['status'] == 'max_length'


@pytest.mark.parametrize('depth', [1000, 1400])
def test_deeply_nested_tool_call_reaches_the_dump(tmp_path, depth):
    """Regression: a call nested ~1,000-1,490 levels deep parsed, then `to_dict` raised RecursionError.
    The parser now refuses nesting past MAX_JSON_DEPTH with a parse error (fed back to the model) that
    the dump keeps; a call built with deeper arguments still dumps, cut at the cap."""
    from tunix_agentic.chat.parsers import QwenToolParser
    from tunix_agentic.core.trajectory import MAX_JSON_DEPTH, ToolCall
    args = '{"a": ' * depth + '1' + '}' * depth
    text = '<tool_call>{"name": "f", "arguments": ' + args + '}</tool_call>'
    refused = QwenToolParser().parse(text).to_action(text)
    assert refused.tool_calls == [] and 'nested deeper than' in refused.parse_errors[0]
    deep = 1
    for _ in range(depth): deep = {'a': deep}
    action = Action(tool_calls=[ToolCall('f', deep)], parse_errors=refused.parse_errors)
    traj = Trajectory(steps=[Step(action=action, model_response=text)], episode_id='deep',
                      messages=[{'role': 'assistant', 'content': text,
                                 'tool_calls': [c.to_openai() for c in action.tool_calls]}])
    with DumpWriter(tmp_path, 0) as w: w.write(traj)
    (back,) = load_dump(dump_path(tmp_path, 0))
    assert back.episode_id == 'deep' and back.steps[0].model_response == text
    assert back.steps[0].action.parse_errors == refused.parse_errors
    node = back.steps[0].action.tool_calls[0].arguments
    for _ in range(MAX_JSON_DEPTH): node = node['a'] if isinstance(node, dict) else node
    assert node.startswith('<dict nested more than')
