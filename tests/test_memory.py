"""Memory-bounded learning (learn.memory): a whole Trainer step with the log-probs in chunks of
tokens, rematerialised layers, or both equals the full-logits step (metrics and each param's change, GRPO
with KL and micro-batches, SFT, a shared prefix, Gemma 3 with a soft-cap); chunking off leaves the
step bit-for-bit unchanged; f32 optimiser state for bf16 params."""
import numpy as np, pytest, jax, jax.numpy as jnp
from flax import nnx
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
from tunix_agentic.models.gemma3 import Gemma3, Gemma3Config
from tunix_agentic.core.trajectory import Trajectory
from tunix_agentic.learn.losses import LossConfig
from tunix_agentic.learn.trainer import Trainer, TrainerConfig

QWEN = ModelConfig.tiny(vocab_size=96, num_layers=2, hidden_size=32, intermediate_size=64,
                        head_dim=16, tie_word_embeddings=False)
GEMMA = Gemma3Config.tiny(final_logit_softcapping=20.0)


def _trajs(seed=0, n=4, prefix=()):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        L = int(rng.integers(6, 14))
        ids = list(prefix) + rng.integers(3, 90, L).tolist()
        k = len(prefix) + 3
        out.append(Trajectory(input_ids=ids, response_mask=[0] * k + [1] * (len(ids) - k),
                              logprobs=[0.0] * k + (-rng.random(len(ids) - k) - 1).tolist(),
                              reward=float(i % 2), group_id=str(i // 2)))
    return out


LR = 1e-2


def _step(model_fn, kind='grpo', trajs=None, **kw):
    "Metrics and the change of every param of one Trainer step."
    cfg = TrainerConfig.tiny(learning_rate=LR, buckets=(16, 32), **kw)
    tr = Trainer(model_fn(), cfg)
    before = [np.asarray(x) for x in jax.tree.leaves(tr.params)]
    m = tr.update(tr.batch_from(trajs or _trajs(), kind), kind)
    return m, [np.asarray(x) - b for x, b in zip(jax.tree.leaves(tr.params), before)]


def _close(a, b, tol=2e-4):
    "Equal metrics and param changes, except where AdamW's first step is ill-conditioned."
    (ma, pa), (mb, pb) = a, b
    assert ma.keys() == mb.keys()
    for k in ma: assert ma[k] == pytest.approx(mb[k], rel=tol, abs=tol), k
    tight = 0
    for x, y in zip(pa, pb):
        # AdamW's first step moves a param by lr * g / (|g| + 1e-8): where |g| is near 1e-8 its
        # size is float rounding of g (a step of 0.79 lr in one run was 0.82 lr in the other), so
        # there it is only bounded; a zero gradient (weight decay alone) and |g| >> 1e-8 (a step of
        # lr) are checked to `tol`
        ill = (np.abs(y) > 1e-3 * LR) & (np.abs(y) < 0.9 * LR)
        np.testing.assert_allclose(x[~ill], y[~ill], atol=tol)
        assert np.abs(x - y).max() <= 2 * LR
        tight += (~ill).sum()
    assert tight > 0.99 * sum(y.size for y in pb)  # nearly every param is checked to `tol`


@pytest.fixture(scope='module')
def grpo_kl_full():
    "The full-logits GRPO step with KL and micro-batches, once for the three variants below."
    qwen = lambda: Qwen2(QWEN, rngs=nnx.Rngs(0))
    return _step(qwen, micro_batches=2, loss=LossConfig(kl_coef=0.1))


@pytest.mark.parametrize('kw', [dict(logit_chunk=5),
                                pytest.param(dict(logit_chunk=7, remat=True), marks=pytest.mark.slow),
                                pytest.param(dict(remat=True), marks=pytest.mark.slow)])
def test_grpo_kl_micro_batches_chunked_equals_full(kw, grpo_kl_full):
    base = dict(micro_batches=2, loss=LossConfig(kl_coef=0.1))
    qwen = lambda: Qwen2(QWEN, rngs=nnx.Rngs(0))
    _close(_step(qwen, **base, **kw), grpo_kl_full)


def test_sft_and_gemma_softcap_chunked_equals_full():
    gemma = lambda: Gemma3(GEMMA, rngs=nnx.Rngs(0))
    _close(_step(gemma, 'sft', logit_chunk=8), _step(gemma, 'sft'))
    _close(_step(gemma, 'grpo', logit_chunk=8, temperature=0.7), _step(gemma, 'grpo', temperature=0.7))


@pytest.mark.slow
def test_shared_prefix_chunked_equals_full():
    qwen = lambda: Qwen2(QWEN, rngs=nnx.Rngs(0))
    trajs = _trajs(1, prefix=range(10, 18))
    _close(_step(qwen, trajs=trajs, shared_prefix=4, logit_chunk=6),
           _step(qwen, trajs=trajs, shared_prefix=4))


def test_chunking_off_is_the_old_path_bit_for_bit():
    "logit_chunk=0 is the default and computes exactly what the full-logits step computes."
    assert TrainerConfig().logit_chunk == 0 and not TrainerConfig().remat
    qwen = lambda: Qwen2(QWEN, rngs=nnx.Rngs(0))
    (ma, pa), (mb, pb) = _step(qwen, logit_chunk=0), _step(qwen)
    assert ma == mb
    assert all(np.array_equal(x, y) for x, y in zip(pa, pb))


def test_f32_optimizer_state_for_bf16_params():
    bf16 = lambda: Qwen2(QWEN.replace(dtype='bfloat16'), rngs=nnx.Rngs(0))
    tr = Trainer(bf16(), TrainerConfig.tiny(opt_state_dtype='float32', logit_chunk=5))
    moments = [x for x in jax.tree.leaves(tr.opt_state) if x.ndim]
    assert moments and all(x.dtype == jnp.float32 for x in moments)
    before = [np.asarray(x, np.float32) for x in jax.tree.leaves(tr.params)]
    m = tr.update(tr.batch_from(_trajs(), 'grpo'), 'grpo')
    assert np.isfinite(m['loss'])
    after = jax.tree.leaves(tr.params)
    assert all(x.dtype == jnp.bfloat16 for x in after)
    assert any(not np.array_equal(b, np.asarray(a, np.float32)) for a, b in zip(after, before))
    with pytest.raises(ValueError, match="opt_state_dtype='f16'"):
        TrainerConfig(opt_state_dtype='f16')
