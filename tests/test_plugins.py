"Plugins by import path: a reward, a toolset and a task source of the user's own, trained from the CLI."
import json, os, subprocess, sys, textwrap
from pathlib import Path

import pytest

PLUGIN = textwrap.dedent('''
    import os
    from pathlib import Path
    from tunix_agentic.core.trajectory import RewardOutput
    from tunix_agentic.tools.builtin import calculator_tools

    def quarter(task, action):
        "Every answer is worth 0.25: the run's reward says this function was used."
        return RewardOutput(0.25)

    def tools():
        Path(os.environ['TOOLS_MARK']).write_text('used')  # each environment asks for its tools
        return calculator_tools()

    def tasks(cfg):
        rows = [{'question': f'What is {i} + 1?', 'answer': f'#### {i + 1}'} for i in range(12)]
        return rows[:8], rows[8:]
''')


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_with_a_reward_toolset_and_task_source_by_import_path(tmp_path):
    (tmp_path / 'my_plugins.py').write_text(PLUGIN)
    out, mark = tmp_path / 'run', tmp_path / 'tools_mark'
    args = ['calculator_quick', 'sft.n_demos=0', 'tasks.n_heldout=2', 'eval.n_greedy=1',
            'env.reward_fn=my_plugins:quarter',            # a module on the path
            f'env.tools={tmp_path}/my_plugins.py:tools',    # a file
            'tasks.source=my_plugins:tasks', 'log.tensorboard=false', 'checkpoint.save_hf=false',
            f'log.output_dir={out}']
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'TOOLS_MARK': str(mark),
           'PYTHONPATH': os.pathsep.join([str(tmp_path), os.environ.get('PYTHONPATH', '')])}
    r = subprocess.run([sys.executable, '-m', 'tunix_agentic', 'train', *args], capture_output=True,
                       text=True, timeout=590, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads((out / 'grpo' / 'metrics.jsonl').read_text().splitlines()[-1])
    assert rec['reward/mean'] == rec['reward/min'] == 0.25   # our reward scored every episode
    assert mark.read_text() == 'used'                         # our toolset built the tools
    s = json.loads((out / 'summary.json').read_text())
    assert s['config']['tasks']['source'] == 'my_plugins:tasks'
    heldout = [json.loads(l) for p in sorted((out / 'eval').glob('*.jsonl')) for l in p.open()]
    assert {'What is 8 + 1?', 'What is 9 + 1?'} <= {m['content'] for h in heldout
                                                     for m in h['messages'] if m['role'] == 'user'}
