"""A `Run`'s learner over two `jax.distributed` CPU processes (gloo, one device each, `sharding.data=-1`)
against one process: SFT warm start (2 steps) and one GRPO step whose groups the two processes split
(each collects its share on its own engine, then they exchange them), then an orbax checkpoint
both write into one folder and both restore; max abs param difference, wall times (about 3.5
minutes on 2 CPU cores).

    JAX_PLATFORMS=cpu .venv/bin/python bench/two_processes.py
"""
import json, os, socket, subprocess, sys, textwrap
from pathlib import Path

import numpy as np
import tempfile

# each process: SFT warm start and one GRPO step (this process's share of the groups from its own
# engine, every share exchanged; the update over the mesh of both processes' devices), then a
# checkpoint and its restore
WORKER = textwrap.dedent('''
    import json, sys, time
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if n > 1:
        from tunix_agentic.core.distributed import init_distributed
        init_distributed(f'127.0.0.1:{port}', n, pid)
    import numpy as np, jax
    from tunix_agentic.app.run import Run
    from tunix_agentic.app.compose import build_policy, trainer_config
    from tunix_agentic.core.distributed import host_value
    from tunix_agentic.learn.trainer import Trainer
    t = time.perf_counter()
    over = ['sft.n_demos=16', 'sft.short_steps=2', 'sft.full_steps=0', 'sft.batch=4',
            'tasks.n_train=16', 'tasks.n_heldout=2', 'grpo.micro_batches=1',
            'checkpoint.save_every=0', 'log.progress=false', 'log.tensorboard=false',
            f'log.output_dir={out}/run'] + (['sharding.data=-1'] if n > 1 else [])  # process 1: run/process_1
    run = Run.from_config('calculator_quick', overrides=over)
    losses = run.warm_start()
    rec = run.step()
    run.learner.save(f'{out}/ckpt')
    again = Trainer(build_policy(run.cfg)[0], trainer_config(run.cfg, 'grpo', run.pad_id),
                    mesh=run.mesh)
    step = again.restore(f'{out}/ckpt')
    saved = [host_value(x) for x in jax.tree.leaves(run.learner.params)]
    back = [host_value(x) for x in jax.tree.leaves(again.params)]
    np.savez(f'{out}/params_{pid}.npz', *saved)
    res = {'losses': losses, 'grpo_loss': rec['loss'], 'devices': len(jax.devices()),
           'restored_step': step, 'wall_s': time.perf_counter() - t,
           'restore_diff': max(float(np.abs(a - b).max()) for a, b in zip(saved, back))}
    print('RESULT', json.dumps(res), flush=True)
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch(out: Path, n: int) -> list[dict]:
    "`n` worker processes (one CPU device each) on one job; their results."
    env = dict(os.environ, JAX_PLATFORMS='cpu', TUNIX_AGENTIC_JAX_CACHE='0')
    env.pop('XLA_FLAGS', None)
    port = free_port()
    ps = [subprocess.Popen([sys.executable, '-c', WORKER, str(i), str(n), str(port), str(out)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for i in range(n)]
    outs = [p.communicate(timeout=280) for p in ps]
    for p, (o, e) in zip(ps, outs): assert p.returncode == 0, e[-3000:]
    return [json.loads(o.split('RESULT', 1)[1]) for o, _ in outs]


def params(out: Path, pid: int) -> list[np.ndarray]:
    with np.load(out / f'params_{pid}.npz') as z: return [z[k] for k in sorted(z, key=lambda k: int(k.split('_')[1]))]


def episodes(out: Path, pid: int) -> list:
    run = out / 'run' / (f'process_{pid}' if pid else '')
    rows = [json.loads(l) for f in sorted((run / 'grpo' / 'rollouts').rglob('*.jsonl'))
            for l in f.read_text().splitlines()]
    return [r.get('input_ids') for r in rows]


def test_two_processes_train_as_one(tmp_path):
    one, two = tmp_path / 'one', tmp_path / 'two'
    [r1] = launch(one, 1)
    r2 = launch(two, 2)
    print({'one': r1, 'two': r2})
    assert r1['devices'] == 1 and all(r['devices'] == 2 for r in r2)
    assert episodes(two, 0) == episodes(two, 1) == episodes(one, 0) and episodes(one, 0)
    for r in r2:
        assert np.allclose(r['losses'], r1['losses'], rtol=1e-5)
        assert abs(r['grpo_loss'] - r1['grpo_loss']) <= 1e-5 * max(1.0, abs(r1['grpo_loss']))
        assert (r['restored_step'], r['restore_diff']) == (1, 0.0)
    p1, p20, p21 = params(one, 0), params(two, 0), params(two, 1)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(p1, p20))
    print('max abs param difference, 2 processes vs 1:', diff)
    assert diff <= 1e-4  # float32, 2 AdamW SFT steps and 1 GRPO step
    assert all((a == b).all() for a, b in zip(p20, p21))  # both processes hold the same params


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as d: test_two_processes_train_as_one(Path(d))
    print('ok')
