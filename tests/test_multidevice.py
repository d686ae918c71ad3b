"""`sharding:` errors from `train` (one line, exit 2); a tiny learner over two `jax.distributed` CPU processes
against one; and GRPO whose rollouts the two processes split between them against one process collecting all."""
import json, os, socket, subprocess, sys, textwrap
from pathlib import Path

import numpy as np
import pytest

from tunix_agentic.app.cli import main


@pytest.mark.parametrize('over, says', [
    (['sharding.fsdp=3'], 'sharding mesh (data=1, fsdp=3, tensor=1): 3 devices; expected a mesh of the 1 devices here'),
    (['sharding.fsdp=-1', 'sharding.per_device_batch=3'], 'sharding.per_device_batch=3: expected 4'),
])
def test_train_refuses_a_mesh_the_devices_or_batch_do_not_fit(tmp_path, capsys, over, says):
    assert main(['train', 'calculator_quick', *over, f'log.output_dir={tmp_path}']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


# two GRPO updates of a tiny model on fixed episodes (rewards differ, so gradients are not 0),
# then an orbax checkpoint every process writes into one folder, restored by every process;
# beside it, in each process, the same on that process's one device (the reference)
WORKER = textwrap.dedent('''
    import json, sys
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if n > 1:
        from tunix_agentic.core.distributed import init_distributed
        init_distributed(f'127.0.0.1:{port}', n, pid)
    import numpy as np, jax
    from flax import nnx
    from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
    from tunix_agentic.core.trajectory import Trajectory
    from tunix_agentic.core.distributed import host_value
    from tunix_agentic.learn.sharding import make_mesh, ShardingConfig
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    mcfg = ModelConfig.tiny(vocab_size=64, num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    rng = np.random.default_rng(0)
    trajs = [Trajectory(input_ids=rng.integers(3, 64, 10).tolist(), response_mask=[0] * 3 + [1] * 7,
                        logprobs=[0.0] * 3 + (-rng.random(7)).tolist(), reward=float(i % 3 == 0),
                        group_id=str(i // 4)) for i in range(8)]
    def train(mesh, sh):  # two updates; on the mesh a checkpoint, restored into a fresh trainer
        cfg = TrainerConfig.tiny(learning_rate=1e-2, sharding=sh)
        make = lambda: Trainer(Qwen2(mcfg, rngs=nnx.Rngs(0)), cfg, mesh=mesh)
        tr = make()
        losses = [tr.update(tr.batch_from(trajs))['loss'] for _ in range(2)]
        saved = [host_value(x) for x in jax.tree.leaves(tr.params)]
        split = sum(not x.is_fully_addressable for x in jax.tree.leaves(tr.params))
        if mesh is None: return losses, None, split, saved, None  # orbax: no host-local arrays
        tr.save(f'{out}/ckpt')  # in a job of several processes
        again = make()
        step = again.restore(f'{out}/ckpt')
        back = [host_value(x) for x in jax.tree.leaves(again.params)]
        return losses, step, split, saved, max(float(np.abs(a - b).max()) for a, b in zip(saved, back))
    # the learner over both processes (FSDP), and one on this process's device alone
    res = {'mesh': train(make_mesh(data=1, fsdp=-1), ShardingConfig.fsdp(min_fsdp_size=256)),
           'one': train(None, ShardingConfig.no_sharding())}
    for k, (losses, step, split, saved, diff) in res.items():
        np.savez(f'{out}/params_{k}_{pid}.npz', *saved)
        res[k] = {'losses': losses, 'step': step, 'split': split, 'restore_diff': diff}
    print('RESULT', json.dumps({**res, 'devices': len(jax.devices())}))
''')


def launch(out: Path, n: int, worker: str = WORKER) -> list[dict]:
    "`n` worker processes (one CPU device each) in one job; their results."
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
    ps = [subprocess.Popen([sys.executable, '-c', worker, str(i), str(n), str(port), str(out)],
                           env={**env, 'JAX_PLATFORMS': 'cpu'}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for i in range(n)]
    outs = [p.communicate(timeout=200) for p in ps]
    for p, (o, e) in zip(ps, outs): assert p.returncode == 0, e[-3000:]
    return [json.loads(o.split('RESULT', 1)[1]) for o, _ in outs]


def params(path: Path) -> list[np.ndarray]:
    with np.load(path) as z: return [z[f'arr_{i}'] for i in range(len(z.files))]


@pytest.mark.timeout(240)
def test_a_learner_over_two_processes_trains_as_one(tmp_path):
    runs = launch(tmp_path, 2)
    for r in runs:
        one, two = r['one'], r['mesh']
        assert r['devices'] == 2 and two['split'] > 0 and one['split'] == 0
        assert np.allclose(two['losses'], one['losses'], rtol=1e-5, atol=1e-6), r
        assert (two['step'], two['restore_diff']) == (2, 0.0)  # saved by both, restored in both
    p1 = params(tmp_path / 'params_one_0.npz')
    p20, p21 = (params(tmp_path / f'params_mesh_{i}.npz') for i in (0, 1))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(p1, p20))
    print('max abs param difference, 2 processes vs 1 device, after 2 updates:', diff)
    assert 0 < max(float(np.abs(a).max()) for a in p1) and diff <= 1e-5
    assert all((a == b).all() for a, b in zip(p20, p21))  # both processes hold the same params


# two GRPO steps of 4 groups of 2 episodes from a tiny JaxEngine (rewards: the parity of the sampled
# text's length, so groups differ and gradients are not 0), each process collecting its share of
# the groups (`SplitCollector`) for a learner over both; then, on process 0, the same as one
# process that collects every group itself (the reference)
ROLLOUT_WORKER = textwrap.dedent('''
    import json, sys
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    from tunix_agentic.core.distributed import init_distributed
    init_distributed(f'127.0.0.1:{port}', n, pid)
    import numpy as np, jax
    from flax import nnx
    from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
    from tunix_agentic.core.distributed import host_value, local_module
    from tunix_agentic.learn.sharding import make_mesh, ShardingConfig
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.loop import OnlineLoop, LoopConfig
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    from tunix_agentic.app.compose import make_engine
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.envs.environments import ToolEnvironment
    from tunix_agentic.rollout.collector import TrajectoryCollector, CollectConfig
    from tunix_agentic.rollout.dumps import load_step
    from tunix_agentic.rollout.episode_config import EpisodeConfig
    from tunix_agentic.rollout.split import SplitCollector
    tok = build_tiny_tokenizer()
    mcfg = ModelConfig.tiny(vocab_size=len(tok), num_layers=1, hidden_size=32, intermediate_size=64,
                            head_dim=16)
    tasks = [{'question': f'What is {a} + {a}?', 'answer': str(2 * a)} for a in range(8)]
    def grpo(mesh, sh, split):
        tr = Trainer(Qwen2(mcfg, rngs=nnx.Rngs(0)),
                     TrainerConfig.tiny(learning_rate=1e-2, buckets=(64,), sharding=sh), mesh=mesh)
        ecfg = EpisodeConfig.tiny(max_seq_len=64, sampling=SamplingParams(max_new_tokens=8))
        coll = TrajectoryCollector(make_engine(local_module(tr.model), tok, 8, 8), tok,
                                   lambda t: ToolEnvironment(t, tools=None, max_turns=1),
                                   config=CollectConfig(episode=ecfg, group_size=2, seed=3),
                                   final_reward_fn=lambda t, tj: len(tj.steps[-1].model_response) % 2)
        d = f'{out}/{"split" if split else "one"}_{pid}'
        loop = OnlineLoop(tr, SplitCollector(coll) if split else coll, tasks,
                          LoopConfig.tiny(steps=2, tasks_per_step=4, output_dir=d, plot_every=0,
                                          tensorboard=False))
        losses = [r['loss'] for r in loop.run()]
        ps = [host_value(x) for x in jax.tree.leaves(tr.params)]
        np.savez(f'{d}/params.npz', *ps)
        init = jax.tree.leaves(nnx.state(Qwen2(mcfg, rngs=nnx.Rngs(0)), nnx.Param))
        return {'losses': losses, 'ran': sorted(coll.states),  # the episodes this process played
                'moved': max(float(np.abs(a - np.asarray(b)).max()) for a, b in zip(ps, init)),
                'episodes': [[t.input_ids for t in load_step(f'{d}/rollouts', s)] for s in (0, 1)]}
    res = {'split': grpo(make_mesh(data=-1, fsdp=1), ShardingConfig(), True),
           'devices': len(jax.devices())}
    if pid == 0: res['one'] = grpo(None, ShardingConfig.no_sharding(), False)
    print('RESULT', json.dumps(res))
''')


@pytest.mark.timeout(240)
def test_two_processes_collect_their_shares_and_train_as_one(tmp_path):
    r0, r1 = launch(tmp_path, 2, ROLLOUT_WORKER)
    one = r0['one']
    assert r0['devices'] == r1['devices'] == 2
    ids = lambda groups: [f's{s}-g{s * 4 + g:06d}.{k}' for s in (0, 1) for g in groups for k in (0, 1)]
    # each process played only its share of each step's groups; together, one process's episodes
    assert (r0['split']['ran'], r1['split']['ran']) == (ids([0, 1]), ids([2, 3]))
    assert one['ran'] == sorted(ids([0, 1, 2, 3]))
    # ... with the same seeds (token for token), and both trained on all of them
    assert r0['split']['episodes'] == r1['split']['episodes'] == one['episodes']
    assert len(one['episodes'][0]) == 8 and len({tuple(e) for e in one['episodes'][0]}) > 1
    assert np.allclose(r0['split']['losses'], one['losses'], rtol=1e-5, atol=1e-6)
    assert one['moved'] > 1e-3  # the updates changed the params: the comparison below is not vacuous
    p1 = params(tmp_path / 'one_0' / 'params.npz')
    p20, p21 = (params(tmp_path / f'split_{i}' / 'params.npz') for i in (0, 1))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(p1, p20))
    print('2 GRPO steps, rollouts split over 2 processes vs 1 process: max abs param difference', diff)
    assert diff <= 1e-5  # float32; measured 0.0
    assert all((a == b).all() for a, b in zip(p20, p21))  # both processes hold the same params
