"""Trainer updates donate their buffers (issue 13) without breaking anyone who shares them: the demo's
path (an engine built on the SFT model, a GRPO trainer on the same model, `update_params` after each
step) samples the same tokens as with copies; donated updates compute what `train_step` computes."""
import numpy as np, jax, jax.numpy as jnp
from flax import nnx
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
from tunix_agentic.learn.trainer import Trainer, TrainerConfig, make_optimizer, train_step
from tunix_agentic.core.trajectory import Trajectory

MCFG = ModelConfig.tiny(vocab_size=64, num_layers=2, hidden_size=32, intermediate_size=64, head_dim=16)
SP = SamplingParams(temperature=0.0, max_new_tokens=6)
PROMPTS = [[1, 2, 3, 4], [5, 6, 7]]


def _trajs(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return [Trajectory(input_ids=rng.integers(3, 64, 10).tolist(), response_mask=[0] * 3 + [1] * 7,
                       logprobs=[0.0] * 3 + (-rng.random(7) - 1).tolist(), reward=float(i % 2),
                       group_id='g') for i in range(n)]


def _tokens(engine): return [o.token_ids for o in engine.generate(PROMPTS, SP)]


def _run(sorted_micro: bool):
    "The demo's pattern: SFT trainer -> engine on `sft.model` -> GRPO trainer on `sft.model`."
    cfg = TrainerConfig.tiny(learning_rate=1e-2, micro_batches=2, sort_micro_batches=sorted_micro)
    sft = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), cfg)
    for _ in range(2): sft.update(sft.batch_from(_trajs(), 'sft'), 'sft')
    engine = JaxEngine(sft.model, config=JaxEngineConfig.tiny())
    seen = [_tokens(engine)]
    rl = Trainer(sft.model, cfg)
    for s in range(3):
        rl.update(rl.batch_from(_trajs(seed=s)), 'grpo')
        seen.append(_tokens(engine))  # still the SFT weights (live model) or the last pinned state
        engine.update_params(nnx.state(rl.model), rl.step)
        seen.append(_tokens(engine))
    sft.update(sft.batch_from(_trajs(), 'sft'), 'sft')  # the SFT trainer still works
    return seen, [np.asarray(x) for x in jax.tree.leaves(rl.params)]


def test_shared_engine_path_unaffected():
    for sorted_micro in (False, True):
        seen, params = _run(sorted_micro)
        assert seen[0] == seen[1]  # the engine's live SFT model was not donated away
        for k in range(1, 3):  # an engine pinned to step k's state keeps it through step k+1
            assert seen[2 * k] == seen[2 * k + 1]
        assert all(np.isfinite(p).all() for p in params)


def test_donated_update_equals_train_step():
    "Three updates with donation (params donated from the second on) equal plain `train_step`s."
    cfg = TrainerConfig.tiny(learning_rate=1e-2)
    tr = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), cfg)
    g, p, r = nnx.split(Qwen2(MCFG, rngs=nnx.Rngs(0)), nnx.Param, ...)
    tx = make_optimizer(cfg)
    o = tx.init(p)
    for s in range(3):
        b = tr.batch_from(_trajs(seed=s))
        own = tr._own
        tr.update(b)
        assert own == (s > 0)
        dev = {k: jnp.asarray(b[k]) for k in ('tokens', 'targets', 'positions', 'mask', 'old_logp',
                                              'adv', 'truncated')}
        p, o, _ = train_step(p, o, r, None, dev, graphdef=g, tx=tx, kind='grpo', cfg=cfg)
    for a, b in zip(jax.tree.leaves(tr.params), jax.tree.leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_donate_model_frees_the_callers_arrays():
    model = Qwen2(MCFG, rngs=nnx.Rngs(0))
    leaf = jax.tree.leaves(nnx.state(model, nnx.Param))[0]
    tr = Trainer(model, TrainerConfig.tiny(), donate_model=True)
    tr.update(tr.batch_from(_trajs()))
    assert leaf.is_deleted()
    kept = Qwen2(MCFG, rngs=nnx.Rngs(0))
    leaf = jax.tree.leaves(nnx.state(kept, nnx.Param))[0]
    tr = Trainer(kept, TrainerConfig.tiny())
    tr.update(tr.batch_from(_trajs()))
    assert not leaf.is_deleted()
