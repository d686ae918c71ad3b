"The demo pipeline end to end on its tiny preset (numbers meaningless; files and fields checked)."
import json, random, pytest
from tunix_agentic.demo import (run_demo, DemoConfig, make_splits, demonstration, format_summary,
                                demo_turns)
from tunix_agentic.tokenizer import build_tiny_tokenizer
from tunix_agentic.parsers import get_tool_parser

@pytest.mark.parametrize('kind', ['add_mul', 'mul_add'])
def test_splits_and_demonstrations(kind):
    train, held = make_splits(3, 500, 50, kind)
    assert not {t['question'] for t in train} & {t['question'] for t in held}
    tok = build_tiny_tokenizer()
    t = train[0]
    d = demonstration(t, tok)
    # three assistant turns, each ending in <|im_end|>, are the only mask-1 tokens
    resp = tok.decode([i for i, m in zip(d.input_ids, d.response_mask) if m])
    assert resp.count('<|im_end|>') == 3 and resp.count('<tool_call>') == 2
    calls = [get_tool_parser('qwen').parse(x).calls for x in demo_turns(t)[:2]]
    a, b, c = t['a'], t['b'], t['c']
    if kind == 'mul_add':
        assert [x[0].name for x in calls] == ['multiply', 'add'] and int(t['answer']) == a * b + c
        assert calls[1][0].arguments == {'a': a * b, 'b': c}
    else:
        assert [x[0].name for x in calls] == ['add', 'multiply'] and int(t['answer']) == (a + b) * c
        assert calls[1][0].arguments == {'a': a + b, 'b': c}
    assert all(len(x['answer']) == 5 for x in train + held)
    # noisy demonstrations differ in exactly one digit of one assistant turn
    n = demonstration(t, tok, noise=0.999, rng=random.Random(1))
    assert n.input_ids != d.input_ids and len(n.input_ids) == len(d.input_ids)

@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_demo_tiny(tmp_path):
    s = run_demo(DemoConfig.tiny(output_dir=str(tmp_path)))
    assert 0 <= s['heldout_success_before_rl'] <= 1 and 0 <= s['heldout_success_after_rl'] <= 1
    assert (tmp_path / 'demo.png').stat().st_size > 1000
    assert json.loads((tmp_path / 'summary.json').read_text())['config']['rl_steps'] == 1
    assert list((tmp_path / 'grpo' / 'rollouts').glob('step_*.jsonl'))
    assert 'held-out success' in format_summary(s)
