"""A `Run` on 8 fake CPU devices (`sharding:` data x fsdp x tensor = 2 x 2 x 2, params FSDP) against
one device, in one 8-device process: SFT losses, max abs param difference after 3 steps, greedy
tokens of the run's engine fed the sharded params, wall times (about 2 minutes on 2 CPU cores).

    JAX_PLATFORMS=cpu .venv/bin/python bench/sharded_run.py
"""
from pathlib import Path
import json, os, subprocess, sys, textwrap

import tempfile

# SFT through `Run.warm_start` (its trainer on the config's mesh), then greedy tokens of the run's
# engine fed the sharded params; each run in this one 8-device process, the first with no mesh
SCRIPT = textwrap.dedent('''
    import json, sys, time, numpy as np, jax
    from flax import nnx
    from tunix_agentic.app.run import Run
    from tunix_agentic.engines.engine import SamplingParams
    assert len(jax.devices()) == 8, jax.devices()
    base = ['sft.n_demos=16', 'sft.short_steps=2', 'sft.full_steps=1', 'sft.batch=8',
            'tasks.n_train=16', 'tasks.n_heldout=2', 'collect.tasks_per_step=2',
            'collect.group_size=4', 'log.progress=false', 'log.tensorboard=false',
            f'log.output_dir={sys.argv[1]}']
    mesh = ['sharding.data=2', 'sharding.fsdp=2', 'sharding.tensor=2', 'sharding.params=fsdp',
            'sharding.min_fsdp_size=256']
    out = {}
    for name, extra in (('one', []), ('mesh', mesh)):
        t = time.perf_counter()
        run = Run.from_config('calculator_quick', overrides=base + extra)
        losses = run.warm_start()
        params = nnx.state(run.model, nnx.Param)
        leaves = jax.tree.leaves(params)
        eng = run.engine
        eng.update_params(nnx.state(run.model), 1)
        ids = run.tok.encode('What is 12 * 34?')
        toks = eng.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=8))
        out[name] = {'losses': losses, 'tokens': list(toks[0].token_ids),
                     'devices': max(len(x.sharding.device_set) for x in leaves),
                     'split': sum(not x.sharding.is_fully_replicated for x in leaves),
                     'wall_s': time.perf_counter() - t}
        out[name + '_params'] = [np.asarray(x) for x in leaves]
    out['max_abs_param_diff'] = max(float(np.abs(a - b).max())
                                    for a, b in zip(out.pop('one_params'), out.pop('mesh_params')))
    print('RESULT', json.dumps(out))
''')


def sharded_vs_one(tmp):
    env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS='--xla_force_host_platform_device_count=8',
               TUNIX_AGENTIC_JAX_CACHE='0')
    p = subprocess.run([sys.executable, '-c', SCRIPT, str(tmp)], env=env, capture_output=True,
                       text=True, timeout=280)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.split('RESULT', 1)[1])


def test_run_on_a_2x2x2_mesh_trains_as_one_device(tmp_path):
    res = sharded_vs_one(tmp_path)
    print({k: v for k, v in res.items()})
    one, mesh = res['one'], res['mesh']
    assert (one['devices'], mesh['devices']) == (1, 8) and mesh['split'] > 0
    assert len(one['losses']) == 3
    for a, b in zip(one['losses'], mesh['losses']): assert abs(a - b) <= 1e-4 * abs(a), (a, b)
    assert res['max_abs_param_diff'] <= 1e-4, res['max_abs_param_diff']  # float32, after 3 AdamW steps
    assert one['tokens'] == mesh['tokens']  # the engine, fed the sharded params, decodes the same


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as d: test_run_on_a_2x2x2_mesh_trains_as_one_device(Path(d))
    print('ok')
