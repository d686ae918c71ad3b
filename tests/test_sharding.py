"Sharded vs unsharded learner step on 8 fake CPU devices (run in a subprocess so XLA_FLAGS stays local)."
import os, subprocess, sys, textwrap, json
import pytest

SCRIPT = textwrap.dedent('''
    import json, numpy as np, jax
    from flax import nnx
    from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
    from tunix_agentic.core.trajectory import Trajectory
    from tunix_agentic.learn.sharding import make_mesh, ShardingConfig, tree_specs
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.losses import LossConfig
    assert len(jax.devices()) == 8, jax.devices()
    mcfg = ModelConfig.tiny(vocab_size=64, num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    rng = np.random.default_rng(0)
    trajs = []
    for i in range(8):
        n = int(rng.integers(6, 12))
        ids = rng.integers(3, 64, n).tolist()
        mask = [0] * 3 + [1] * (n - 3)
        lp = [0.0] * 3 + (-rng.random(n - 3)).tolist()
        trajs.append(Trajectory(input_ids=ids, response_mask=mask, logprobs=lp,
                                reward=[1., 0, 0, 1, 0, 1, 1, 0][i], group_id=str(i // 4)))
    out = {}
    for name, mesh, sh in [('single', None, ShardingConfig.no_sharding()),
                           ('fsdp8', make_mesh(data=2, fsdp=4), ShardingConfig.fsdp(min_fsdp_size=256))]:
        cfg = TrainerConfig.tiny(learning_rate=1e-2, sharding=sh, loss=LossConfig(kl_coef=0.1))
        tr = Trainer(Qwen2(mcfg, rngs=nnx.Rngs(0)), cfg, mesh=mesh)
        if mesh is not None:
            shards = [len(x.sharding.device_set) for x in jax.tree.leaves(tr.params)]
            nspec = sum(1 for x in jax.tree.leaves(tr.params) if x.sharding.spec != jax.sharding.PartitionSpec())
            out['n_sharded_params'] = nspec
        b = tr.batch_from(trajs)
        m1 = tr.update(b); m2 = tr.update(b)
        out[name] = [m1['loss'], m1['grad_norm'], m2['loss'], m2['kl'] if 'kl' in m2 else 0.0]
    print('RESULT', json.dumps(out))
''')

@pytest.mark.timeout(300)
def test_fsdp_step_equals_unsharded():
    env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS='--xla_force_host_platform_device_count=8')
    p = subprocess.run([sys.executable, '-c', SCRIPT], env=env, capture_output=True, text=True,
                       timeout=280)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.split('RESULT', 1)[1])
    print(res)
    assert res['n_sharded_params'] > 0
    for a, b in zip(res['single'], res['fsdp8']):
        assert a != 0.0
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (res['single'], res['fsdp8'])
