"""LoRA in the learner: B = 0 is the base exactly, merged = base + adapters, adapter checkpoints resume
bit for bit, only adapters in the optimizer, and transformers reads the merged folder back."""
import numpy as np, pytest, jax, jax.numpy as jnp
from flax import nnx
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig, load_hf, save_hf
from tunix_agentic.models.gemma3 import Gemma3, Gemma3Config
from tunix_agentic.models.llama3 import Llama3Config
from tunix_agentic.learn.losses import LossConfig
from tunix_agentic.learn.lora import LoraConfig, tree_bytes
from tunix_agentic.learn.trainer import Trainer, TrainerConfig
from tunix_agentic.learn.batching import make_batch, trajectory_advantages
from test_trainer import _trajs

SHAPE = dict(vocab_size=64, num_layers=2, hidden_size=32, intermediate_size=64, head_dim=16)
FAMILIES = {'qwen2': lambda: Qwen2(ModelConfig.tiny(**SHAPE), rngs=nnx.Rngs(0)),
            'llama3': lambda: Qwen2(Llama3Config.tiny(**SHAPE), rngs=nnx.Rngs(0)),
            'gemma3': lambda: Gemma3(Gemma3Config.tiny(**{**SHAPE, 'num_layers': 3}), rngs=nnx.Rngs(0))}
LORA = LoraConfig(rank=4, alpha=8.0)


def _batch(seed=0):
    return make_batch(_trajs(seed), buckets=(16,), row_multiple=2,
                      advantages=trajectory_advantages(_trajs(seed)))


def _cfg(lora=LORA, **kw):
    return TrainerConfig.tiny(**{'learning_rate': 5e-2, 'lora': lora, **kw})


@pytest.mark.parametrize('family', list(FAMILIES))
def test_b_zero_gives_the_base_logits_exactly(family):
    model, toks = FAMILIES[family](), jnp.array([[5, 9, 2, 7, 11, 3]])
    t = Trainer(model, _cfg())
    assert np.array_equal(np.asarray(t.model(toks)), np.asarray(model(toks)))
    b = _batch()
    assert np.array_equal(t.logprobs(b), Trainer(model, _cfg(lora=None)).logprobs(b))


def test_the_embedded_default_model_takes_adapters():
    from tunix_agentic.models.default import load_default
    model, cfg, _ = load_default()
    t = Trainer(model, _cfg())
    assert len(t.params) == 7 * cfg.num_layers
    toks = jnp.array([[5, 9, 2, 7]])
    assert np.array_equal(np.asarray(t.model(toks)), np.asarray(model(toks)))


def test_merged_weights_give_the_logits_of_base_plus_adapters(tmp_path, family='gemma3'):
    """Merged tolerance: 1e-5 on log-probs (f32; the merge reorders one sum per weight). Qwen2/Llama:
    the transformers test below."""
    t = Trainer(FAMILIES[family](), _cfg(lora=LoraConfig(rank=4, base_dtype='bfloat16')))
    for s in range(3): t.update(_batch(s))
    assert float(abs(jax.tree.leaves(t.params)[1]).max()) > 0   # B moved off zero
    b = _batch(5)
    lora_logp = t.logprobs(b)                       # the adapters merged inside the jitted loss
    m = t.model
    if family == 'gemma3': from tunix_agentic.models.gemma3 import save_hf as save, load_hf as load
    else: save, load = save_hf, load_hf
    save(m, m.cfg, tmp_path)
    merged = Trainer(load(tmp_path)[0], _cfg(lora=None)).logprobs(b)
    np.testing.assert_allclose(merged, lora_logp, atol=1e-5)
    assert not np.allclose(merged, Trainer(FAMILIES[family](), _cfg(lora=None)).logprobs(b))


def test_only_adapters_in_optimizer_state_and_checkpoint(tmp_path):
    model = FAMILIES['qwen2']()
    full, lora = Trainer(model, _cfg(lora=None)), Trainer(model, _cfg())
    ab = tree_bytes(lora.params)
    # AdamW's two moments of each adapter; the step counters are scalars
    moments = [x for x in jax.tree.leaves(lora.opt_state) if x.ndim]
    assert len(moments) == 2 * len(jax.tree.leaves(lora.params)) == 2 * 2 * 7 * 2
    assert tree_bytes(moments) == 2 * ab
    assert tree_bytes(lora.opt_state) == 2 * ab + 4          # + AdamW's int32 step count
    assert tree_bytes(full.opt_state) == 2 * tree_bytes(full.params) + 4
    assert ab < tree_bytes(full.params) / 5                   # rank 4 of 32 wide, no embeddings
    print('optimizer state bytes: full', tree_bytes(full.opt_state), 'lora', tree_bytes(lora.opt_state))
    lora.update(_batch())
    d = lora.save(tmp_path / 'lora')
    full.update(_batch())
    e = full.save(tmp_path / 'full')
    size = lambda p: sum(f.stat().st_size for f in p.rglob('*') if f.is_file())
    print('checkpoint bytes: full', size(e), 'lora', size(d))
    assert size(e) - size(d) > tree_bytes(full.params)   # no copy of the base in the LoRA one


def test_resumed_lora_run_is_bit_identical(tmp_path):
    batches = [_batch(s) for s in range(3)]
    kw = dict(warmup_steps=2, micro_batches=2, loss=LossConfig(kl_coef=0.05))  # KL to B = 0
    a = Trainer(FAMILIES['gemma3'](), _cfg(**kw))
    straight = [a.update(b) for b in batches]
    b1 = Trainer(FAMILIES['gemma3'](), _cfg(**kw))
    for b in batches[:2]: b1.update(b)
    b1.save(tmp_path / 'ckpt')
    b2 = Trainer(FAMILIES['gemma3'](), _cfg(**kw))
    b2.params = jax.tree.map(lambda x: x + 1, b2.params)  # all must come from the checkpoint
    assert b2.restore(tmp_path / 'ckpt') == 2
    assert b2.update(batches[2]) == straight[2]
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b2.params)):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_transformers_reads_the_merged_folder_and_greedy_tokens_match_our_engine(tmp_path):
    "transformers without torch: its Flax Llama (untied head, no rope scaling) on our Llama 3 save."
    transformers = pytest.importorskip('transformers')
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.engines.engine import SamplingParams
    cfg = Llama3Config.tiny(**SHAPE, rope_factor=None, tie_word_embeddings=False,
                            max_position_embeddings=128)  # Flax Llama builds a causal mask this big
    base = Qwen2(cfg, rngs=nnx.Rngs(0))
    t = Trainer(base, _cfg(lora=LoraConfig(rank=4, alpha=32.0), learning_rate=0.1))
    for s in range(3): t.update(_batch(s), 'sft')
    eng = JaxEngine(Qwen2(cfg, rngs=nnx.Rngs(0)), config=JaxEngineConfig.tiny())
    eng.update_params(nnx.state(t.model), t.step)   # what the loop pushes each policy version
    prompts = [[5, 9, 2, 7], [11, 3, 8], [40, 41, 42, 43, 44]]
    ours = [o.token_ids for o in eng.generate(prompts, SamplingParams.greedy(max_new_tokens=8))]
    save_hf(t.model, cfg, tmp_path)
    hf = transformers.FlaxLlamaForCausalLM.from_pretrained(str(tmp_path))
    theirs = [np.asarray(hf.generate(np.array([p]), max_new_tokens=8, do_sample=False,
                                     pad_token_id=0, eos_token_id=cfg.vocab_size).sequences)[0, len(p):].tolist()
              for p in prompts]
    print('greedy tokens (ours == transformers):', ours)
    assert ours == theirs
    base_eng = JaxEngine(Qwen2(cfg, rngs=nnx.Rngs(0)), config=JaxEngineConfig.tiny())
    base_toks = [o.token_ids for o in base_eng.generate(prompts,
                                                          SamplingParams.greedy(max_new_tokens=8))]
    assert base_toks != ours   # the adapters changed what the policy says
