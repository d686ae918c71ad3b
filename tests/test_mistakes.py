"""A user's mistakes, table-driven: each ends in one line on stderr and exit code 2, no traceback.

All cases run in one fresh interpreter (`_DRIVER`), in table order, each through the CLI's own
`main(argv)`; the driver records the exit code, stderr and whether JAX had been imported by then.
The cases that need the model (a tokenizer, the learner's loss registry) come last, so the others
are checked to fail before JAX loads. `Run.train` is replaced by a stub in the driver: a case that
got past every check would say so instead of training.
"""
import json, os, subprocess, sys, textwrap
from pathlib import Path

import pytest

Q = 'calculator_quick'
JSONL = '{"question": "1+1?", "answer": "2"}\n'


def _files(d: Path) -> dict[str, str]:
    "The files the cases point at, written under `d`; {placeholder: path}."
    w = lambda name, text: (d / name).write_text(text) and str(d / name)
    (d / 'hf').mkdir()
    (d / 'llama').mkdir()
    (d / 'llama' / 'config.json').write_text('{"model_type": "llama"}')
    (d / 'folder').mkdir()
    (d / 'other_run' / 'grpo' / 'checkpoints').mkdir(parents=True)
    (d / 'other_run' / 'config.yaml').write_text(
        "base: calculator_quick\nsft: {short_steps: 5}\n".replace('base: ', 'base: '))
    return {
        'BAD_YAML': w('bad.yaml', 'grpo: {steps: 2\nsft: {}\n'),
        'TAB_YAML': w('tab.yaml', 'grpo:\n\tsteps: 2\n'),
        'LIST_YAML': w('list.yaml', '- a\n- b\n'),
        'BINARY_YAML': str(d / 'bin.yaml'),
        'FOLDER': str(d / 'folder'),
        'MALFORMED': w('malformed.jsonl', JSONL + '{"question": oops}\n' + JSONL),
        'NOFIELD': w('nofield.jsonl', '{"q": "1+1?", "a": "2"}\n' * 5),
        'SMALL': w('small.jsonl', JSONL * 3),
        'HELD2': w('held2.jsonl', JSONL * 2),
        'NOT_GGUF': w('model.gguf', 'not a gguf file'),
        'HF_EMPTY': str(d / 'hf'),
        'LLAMA': str(d / 'llama'),
        'A_FILE': w('a_file', 'x'),
        'PLUGIN': w('plug.py', 'def score(task, action): return 1.0\nTOOLS = []\n'),
        'RAISES': w('raises.py', '1 / 0\n'),
        'OTHER_RUN': str(d / 'other_run'),
    }


# (case, argv, the message's substring); argv words may name the files above
CASES = [
    ('unknown key', ['train', Q, 'grpo.stepz=1'], "unknown config key 'grpo.stepz'; valid keys here"),
    ('value of the wrong type', ['train', Q, 'grpo.steps=abc'], 'bad value for grpo.steps'),
    ('unknown GRPO mode', ['train', Q, 'grpo.mode=fast'], "grpo.mode='fast': expected 'sync' or 'async'"),
    ('override without =', ['train', Q, 'steps'], "override 'steps': expected key=value"),
    ('config file missing', ['train', 'no_such.yaml'], "config 'no_such.yaml' not found"),
    ('override in place of a config', ['train', 'grpo.steps=2'], 'looks like an override'),
    ('YAML syntax error', ['train', 'BAD_YAML'], 'bad.yaml:2: not valid YAML'),
    ('YAML with a tab', ['train', 'TAB_YAML'], 'tab.yaml:2: not valid YAML'),
    ('YAML that is a list', ['train', 'LIST_YAML'], 'expected a YAML mapping'),
    ('config not text', ['train', 'BINARY_YAML'], 'not a text (YAML) file'),
    ('config is a folder', ['train', 'FOLDER'], 'is a folder; expected a YAML file'),
    ('old key episode.timeout_s', ['train', Q, 'episode.timeout_s=5'],
     "'episode.timeout_s' is now 'episode.episode_timeout_s'"),
    ('old key env.toolset', ['train', Q, 'env.toolset=calculator'], "is now 'env.tools'"),
    ('old key grpo.lr', ['train', Q, 'grpo.lr=1e-4'], "is now 'grpo.learning_rate'"),
    ('old key episode.max_turns', ['train', Q, 'episode.max_turns=3'], "is now 'env.max_turns'"),
    ('unknown dtype', ['train', Q, 'model.dtype=fp8'], "model.dtype='fp8': expected None or one of"),
    ('unknown model source', ['train', Q, 'model.source=onnx'], "model.source='onnx'"),
    ('hf model without a path', ['train', Q, 'model.source=hf'], 'model.path=None: expected a path'),
    ('model path missing', ['train', Q, 'model.source=hf', 'model.path=/no/model'],
     "model.path='/no/model': no such file or folder"),
    ('file that is not GGUF', ['train', Q, 'model.source=gguf', 'model.path=NOT_GGUF'],
     "not a GGUF file (it starts b'not '"),
    ('HF folder without config.json', ['train', Q, 'model.source=hf', 'model.path=HF_EMPTY'],
     'expected an HF model folder with config.json'),
    ('model family of another checkpoint', ['train', Q, 'model.source=hf', 'model.path=LLAMA'],
     "the checkpoint is model_type='llama'; expected model.family='llama3'"),
    ('output folder is a file', ['train', Q, 'log.output_dir=A_FILE'], 'is a file; expected a folder'),
    ('output folder cannot be made', ['train', Q, 'log.output_dir=A_FILE/run'], 'cannot be made'),
    ('demo output is a file', ['demo', '--quick', '--out', 'A_FILE'], 'is a file; expected a folder'),
    ('jsonl without a path', ['train', Q, 'tasks.source=jsonl', 'sft.n_demos=0'], 'tasks.path=None'),
    ('task file missing', ['train', Q, 'tasks.source=jsonl', 'tasks.path=/no/tasks.jsonl',
                           'sft.n_demos=0'], "tasks.path='/no/tasks.jsonl': no such file"),
    ('malformed task line', ['train', Q, 'tasks.source=jsonl', 'tasks.path=MALFORMED', 'sft.n_demos=0',
                             'tasks.n_heldout=1'], 'malformed.jsonl: line 2 is not a valid JSON object'),
    ('task file without the field', ['train', Q, 'tasks.source=jsonl', 'tasks.path=NOFIELD',
                                     'sft.n_demos=0', 'tasks.n_heldout=1'], "has no field 'question'"),
    ('held-out larger than the file', ['train', Q, 'tasks.source=jsonl', 'tasks.path=SMALL',
                                       'sft.n_demos=0', 'tasks.n_heldout=60'],
     'tasks.n_heldout=60: expected fewer than the 3 rows'),
    ('held-out larger than its file', ['train', Q, 'tasks.source=jsonl', 'tasks.path=SMALL',
                                       'tasks.heldout_path=HELD2', 'sft.n_demos=0', 'tasks.n_heldout=5'],
     'expected at most the 2 rows of tasks.heldout_path'),
    ('no training problems', ['train', Q, 'tasks.n_train=0'], 'tasks.n_train=0: expected an integer >= 1'),
    ('unknown task source', ['train', Q, 'tasks.source=csv', 'sft.n_demos=0'], "unknown task source 'csv'"),
    ('group of one: nothing trains', ['train', Q, 'collect.group_size=1'],
     'collect.group_size=1: expected at least 2 with grpo.steps > 0'),
    ('more demonstrations than tasks', ['train', Q, 'sft.n_demos=100'],
     'sft.n_demos=100: expected at most tasks.n_train=40'),
    ('code teacher on calculator tasks', ['train', Q, 'sft.teacher=code'], "sft.teacher='code'"),
    ('temperature 0 for RL', ['train', Q, 'episode.sampling.temperature=0'],
     'episode.sampling.temperature=0.0: expected a number > 0'),
    ('no turns', ['train', Q, 'env.max_turns=0'], 'env.max_turns=0: expected an integer >= 1'),
    ('no sequence budget', ['train', Q, 'episode.max_seq_len=0'], 'episode.max_seq_len=0'),
    ('learning rate 0', ['train', Q, 'grpo.learning_rate=0'], 'grpo.learning_rate=0.0: expected a number'),
    ('final lr above the peak', ['train', Q, 'sft.final_lr=1.0'], 'sft.final_lr=1.0: expected None or'),
    ('beta of 1', ['train', Q, 'grpo.b2=1'], 'grpo.b2=1.0: expected a number in [0, 1)'),
    ('clip range above 1', ['train', Q, 'grpo.loss.clip_low=2'], 'grpo.loss.clip_low=2.0'),
    ('negative KL weight', ['train', Q, 'grpo.loss.kl_coef=-0.1'], 'grpo.loss.kl_coef=-0.1'),
    ('mini-batches beyond the groups', ['train', Q, 'grpo.mini_batches=5'],
     'grpo.mini_batches=5: expected at most collect.tasks_per_step=2'),
    ('PPO epochs in async mode', ['train', Q, 'grpo.epochs=2', 'grpo.mode=async'], "grpo.mode='async'"),
    ('engine without a weight route', ['train', Q, 'engine.kind=http'],
     "engine.kind='http': train cannot push its weights"),
    ('sglang-jax with a worker pool', ['train', Q, 'engine.kind=sglang', 'workers.kind=processes'],
     "workers.kind='processes': expected 'none' with engine.kind='sglang'"),
    ('unknown engine', ['train', Q, 'engine.kind=vllm'], "engine.kind='vllm': expected one of"),
    ('unknown worker kind', ['train', Q, 'workers.kind=mpi'], "workers.kind='mpi'"),
    ('unknown toolset', ['train', Q, 'env.tools=abacus'], "env.tools: unknown toolset 'abacus'"),
    ('unknown reward', ['train', Q, 'env.reward_fn=close'], "env.reward_fn: unknown reward 'close'"),
    ('unknown parser', ['train', Q, 'agent.parser_name=xml'], "agent.parser_name: unknown tool parser 'xml'"),
    ('unknown environment', ['train', Q, 'env.env=chess'], "env.env: unknown env 'chess'; known envs"),
    ('plugin module missing', ['train', Q, 'env.reward_fn=no_such_pkg_zz.rewards:score'],
     "importing 'no_such_pkg_zz.rewards' failed (ModuleNotFoundError"),
    ('plugin attribute missing', ['train', Q, 'env.reward_fn=PLUGIN:nope'], "has no 'nope'"),
    ('plugin file missing', ['train', Q, 'env.tools=/no/tools.py:TOOLS'], "no such file '/no/tools.py'"),
    ('plugin of the wrong kind', ['train', Q, 'env.env=PLUGIN:score'], 'expected a BaseEnv subclass'),
    ('plugin that fails on import', ['train', Q, 'agent.parser_name=RAISES:P'],
     '(ZeroDivisionError: division by zero)'),
    ('folder of another run', ['train', Q, 'log.output_dir=OTHER_RUN'],
     'holds a checkpoint of another run (sft.short_steps: 5 there, 2 here)'),
    ('eval under another policy', ['eval', Q, 'model.num_heads=4', '--checkpoint', 'OTHER_RUN'],
     'is of a run with another policy (model.num_heads: 8 there, 4 here)'),
    ('eval of a missing checkpoint', ['eval', Q, '--checkpoint', '/no/ckpt'], "checkpoint '/no/ckpt' not found"),
    ('config of an unknown preset', ['config', 'nope'], "config 'nope' not found"),
    ('bad --jobs', ['demo', '--jobs', '0'], "argument --jobs: expected an integer >= 1, got '0'"),
    # these need the learner's registries or the tokenizer: after JAX has loaded
    ('unknown advantage estimator', ['train', Q, 'grpo.loss.advantage=ppo'],
     "grpo.loss: unknown advantage estimator 'ppo'"),
    ('unknown aggregation', ['train', Q, 'grpo.loss.aggregation=sum'], "grpo.loss: aggregation='sum'"),
    ('pad token not in the tokenizer', ['train', Q, 'chat.pad_token=<nope>'],
     "chat.pad_token='<nope>': not in the tokenizer"),
    ('sequence budget below the prompt', ['train', Q, 'episode.max_seq_len=64'],
     'episode.max_seq_len=64: expected more than the'),
]
AFTER_JAX = 4  # the last cases may load JAX; every other one fails before it

_DRIVER = textwrap.dedent('''
    import contextlib, importlib.abc, importlib.util, io, json, sys
    from tunix_agentic.app.cli import main
    def no_training(self): raise RuntimeError('got past every check: would train')
    class StubTraining(importlib.abc.MetaPathFinder):
        "When `app.run` is imported (it imports JAX), its `Run.train` is the stub."
        def find_spec(self, name, path, target=None):
            if name != 'tunix_agentic.app.run': return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run_module = spec.loader.exec_module
            def exec_module(m):
                run_module(m)
                m.Run.train = no_training
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, StubTraining())
    out = []
    for case, argv in json.loads(sys.argv[1]):
        err, printed = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(printed):
            try: rc = main(argv)
            except SystemExit as e: rc = e.code
            except BaseException as e: rc = f'{type(e).__name__}: {e}'
        out.append({'case': case, 'rc': rc, 'stderr': err.getvalue(), 'stdout': printed.getvalue(),
                    'jax': 'jax' in sys.modules})
    print(json.dumps(out))
''')


def run_cases(d: Path) -> dict[str, dict]:
    "Every case through the CLI in one fresh interpreter under `d`: {case: rc, stderr, stdout, jax}."
    files = _files(d)
    Path(files['BINARY_YAML']).write_bytes(b'\xff\xfe\x00\x01grpo')
    sub = lambda w: next((w.replace(k, v) for k, v in files.items() if k in w), w)
    cases = [(case, [sub(w) for w in argv]) for case, argv, _ in CASES]
    r = subprocess.run([sys.executable, '-c', _DRIVER, json.dumps(cases)], capture_output=True,
                       text=True, timeout=600, cwd=d,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'TUNIX_AGENTIC_HUGEPAGES': '0'})
    assert r.returncode == 0, r.stderr[-3000:]
    return {x['case']: x for x in json.loads(r.stdout.splitlines()[-1])}


@pytest.fixture(scope='module')
def results(tmp_path_factory): return run_cases(tmp_path_factory.mktemp('mistakes'))


def test_the_table_is_long_enough():
    assert len(CASES) >= 40 and len({c for c, _, _ in CASES}) == len(CASES)


@pytest.mark.timeout(600)
@pytest.mark.parametrize('i', range(len(CASES)), ids=[c for c, _, _ in CASES])
def test_mistake_is_one_line_and_exit_2(results, i):
    case, argv, want = CASES[i]
    got = results[case]
    assert got['rc'] == 2, got
    lines = got['stderr'].strip().splitlines()
    assert len(lines) == 1, got['stderr']
    assert want in lines[0], lines[0]
    if i < len(CASES) - AFTER_JAX: assert not got['jax'], f'{case}: JAX loaded before the error'


def test_another_runs_folder_is_refused_before_the_resolved_config_is_printed(results):
    "The refusal is the first thing the user sees: nothing on stdout (no 90-line config) before it."
    got = results['folder of another run']
    assert (got['rc'], got['stdout']) == (2, ''), got


if __name__ == '__main__':  # `python tests/test_mistakes.py`: the table, as a user sees it
    import tempfile
    with tempfile.TemporaryDirectory() as d: got = run_cases(Path(d))
    print('| # | mistake | what the user sees (stderr) | exit | JAX loaded |\n|---|---|---|---|---|')
    for i, (case, _, _) in enumerate(CASES, 1):
        g, line = got[case], got[case]['stderr'].strip().replace('|', '\\|')
        print(f"| {i} | {case} | {line[:160]}{'...' if len(line) > 160 else ''} | {g['rc']} | "
              f"{'yes' if g['jax'] else 'no'} |")
