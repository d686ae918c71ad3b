"""The console script as a user runs it: a real subprocess of the installed entry point."""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / 'tunix-agentic'


def run(*args, timeout=120):
    exe = [str(BIN)] if BIN.exists() else [sys.executable, '-m', 'tunix_agentic.app.cli']
    return subprocess.run([*exe, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def test_help_lists_subcommands():
    r = run('--help')
    assert r.returncode == 0, r.stderr
    for cmd in ('train', 'eval', 'demo', 'episode', 'build-default', 'info'): assert cmd in r.stdout


def test_unknown_subcommand_is_a_clear_error():
    r = run('trian')
    assert r.returncode == 2 and "invalid choice: 'trian'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.timeout(180)
def test_episode_prints_tokens_and_masks():
    r = run('episode', '--a', '12', '--b', '34', '--c', '56')
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'status=done reward=1 turns=3' in r.stdout
    assert 'The answer is 464.<|im_end|>' in r.stdout
    mask_rows = [l.split()[0] for l in r.stdout.splitlines() if l[:4].strip() in ('0', '1') and len(l.split()) > 2]
    assert mask_rows == ['0', '1', '0', '1', '0', '1'], mask_rows


@pytest.fixture(scope='module')
def quick_demo(tmp_path_factory):
    "`tunix-agentic demo --quick` run once for the tests below: (its folder, the finished process)."
    out = tmp_path_factory.mktemp('quick') / 'demo'
    return out, run('demo', '--quick', '--out', str(out), timeout=590)


@pytest.fixture(scope='module')
def quick_train(tmp_path_factory):
    """`train calculator_quick` run once: (its folder, the process, summary.json as it finished);
    only `test_a_run_folder_resumes_only_its_own_run` changes the folder afterwards."""
    out = tmp_path_factory.mktemp('quick') / 'run'
    r = run('train', 'calculator_quick', f'log.output_dir={out}', timeout=450)
    summary = (out / 'summary.json').read_text() if (out / 'summary.json').exists() else None
    return out, r, summary


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_quick_writes_its_outputs(quick_demo):
    "`tunix-agentic demo --quick` runs the whole pipeline (SFT, GRPO, eval) and leaves plot, metrics, dumps."
    out, r = quick_demo
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / 'demo.png').stat().st_size > 1000
    assert (out / 'summary.json').exists()
    assert list((out / 'grpo' / 'rollouts').glob('step_*.jsonl'))
    assert (out / 'grpo' / 'metrics.jsonl').read_text().strip()


def test_python_dash_m_runs_the_command():
    "`python -m tunix_agentic` is the `tunix-agentic` command (issue 10: it had no `__main__`)."
    r = subprocess.run([sys.executable, '-m', 'tunix_agentic', '--help'], capture_output=True,
                       text=True, timeout=120, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert r.returncode == 0, r.stderr
    assert r.stdout == run('--help').stdout


def test_version():
    r = run('--version')
    assert r.returncode == 0 and r.stdout.startswith('tunix-agentic 0.'), r.stdout + r.stderr


BAD = [  # (arguments, what the one line on stderr says); {file} is an existing file
    (['demo', '--jobs', '0'], "argument --jobs: expected an integer >= 1, got '0'"),
    (['demo', '--out', '{file}'], 'is a file; expected a folder'),
    (['serve-rollout', '--port', '99999'], "argument --port: expected an integer in 0..65535"),
    (['serve-rollout', '--max-concurrent-rollouts', '0'], 'expected an integer >= 1'),
    (['train', 'calculator', 'grpo.stepz=1'],
     "unknown config key 'grpo.stepz'; valid keys here: b1, b2, epochs, final_lr"),
    (['train', 'calculator', 'grpo.steps=abc'], 'bad value for grpo.steps'),
    (['train', 'calculator', 'grpo.mode=fast'], "grpo.mode='fast': expected 'sync' or 'async'"),
    (['train', 'calculator', 'steps'], "override 'steps': expected key=value"),
    (['train', 'no_such.yaml'], "config 'no_such.yaml' not found"),
    (['train', 'grpo.steps=2'], 'looks like an override; give a CONFIG first'),
    (['train', 'calculator', 'log.output_dir={file}'], 'is a file; expected a folder'),
    (['eval', 'calculator', '--checkpoint', '/no/such/dir'], "checkpoint '/no/such/dir' not found"),
]


@pytest.mark.parametrize('args,says', BAD, ids=[' '.join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path, args, says):
    f = tmp_path / 'a_file'; f.write_text('x')
    r = run(*[a.format(file=f) for a in args])
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def test_jobs_with_one_seed_warns(tmp_path):
    f = tmp_path / 'a_file'; f.write_text('x')  # stops right after the warning
    r = run('demo', '--jobs', '2', '--out', str(f))
    assert '--jobs 2 has no effect with one seed' in r.stderr and r.returncode == 2, r.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_preset_prints_the_demos_summary(quick_demo, quick_train):
    "`demo --quick` is `train calculator_quick`: the same summary.json, times and paths aside."
    (out_a, a), (_, b, summary_b) = quick_demo, quick_train
    assert a.returncode == 0 and b.returncode == 0, a.stderr[-2000:] + b.stderr[-2000:]
    assert b.stdout.startswith('# resolved config') and 'grpo:' in b.stdout
    # times, paths, and what XLA compiled or loaded (that depends on the JAX cache's state) aside
    strip = lambda s: {k: v for k, v in s.items()
                       if k not in ('times', 'paths', 'config', 'compilation')}
    assert json.dumps(strip(json.loads((out_a / 'summary.json').read_text()))) == \
        json.dumps(strip(json.loads(summary_b)))
    assert 'nan%' not in a.stdout


HOLD = ('import sys, time; from tunix_agentic.app.preflight import lock_run_folder; '
        'lock_run_folder(sys.argv[1]); print("held", flush=True); time.sleep(600)')


@pytest.mark.timeout(300)
def test_a_second_train_into_a_held_run_folder_is_one_line_exit_2(tmp_path):
    "Two `train`s into one folder would overwrite each other's checkpoints: the second one stops."
    out = tmp_path / 'run'
    holder = subprocess.Popen([sys.executable, '-c', HOLD, str(out)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    try:
        assert holder.stdout.readline().strip() == 'held'
        r = run('train', 'calculator_quick', f'log.output_dir={out}')
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.splitlines() == [
            f"tunix-agentic train: error: run folder '{out}' is in use by another process (pid "
            f"{holder.pid}); wait for it to end or choose another log.output_dir"], r.stderr
        assert not (out / 'config.yaml').exists()   # it stopped before writing anything
    finally:
        holder.kill(); holder.wait()
    # the kernel dropped the killed holder's lock: the folder is free again, no stale lock file
    again = subprocess.Popen([sys.executable, '-c', HOLD, str(out)], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    try: assert again.stdout.readline().strip() == 'held'
    finally: again.kill(); again.wait()


_SHOW_ENV_THEN_TRAIN = ("import os, sys; print(os.environ.get('GLIBC_TUNABLES')); "
                        "from tunix_agentic.app.cli import main; "
                        "sys.argv = ['tunix-agentic', 'train', 'no_such.yaml']; sys.exit(main())")


def test_train_restarts_once_with_huge_pages():
    "glibc reads `GLIBC_TUNABLES` at start: `train` execs itself once more with the huge-page one."
    from tunix_agentic.app.cli import HUGE_PAGES, huge_page_env, _thp_mode
    import platform
    mine = ('GLIBC_TUNABLES', 'TUNIX_AGENTIC_HUGEPAGES')
    env = {k: v for k, v in os.environ.items() if k not in mine}
    if huge_page_env(env, _thp_mode(), platform.libc_ver()[0]) is None:
        pytest.skip(f'no glibc or transparent huge pages off here ({_thp_mode()!r})')
    go = lambda **kw: subprocess.run([sys.executable, '-c', _SHOW_ENV_THEN_TRAIN],
                                     capture_output=True, text=True, timeout=120,
                                     env={**env, 'JAX_PLATFORMS': 'cpu', **kw})
    r = go()
    assert r.returncode == 2 and r.stdout.split() == ['None', HUGE_PAGES], (r.stdout, r.stderr)
    assert "config 'no_such.yaml' not found" in r.stderr
    r = go(TUNIX_AGENTIC_HUGEPAGES='0')  # turned off: one run, no restart
    assert r.returncode == 2 and r.stdout.split() == ['None'], (r.stdout, r.stderr)


@pytest.mark.timeout(400)
def test_a_run_folder_resumes_only_its_own_run(quick_train):
    "`demo --quick` then `demo` into one folder ran GRPO from the quick checkpoint (0% -> 0%, no error)."
    out, first, _ = quick_train
    assert first.returncode == 0, first.stderr[-2000:]
    pairs = json.loads((out / 'summary.json').read_text())['heldout_pairs']  # issue 40
    assert pairs['sampled']['problems'] == 5 and '  lift ' in first.stdout, pairs
    saved = (out / 'config.yaml').read_text()
    other = run('train', 'calculator_quick', f'log.output_dir={out}', 'sft.short_steps=3',
                'collect.group_size=4')
    assert other.returncode == 2, other.stderr[-2000:]
    assert other.stderr.splitlines() == [
        f"tunix-agentic train: error: '{out}' holds a checkpoint of another run (collect.group_size: "
        f"2 there, 4 here, sft.short_steps: 2 there, 3 here); choose another log.output_dir, remove "
        f"the folder, or resume it as it was: tunix-agentic train {out}"], other.stderr
    assert (out / 'config.yaml').read_text() == saved  # refused before it wrote anything
    ev = json.loads((out / 'eval_before.json').read_text())  # as an older run wrote it: no
    del ev['sampled']['solved']  # sampled outcomes per problem (the greedy ones are read back)
    (out / 'eval_before.json').write_text(json.dumps(ev))
    longer = run('train', str(out), 'grpo.steps=2', timeout=300)  # the same run, trained longer
    assert longer.returncode == 0, longer.stderr[-2000:]
    pairs = json.loads((out / 'summary.json').read_text())['heldout_pairs']
    assert pairs['sampled'] is None and pairs['greedy']['problems'] == len(ev['greedy']['solved'])
    assert '  lift n/a: no per-problem outcomes kept; greedy ' in longer.stdout
    assert json.loads((out / 'summary.json').read_text())['config']['grpo']['steps'] == 2
    from tunix_agentic.app.config import load_config  # `demo --quick` stays out of `demo`'s folder
    assert (load_config('calculator_quick').log.output_dir, load_config('calculator').log.output_dir) \
        == ('runs/demo_quick', 'runs/demo')


def test_config_prints_every_key_with_type_default_and_meaning():
    "`tunix-agentic config [PRESET]`: the schema, generated from the config classes, one key a line."
    from dataclasses import fields, is_dataclass
    from tunix_agentic.app.config import RunConfig
    def leaves(obj, prefix=''):
        for f in fields(obj):
            v = getattr(obj, f.name)
            yield from leaves(v, f'{prefix}{f.name}.') if is_dataclass(v) else [prefix + f.name]
    r = run('config')
    assert r.returncode == 0, r.stderr
    lines = {l.split(':')[0]: l for l in r.stdout.splitlines()}
    for key in leaves(RunConfig()):
        line = lines[key]  # every leaf key is printed ...
        meaning = line.split('  # ', 1)[1]
        assert meaning.strip(), f'{key} has no meaning: {line!r}'  # ... with one line of meaning
    assert lines['grpo.loss.kl_coef'] == ('grpo.loss.kl_coef: float = 0.0  # weight of the k3 KL to '
                                          'the policy GRPO starts from (0: none)')
    q = run('config', 'calculator_quick')  # a preset's values
    assert 'grpo.steps: int = 1  #' in q.stdout and 'sft.n_demos: int = 16  #' in q.stdout
    bad = run('config', 'nope')
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
