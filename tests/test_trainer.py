"Trainer: batching, resume equality (GRPO + KL + micro-batches), SFT learning."
import numpy as np, pytest, jax
from flax import nnx
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
from tunix_agentic.core.trajectory import Trajectory
from tunix_agentic.learn.losses import LossConfig
from tunix_agentic.learn.trainer import Trainer, TrainerConfig
from tunix_agentic.learn.batching import make_batch, trajectory_advantages

MCFG = ModelConfig.tiny(vocab_size=64, num_layers=2, hidden_size=32, intermediate_size=64, head_dim=16)

def _trajs(seed=0, n=8):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        L = int(rng.integers(6, 14))
        out.append(Trajectory(input_ids=rng.integers(3, 64, L).tolist(),
                              response_mask=[0] * 3 + [1] * (L - 3),
                              logprobs=[0.0] * 3 + (-rng.random(L - 3) - 1).tolist(),
                              reward=float(i % 3 == 0), group_id=str(i // 4)))
    return out

def _cfg():
    return TrainerConfig.tiny(learning_rate=5e-3, micro_batches=2, warmup_steps=2,
                              loss=LossConfig(kl_coef=0.05, aggregation='seq-mean-token-mean'))

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_equals_uninterrupted(tmp_path):
    batches = [make_batch(_trajs(s), buckets=(16,), row_multiple=2,
                          advantages=trajectory_advantages(_trajs(s))) for s in range(4)]
    a = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), _cfg())
    straight = [a.update(b)['loss'] for b in batches]
    b1 = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), _cfg())
    for b in batches[:3]: b1.update(b)
    b1.save(tmp_path / 'ckpt')
    # a fresh trainer from a different init: everything must come from the checkpoint
    b2 = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(1)), _cfg())
    assert b2.restore(tmp_path / 'ckpt') == 3
    resumed = b2.update(batches[3])['loss']
    print('straight step-4 loss', straight[3], 'resumed', resumed)
    assert resumed == pytest.approx(straight[3], abs=1e-7)

def test_batch_shapes_and_advantages():
    ts = _trajs()
    b = make_batch(ts, buckets=(8, 16), row_multiple=3)
    assert b['tokens'].shape == (9, 16) and b['mask'][8].sum() == 0
    adv = trajectory_advantages(ts, 'rloo')
    # group 0 rewards [1,0,0,1] -> rloo [2/3,-2/3,-2/3,2/3]
    np.testing.assert_allclose(adv[:4], [2 / 3, -2 / 3, -2 / 3, 2 / 3], atol=1e-6)
    with pytest.raises(ValueError, match='at least one'): make_batch([])

@pytest.mark.timeout(300)
def test_sft_learns_masked_tokens_only():
    t = Trajectory(input_ids=[1, 2, 3, 9, 9, 9, 4, 5], response_mask=[0, 0, 0, 0, 0, 0, 1, 1],
                   logprobs=[0.0] * 8)
    tr = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), TrainerConfig.tiny(learning_rate=1e-2))
    b = tr.batch_from([t] * 2, 'sft')
    assert b['mask'][0].tolist()[:8] == [0, 0, 0, 0, 0, 1, 1, 0]
    ls = [tr.update(b, 'sft')['loss'] for _ in range(10)]
    assert ls[-1] < 0.2 * ls[0]
    lp = tr.logprobs(b)[0]
    assert lp[5] > np.log(0.5) and lp[6] > np.log(0.5)   # learned 4 after 9, 5 after 4


# ---- the heavier checks of nbs/10b_trainer.ipynb, marked `#| slow` there to keep the notebook under 30 s
MCFG1 = ModelConfig.tiny(vocab_size=64, num_layers=1, hidden_size=32, intermediate_size=64, head_dim=16)

def _traj(ids, mask, reward=0., gid='g'):
    return Trajectory(input_ids=ids, response_mask=mask, logprobs=[0.0] * len(ids), reward=reward, group_id=gid)

@pytest.mark.timeout(300)
def test_length_sorted_micro_batches_equal_the_full_batch():
    from tunix_agentic.learn.batching import length_sorted_micro_batches
    mixed = [_traj(list(range(1, n + 1)), [0, 0] + [1] * (n - 2), reward=float(n % 2), gid=str(n % 3))
             for n in (3, 9, 4, 5, 12, 3, 7, 6)]
    full = Trainer(Qwen2(MCFG1, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(4, 8, 16)))
    srt = Trainer(Qwen2(MCFG1, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(4, 8, 16), micro_batches=4,
                                                                   sort_micro_batches=True))
    mb = srt.batch_from(mixed, 'grpo')
    assert [g['tokens'].shape for g in length_sorted_micro_batches(mb, 4, (4, 8, 16))] == \
        [(2, 4), (2, 8), (2, 8), (2, 16)]  # short rows train at their own bucket
    for kind in ('sft', 'grpo'):
        a, b = full.update(full.batch_from(mixed, kind), kind), srt.update(srt.batch_from(mixed, kind), kind)
        for k in ('loss', 'grad_norm', 'tokens'): assert b[k] == pytest.approx(a[k], abs=1e-5), (kind, k)
    np.testing.assert_allclose(jax.tree.leaves(full.params)[0], jax.tree.leaves(srt.params)[0], atol=1e-5)

@pytest.mark.timeout(300)
def test_shared_prefix_equals_full_rows():
    rows = [_traj([1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 0, 0, 0, 0, 1, 1, 1, 1], 1.0, 'q'),
            _traj([1, 2, 3, 4, 5, 6, 9, 9], [0, 0, 0, 0, 0, 1, 1, 1], 0.0, 'q')]
    t_full = Trainer(Qwen2(MCFG1, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(4, 8, 16), micro_batches=2))
    t_pre = Trainer(Qwen2(MCFG1, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(4, 8, 16), shared_prefix=2,
                                                                     micro_batches=2))
    bf, bp = t_full.batch_from(rows), t_pre.batch_from(rows)
    assert bp['prefix'].tolist() == [[1, 2, 3, 4]]
    lf, lpre = t_full.logprobs(bf), t_pre.logprobs(bp)
    np.testing.assert_allclose((lf * bf['mask']).sum(1), (lpre * bp['mask']).sum(1), atol=1e-4)
    assert t_pre.update(bp, 'sft')['loss'] == pytest.approx(t_full.update(bf, 'sft')['loss'], abs=1e-4)
