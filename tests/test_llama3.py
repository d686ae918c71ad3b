"""Llama 3 (`llama3`: Qwen2's decoder without biases, with the llama3 rope scaling): the scaled
frequencies against transformers' formula, parity with the independent float64 numpy forward of
`test_models`, `JaxEngine` sampling and a GRPO step on it, and sglang-jax serving it (greedy tokens,
logprobs, weight hot-swap), including the rope fix sglang-jax 0.1.0rc0 needs."""
import json, math, time
import numpy as np
import pytest
import jax, jax.numpy as jnp
from flax import nnx

from tunix_agentic.models.llama3 import Llama3Config, llama3_inv_freq, load_hf
from tunix_agentic.models.qwen2 import Qwen2, save_hf
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
from test_models import f64_parity, np_forward, _randomize


def hf_inv_freq(hf: dict) -> np.ndarray:
    """transformers' `_compute_llama3_parameters` (src/transformers/modeling_rope_utils.py, v4.57.6)
    transcribed to float64 numpy from its HF config dict: two `where`s and a smooth blend."""
    hd, rs = hf['head_dim'], hf['rope_scaling']
    inv_freq = 1.0 / hf['rope_theta'] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    if rs is None: return inv_freq
    factor, low, high = rs['factor'], rs['low_freq_factor'], rs['high_freq_factor']
    old_context_len = rs['original_max_position_embeddings']
    low_freq_wavelen, high_freq_wavelen = old_context_len / low, old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


PUBLISHED = {  # rope fields of the meta-llama config.json files (3.2-1B/3B: factor 32; 3.1-8B: 8)
    'llama3.2-1b': dict(head_dim=64, rope_theta=500000.0, rope_scaling=dict(factor=32.0,
        low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)),
    'llama3.1-8b': dict(head_dim=128, rope_theta=500000.0, rope_scaling=dict(factor=8.0,
        low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)),
}


@pytest.mark.parametrize('name', list(PUBLISHED))
def test_inv_freq_matches_transformers_formula(name):
    hf = PUBLISHED[name]
    rs = hf['rope_scaling']
    ours = llama3_inv_freq(hf['head_dim'], hf['rope_theta'], rs['factor'], rs['low_freq_factor'],
                           rs['high_freq_factor'], rs['original_max_position_embeddings'])
    want = hf_inv_freq(hf)
    np.testing.assert_allclose(ours, want, rtol=1e-6)
    plain = hf_inv_freq({**hf, 'rope_scaling': None})
    kept, slowed = np.isclose(want, plain), np.isclose(want, plain / rs['factor'])
    assert kept.sum() and slowed.sum() and (~kept & ~slowed).sum()   # all three branches occur
    # and through the config, as the attention asks for it
    cfg = Llama3Config.from_hf_config({**Llama3Config.tiny(head_dim=hf['head_dim']).to_hf_config(),
                                       'rope_theta': hf['rope_theta'],
                                       'rope_scaling': {**rs, 'rope_type': 'llama3'}})
    np.testing.assert_array_equal(cfg.rope_inv_freq(), ours)


VARIANTS = {  # each crosses the original context, so every branch of the scaling is exercised
    'llama3.2_tied': dict(),
    'llama3.1_untied_gqa': dict(tie_word_embeddings=False, num_heads=4, num_kv_heads=2, head_dim=32,
                                num_layers=3, rope_theta=500_000.0, rope_original_max_position=64),
    'llama3.0_unscaled_bias': dict(rope_factor=None, qkv_bias=True, o_bias=True),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize('variant', list(VARIANTS))
def test_parity_f64_numpy(tmp_path, variant):
    cfg = Llama3Config.tiny(vocab_size=300, **VARIANTS[variant])
    toks = np.random.default_rng(2).integers(0, 300, 48)
    err, ref, ours, sd, hf = f64_parity(cfg, tmp_path, toks, load_hf, hf_inv_freq)
    assert ('lm_head.weight' in sd) != cfg.tie_word_embeddings
    assert any(k.endswith('q_proj.bias') for k in sd) == cfg.qkv_bias
    assert err < 1e-4, f'{variant}: max |f32 - f64| = {err}'
    if cfg.rope_factor is not None:  # the test tells scaled from unscaled rope apart
        unscaled = np.abs(ours - np_forward(sd, hf, toks)).max()
        assert unscaled > 100 * max(err, 1e-6), (unscaled, err)
    print(f'{variant}: max |f32 logits - f64 numpy| = {err:.2e} (logit std {ref.std():.2f})')


@pytest.mark.timeout(300)
def test_engine_samples_and_grpo_step():
    "`JaxEngine` and `Trainer` drive the Llama model unchanged (greedy: the full forward's argmax)."
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.core.trajectory import Trajectory, TrajectoryStatus
    cfg = Llama3Config.tiny(vocab_size=300)
    model = _randomize(Qwen2(cfg, rngs=nnx.Rngs(1)))
    prompts = [list(range(1, 30)), [7, 8, 9, 10, 11]]
    eng = JaxEngine(model, config=JaxEngineConfig.tiny())
    outs = eng.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=12))
    fwd = nnx.jit(lambda m, x: m(x))
    for p, o in zip(prompts, outs):   # past position 32: the scaled low frequencies matter
        logits = fwd(model, jnp.asarray([p + o.token_ids]))[0, len(p) - 1:-1]
        assert jnp.argmax(logits, -1).tolist() == o.token_ids
    sp = [SamplingParams(temperature=1.0, max_new_tokens=12, seed=i) for i in range(4)]
    outs = eng.generate([prompts[1]] * 4, sp)
    trajs = [Trajectory(input_ids=prompts[1] + o.token_ids,
                        response_mask=[0] * 5 + [1] * len(o.token_ids),
                        logprobs=[0.0] * 5 + list(o.logprobs), reward=float(i % 2),
                        status=TrajectoryStatus.DONE, group_id='g', episode_id=f'e{i}')
             for i, o in enumerate(outs)]
    tr = Trainer(model, TrainerConfig.tiny())
    m = tr.update(tr.batch_from(trajs))
    assert m['tokens'] == sum(len(o.token_ids) for o in outs) and np.isfinite(m['loss'])
    assert abs(m['ratio_mean'] - 1) < 1e-4 and m['grad_norm'] > 1e-4, m   # engine's = learner's
    eng.update_params(nnx.state(tr.model), tr.step)   # as the loop syncs the engine
    after = eng.generate([prompts[1]] * 4, sp)   # the engine samples from the trained params
    assert max(abs(a - b) for x, y in zip(after, outs)
               for a, b in zip(x.logprobs, y.logprobs)) > 1e-6


# --- sglang-jax ---------------------------------------------------------------------------------

def test_sglang_llama3_rope_still_unscaled():
    """sglang-jax 0.1.0rc0's `Llama3RotaryEmbedding` rotates with `_inv_freq_np`, which its base
    class sets unscaled; the scaled `_compute_inv_freq` serves only an unused cos/sin cache. When
    this fails, sglang-jax fixed it and `sglang_engine._fix_llama3_rope` can go."""
    pytest.importorskip('sgl_jax', reason='needs sglang-jax (extra: cpu)')
    from sgl_jax.srt.layers.embeddings import get_rope
    rs = dict(rope_type='llama3', **PUBLISHED['llama3.1-8b']['rope_scaling'])
    r = get_rope(128, 128, 256, 500000.0, True, rs, jnp.float32)
    plain = hf_inv_freq({**PUBLISHED['llama3.1-8b'], 'rope_scaling': None})
    np.testing.assert_allclose(np.asarray(r._compute_inv_freq(r.base)),
                               hf_inv_freq(PUBLISHED['llama3.1-8b']), rtol=1e-5)
    np.testing.assert_allclose(r._inv_freq_np, plain, rtol=1e-5)   # the bug


def sharpen(model, factor=20.0):
    "Scale the LM head so greedy choices have margins far above float32 noise."
    model.lm_head.kernel[...] = model.lm_head.kernel[...] * factor
    return model


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sglang_serves_llama3_parity_and_swap(tmp_path):
    "sglang-jax's LlamaForCausalLM on our checkpoint: greedy tokens, logprobs as ours; hot-swap."
    pytest.importorskip('sgl_jax', reason='needs sglang-jax (extra: cpu)')
    from tunix_agentic.engines.sglang_config import SglangConfig
    from tunix_agentic.engines.sglang_engine import SglangJaxEngine
    cfg = Llama3Config.tiny(vocab_size=1024, tie_word_embeddings=False)
    m = sharpen(_randomize(Qwen2(cfg, rngs=nnx.Rngs(3))))
    save_hf(m, cfg, tmp_path)
    r = SglangJaxEngine(tmp_path, SglangConfig.cpu(timeout_s=180))
    try:
        ps = [list(range(3, 30)), [9, 8, 7, 6, 5], [100 + i for i in range(20)]]
        g = SamplingParams(temperature=0.0, max_new_tokens=24)   # rows cross position 32
        a, b = r.generate(ps, g), JaxEngine(m).generate(ps, g)
        assert [o.token_ids for o in a] == [o.token_ids for o in b]
        worst = max(abs(x - y) for oa, ob in zip(a, b) for x, y in zip(oa.logprobs, ob.logprobs))
        assert worst < 1e-4, worst
        keys = iter(jax.random.split(jax.random.key(42), 100))
        old = jax.tree.map(lambda x: x, nnx.state(m, nnx.Param))
        new = jax.tree.map(lambda x: x * (1 + 0.3 * jax.random.normal(next(keys), x.shape)), old)
        t0 = time.perf_counter(); r.update_params(new); push = time.perf_counter() - t0
        m2 = nnx.clone(m); nnx.update(m2, new)
        a2, b2 = r.generate(ps, g), JaxEngine(m2).generate(ps, g)
        assert [o.token_ids for o in a2] == [o.token_ids for o in b2] != [o.token_ids for o in a]
        worst2 = max(abs(x - y) for oa, ob in zip(a2, b2) for x, y in zip(oa.logprobs, ob.logprobs))
        assert worst2 < 1e-4, worst2
        r.update_params(old)
        assert [o.token_ids for o in r.generate(ps, g)] == [o.token_ids for o in a]
        print(f'sglang-jax Llama 3 vs ours: greedy equal on {len(ps)} x 24 tokens, max |dlogprob| '
              f'{worst:.1e} before and {worst2:.1e} after a hot-swap ({push * 1e3:.0f} ms)')
    finally:
        r.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_shaped_sharded_round_trip(tmp_path):
    "Llama 3.2-1B's widths (128k tied vocabulary, 32/8 heads of 64) with 2 layers, bf16, sharded."
    from tunix_agentic.models.decoder import hf_state_dict
    cfg = Llama3Config.llama3p2_1b(num_layers=2)
    model = Qwen2(cfg, rngs=nnx.Rngs(0))
    save_hf(model, cfg, tmp_path, max_shard_bytes=200 * 2**20)
    index = json.loads((tmp_path / 'model.safetensors.index.json').read_text())
    files = set(index['weight_map'].values())
    assert len(files) > 1 and 'lm_head.weight' not in index['weight_map']
    assert json.loads((tmp_path / 'config.json').read_text())['rope_scaling']['factor'] == 32.0
    m2, c2 = load_hf(tmp_path)
    assert c2 == cfg and c2.dtype == 'bfloat16'
    a, b = hf_state_dict(model), hf_state_dict(m2)
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype == jnp.bfloat16 for k in a)
    assert all(bool((a[k] == b[k]).all()) for k in a)   # bit-exact
    toks = jnp.asarray([[128000, 791, 6864, 315, 9822, 374]])
    np.testing.assert_array_equal(np.asarray(model(toks), np.float32),
                                  np.asarray(m2(toks), np.float32))


def test_bf16_config_written_by_transformers_loads_bf16(tmp_path):
    "transformers 4.57 writes `dtype`, not `torch_dtype`: a bf16 Llama must load bf16 (issue 30)."
    from tunix_agentic.models.decoder import hf_state_dict
    from test_models import _transformers_rewrite
    cfg = Llama3Config.tiny(vocab_size=300)
    save_hf(_randomize(Qwen2(cfg, rngs=nnx.Rngs(0))), cfg, tmp_path, dtype='bfloat16')
    hf = _transformers_rewrite(tmp_path)
    assert hf['dtype'] == 'bfloat16' and 'torch_dtype' not in hf and hf['model_type'] == 'llama'
    loaded, c2 = load_hf(tmp_path)
    assert c2.dtype == 'bfloat16'
    assert all(v.dtype == jnp.bfloat16 for v in hf_state_dict(loaded).values())
