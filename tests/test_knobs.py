"Every learner knob of the run config reaches the trainer: loss, optimiser and schedule, PPO epochs."
import dataclasses
import jax, jax.numpy as jnp, numpy as np, optax, pytest
from flax import nnx
from tunix_agentic.app.config import load_config, ConfigError
from tunix_agentic.app.compose import trainer_config, loop_config
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.core.trajectory import Trajectory
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.envs.environments import ToolEnvironment
from tunix_agentic.learn.loop import OnlineLoop, LoopConfig
from tunix_agentic.learn.trainer import Trainer, TrainerConfig, make_optimizer
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
from tunix_agentic.rollout.collector import TrajectoryCollector, CollectConfig

TOK = build_tiny_tokenizer()
MCFG = ModelConfig.tiny(vocab_size=len(TOK), num_layers=1, hidden_size=32, intermediate_size=64,
                        head_dim=16)


def cfg(*over):
    return load_config('calculator_quick', overrides=list(over))


@pytest.mark.parametrize('key,value,attr', [
    ('clip_low', 0.1, 0.1), ('clip_high', 0.4, 0.4), ('kl_coef', 0.05, 0.05),
    ('advantage', 'rloo', 'rloo'), ('aggregation', 'seq-mean-token-sum', 'seq-mean-token-sum'),
    ('overlong_filter', 'false', False)])
def test_loss_knobs_reach_the_trainer(key, value, attr):
    tc = trainer_config(cfg(f'grpo.loss.{key}={value}'), 'grpo', 0)
    assert getattr(tc.loss, key) == attr
    assert getattr(Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), tc).cfg.loss, key) == attr


def test_kl_coef_gives_the_trainer_a_reference_policy():
    model = Qwen2(MCFG, rngs=nnx.Rngs(0))
    assert Trainer(model, trainer_config(cfg(), 'grpo', 0)).ref_params is None
    tr = Trainer(model, trainer_config(cfg('grpo.loss.kl_coef=0.1'), 'grpo', 0))
    same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), tr.ref_params, nnx.state(model, nnx.Param))
    assert all(jax.tree.leaves(same))  # the reference is the policy GRPO starts from


@pytest.mark.parametrize('stage', ['sft', 'grpo'])
@pytest.mark.parametrize('key,value', [('learning_rate', 0.01), ('weight_decay', 0.1), ('b1', 0.8),
                                       ('b2', 0.95), ('max_grad_norm', 0.5), ('warmup_steps', 3)])
def test_optimiser_knobs_reach_the_trainer(stage, key, value):
    assert getattr(trainer_config(cfg(f'{stage}.{key}={value}'), stage, 0), key) == value


def _lr_at(tc: TrainerConfig, steps: int) -> list[float]:
    "The learning rate of each of the first `steps` AdamW updates (the size of a unit-gradient one)."
    tx, p = make_optimizer(tc), {'w': jnp.zeros(1)}
    state, out = tx.init(p), []
    for _ in range(steps):
        u, state = tx.update({'w': jnp.full(1, 1e-3)}, state, p)  # Adam: |update| = lr
        out.append(float(-u['w'][0]))
    return out


@pytest.mark.parametrize('stage', ['sft', 'grpo'])
def test_schedule_warms_up_and_decays_over_the_stages_updates(stage):
    over = [f'{stage}.learning_rate=1e-3', f'{stage}.warmup_steps=2', f'{stage}.final_lr=1e-4',
            'sft.short_steps=2', 'sft.full_steps=4', 'grpo.steps=2', 'grpo.epochs=3']
    tc = trainer_config(cfg(*over), stage, 0)
    assert tc.decay_to == (6, 1e-4)  # sft: 2 + 4 updates; grpo: 2 steps x 3 epochs
    lrs = _lr_at(tc, 8)
    np.testing.assert_allclose(lrs[:3], [0, 5e-4, 1e-3], rtol=1e-3)  # linear warmup
    np.testing.assert_allclose(lrs[6:], [1e-4, 1e-4], rtol=1e-3)     # decayed, then constant
    assert all(a >= b - 1e-9 for a, b in zip(lrs[2:], lrs[3:]))       # a cosine down


def test_defaults_are_the_old_hard_coded_learners():
    "Default knobs build exactly the learners `Run` hard-coded before (the demo's results stay)."
    c = load_config('calculator')
    from tunix_agentic.app.compose import BUCKETS
    from tunix_agentic.learn.losses import LossConfig
    assert trainer_config(c, 'grpo', 7) == TrainerConfig(
        learning_rate=2e-4, buckets=BUCKETS, pad_id=7, temperature=1.0, shared_prefix=16,
        micro_batches=8, sort_micro_batches=True, logit_chunk=0,
        loss=LossConfig(advantage='grpo', aggregation='token-mean'))
    assert trainer_config(c, 'sft', 7) == TrainerConfig(
        learning_rate=3e-3, warmup_steps=10, buckets=BUCKETS, pad_id=7, shared_prefix=16,
        logit_chunk=0)


def _trajs(n_groups=2, g=2):
    out = []
    for k in range(n_groups):
        for i in range(g):
            ids = [1, 2, 3, 4 + i, 5 + k, 2]
            out.append(Trajectory(input_ids=ids, response_mask=[0, 0, 0, 1, 1, 1],
                                  logprobs=[0.0, 0.0, 0.0, -1.0, -1.0, -1.0], reward=float(i),
                                  group_id=f'g{k}'))
    return out


def test_default_update_from_is_one_update_bit_identical():
    a = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), TrainerConfig.tiny())
    b = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), TrainerConfig.tiny())
    ma, mb = a.update_from(_trajs()), b.update(b.batch_from(_trajs()), 'grpo')
    assert ma == mb and a.step == b.step == 1
    eq = jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a.params, b.params)
    assert all(jax.tree.leaves(eq))


def test_epochs_and_mini_batches_make_several_updates_on_whole_groups():
    tr = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), TrainerConfig.tiny(epochs=3, mini_batches=2))
    m = tr.update_from(_trajs(n_groups=2))
    assert (tr.step, m['updates']) == (6, 6.0)
    with pytest.raises(ValueError, match='mini_batches=2: expected 1..1'):
        tr.update_from(_trajs(n_groups=1))


def test_ppo_epoch_knobs_reach_the_loop(tmp_path):
    "`grpo.epochs` / `grpo.mini_batches` reach the trainer the loop drives: 4 updates in one step."
    c = cfg('grpo.epochs=2', 'grpo.mini_batches=2', f'log.output_dir={tmp_path}')
    tc = trainer_config(c, 'grpo', 0)
    assert (tc.epochs, tc.mini_batches) == (2, 2)
    script = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>',
              'The answer is 42.']
    env_fn = lambda t: ToolEnvironment(t, tools='calculator', reward_fn='gsm8k', max_turns=4)
    coll = TrajectoryCollector(ScriptedEngine(TOK, script), TOK, env_fn,
                               config=CollectConfig(group_size=2))
    tr = Trainer(Qwen2(MCFG, rngs=nnx.Rngs(0)), TrainerConfig.tiny(
        buckets=(1024,), epochs=tc.epochs, mini_batches=tc.mini_batches))
    tasks = [{'question': f'What is 6 * 7? #{i}', 'answer': '42' if i % 2 else '41'} for i in range(4)]
    loop = OnlineLoop(tr, coll, tasks, dataclasses.replace(
        loop_config(c, tmp_path / 'grpo'), progress=False, tensorboard=False, plot_every=0,
        save_every=0))
    rec = loop.run()[-1]
    assert (tr.step, rec['updates'], rec['policy_version']) == (4, 4.0, 4)


def test_settings_that_would_not_train_as_asked_are_refused():
    with pytest.raises(ConfigError, match='grpo.mode'):
        cfg('grpo.epochs=2', 'grpo.mode=async')
    with pytest.raises(ConfigError, match=r'grpo.mini_batches=3: expected at most collect.tasks_per_step=2'):
        cfg('grpo.mini_batches=3')


def test_prefill_rows_reaches_every_engine_the_run_makes():
    from tunix_agentic.app.compose import make_engine, engine_on_copy
    from tunix_agentic.app.rollouts import rollout_engine
    c = cfg('engine.prefill_rows=2')
    model = Qwen2(MCFG, rngs=nnx.Rngs(0))
    assert rollout_engine(c, model, TOK, None, []).config.prefill_rows == 2  # GRPO's episodes
    assert engine_on_copy(model, TOK, 8, 8, 2).config.prefill_rows == 2
    assert make_engine(model, TOK, 1, 8, 4).config.prefill_rows == 1  # never more than the rows
    with pytest.raises(ConfigError, match='engine.prefill_rows'):
        cfg('engine.prefill_rows=3')
