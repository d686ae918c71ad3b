"The demo pipeline: tasks, teacher, diagnosis, and the whole run on its tiny preset (numbers meaningless)."
import json, random, pytest
from tunix_agentic.app.calc_tasks import (COMPOSITIONS, Teacher, make_splits, demonstrations, diagnose,
                                      parse_question)
from tunix_agentic.app.config import load_config
from tunix_agentic.app.demo import format_summary
from tunix_agentic.app.run import Run
from tunix_agentic.app.seeds import run_seeds
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer


def test_splits_cover_every_composition_and_never_overlap():
    train, held = make_splits(3, 500, 50)
    assert not {t['question'] for t in train} & {t['question'] for t in held}
    assert {t['kind'] for t in held} == set(COMPOSITIONS)
    for t in train + held:
        q = parse_question(t['question'])
        assert (q['kind'], q['a'], q['b'], q['c']) == (t['kind'], t['a'], t['b'], t['c'])
        assert int(t['answer']) == int(eval(t['question'][8:-1].replace('/', '//')))


def test_demonstrations_are_real_episodes_with_tool_schemas():
    tok = build_tiny_tokenizer()
    _, held = make_splits(0, 10, 10)
    demos = demonstrations(held, tok)
    assert [d.reward for d in demos] == [1.0] * 10 and all(d.status.value == 'done' for d in demos)
    for d in demos:
        prompt = tok.decode(d.input_ids[:d.prompt_len])
        assert all(f'"name": "{n}"' in prompt for n in ('add', 'subtract', 'multiply', 'divide'))
        resp = tok.decode([i for i, m in zip(d.input_ids, d.response_mask) if m])
        assert resp.count('<|im_end|>') == 3 and resp.count('<tool_call>') == 2
    assert diagnose(demos)['tool_choice'] == 1.0


def test_teacher_error_rates_show_in_the_diagnosis():
    tok = build_tiny_tokenizer()
    train, _ = make_splits(1, 300, 5)
    d = diagnose(demonstrations(train, tok, Teacher(wrong_tool=0.2, wrong_arg=0.15, wrong_answer=0.1)))
    assert 0.72 < d['tool_choice'] < 0.88, d
    assert 0.78 < d['arguments'] < 0.92, d
    assert 0.3 < d['final_answer'] < 0.6, d


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_run_seeds_tiny(tmp_path):
    res = run_seeds(load_config('calculator', 'calculator_quick',
                                overrides=[f'log.output_dir={tmp_path}']), [0, 1])
    assert '| 0 |' in res['table'] and '| 1 |' in res['table'] and 'mean ± sd' in res['table']
    for s in res['runs']:
        assert 0 <= s['heldout_success_before_rl'] <= 1 and 0 <= s['heldout_success_after_rl'] <= 1
        out = tmp_path / f"seed_{s['seed']}"
        assert (out / 'demo.png').stat().st_size > 1000
        saved = json.loads((out / 'summary.json').read_text())
        assert saved['config']['grpo']['steps'] == 1
        c = saved['compilation']  # every program compiled here or loaded from the JAX cache
        assert c['compiled'] + c['loaded'] > 10 and c['compiled_s'] >= 0 and len(c['slowest']) <= 5
        assert list((out / 'grpo' / 'rollouts').glob('step_*.jsonl'))
        assert 'held-out success' in format_summary(s)
    assert (tmp_path / 'seeds.png').stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rerun_prints_the_same_numbers(tmp_path):
    "Same seed, same machine: identical summaries (times aside)."
    quick = lambda d: Run.from_config('calculator', 'calculator_quick',
                                      overrides=[f'log.output_dir={tmp_path / d}', 'seed=5'])
    a, b = quick('a').train(), quick('b').train()
    for k in ('diagnosis_before_rl', 'diagnosis_after_rl', 'grpo_train_success', 'sft_final_loss'):
        assert json.dumps(a[k]) == json.dumps(b[k]), k  # (an untrained run's accuracies can be NaN)
    # the same shapes: the second run of the process compiles nothing the first did not
    assert a['compilation']['compiled'] + a['compilation']['loaded'] > 10
    assert b['compilation']['compiled'] <= a['compilation']['compiled']
