"""Parity of the NNX Qwen2/Qwen3 model against an independent float64 numpy forward, HF
safetensors round-trips (single file, sharded, bf16), and each family a `decoder.DecoderModel`."""
import json
import numpy as np
import pytest
import jax, jax.numpy as jnp
from flax import nnx
from safetensors.numpy import load_file as np_load

from tunix_agentic.models.decoder import (DecoderConfig, DecoderModel, KVCache, check_decoder,
                                          hf_state_dict)
from tunix_agentic.models.gemma3 import Gemma3, Gemma3Config
from tunix_agentic.models.llama3 import Llama3Config
from tunix_agentic.models.qwen2 import ModelConfig, Qwen2, load_hf, save_hf


def np_forward(sd: dict, hf: dict, tokens: np.ndarray,
               inv_freq: np.ndarray | None = None) -> np.ndarray:
    """Reference Qwen2/Qwen3 forward in float64 numpy, straight from HF tensor names and config; a
    scaled rope's frequencies come in `inv_freq` (Llama 3: `test_llama3.hf_inv_freq`)."""
    w = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    eps, theta = hf['rms_norm_eps'], hf['rope_theta']
    H, K, hd = hf['num_attention_heads'], hf['num_key_value_heads'], hf['head_dim']
    qwen3 = hf['model_type'] == 'qwen3'
    T = len(tokens)

    def norm(x, g): return g * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)

    def rot(x):  # x [T, heads, hd]
        inv = theta ** (-np.arange(0, hd, 2) / hd) if inv_freq is None else inv_freq
        ang = np.arange(T)[:, None] * inv[None]
        c, s = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * c[:, None] + np.concatenate([-x2, x1], -1) * s[:, None]

    def lin(x, name):
        y = x @ w[name + '.weight'].T
        return y + w[name + '.bias'] if name + '.bias' in w else y

    x = w['model.embed_tokens.weight'][tokens]
    for i in range(hf['num_hidden_layers']):
        p = f'model.layers.{i}.'
        h = norm(x, w[p + 'input_layernorm.weight'])
        q = lin(h, p + 'self_attn.q_proj').reshape(T, H, hd)
        k = lin(h, p + 'self_attn.k_proj').reshape(T, K, hd)
        v = lin(h, p + 'self_attn.v_proj').reshape(T, K, hd)
        if qwen3:
            q = norm(q, w[p + 'self_attn.q_norm.weight'])
            k = norm(k, w[p + 'self_attn.k_norm.weight'])
        q, k = rot(q), rot(k)
        k, v = np.repeat(k, H // K, axis=1), np.repeat(v, H // K, axis=1)
        s = np.einsum('thd,shd->hts', q, k) / np.sqrt(hd)
        s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
        pr = np.exp(s - s.max(-1, keepdims=True)); pr /= pr.sum(-1, keepdims=True)
        o = np.einsum('hts,shd->thd', pr, v).reshape(T, H * hd)
        x = x + lin(o, p + 'self_attn.o_proj')
        h = norm(x, w[p + 'post_attention_layernorm.weight'])
        g, u = lin(h, p + 'mlp.gate_proj'), lin(h, p + 'mlp.up_proj')
        x = x + lin(g / (1 + np.exp(-g)) * u, p + 'mlp.down_proj')
    x = norm(x, w['model.norm.weight'])
    head = w['model.embed_tokens.weight'] if hf['tie_word_embeddings'] else w['lm_head.weight']
    return x @ head.T


def _randomize(model, seed=1):
    "Give norms/biases non-trivial values so the parity test exercises them."
    st = nnx.state(model, nnx.Param)
    keys = iter(jax.random.split(jax.random.key(seed), 1000))
    st = jax.tree.map(lambda a: a + 0.1 * jax.random.normal(next(keys), a.shape, a.dtype), st)
    nnx.update(model, st)
    return model


VARIANTS = {
    'qwen2': dict(arch='qwen2'),
    'qwen2_tied': dict(arch='qwen2', tie_word_embeddings=True, num_heads=4, num_kv_heads=2,
                       head_dim=32, num_layers=3),
    'qwen3': dict(arch='qwen3', qkv_bias=False, qk_norm=True),
    'qwen3_bias': dict(arch='qwen3', qkv_bias=True, o_bias=True, qk_norm=True),
}


def f64_parity(cfg, tmp_path, toks, load=load_hf, inv_freq_fn=None):
    """Save a randomized `Qwen2(cfg)`, load it back with `load`, run both it and `np_forward` (rope
    frequencies from `inv_freq_fn(hf config)` if given): max |diff|, reference, ours, sd, hf."""
    save_hf(_randomize(Qwen2(cfg, rngs=nnx.Rngs(0))), cfg, tmp_path)
    hf = json.loads((tmp_path / 'config.json').read_text())
    sd = np_load(str(tmp_path / 'model.safetensors'))
    ref = np_forward(sd, hf, toks, None if inv_freq_fn is None else inv_freq_fn(hf))
    loaded, c2 = load(tmp_path)
    assert c2 == cfg
    ours = np.asarray(loaded(jnp.asarray(toks)[None]))[0]
    return np.abs(ours - ref).max(), ref, ours, sd, hf


@pytest.mark.timeout(120)
@pytest.mark.parametrize('variant', list(VARIANTS))
def test_parity_f64_numpy(tmp_path, variant):
    cfg = ModelConfig.tiny(vocab_size=300, **VARIANTS[variant])
    err, ref, *_ = f64_parity(cfg, tmp_path, np.array([1, 7, 42, 299, 0, 13, 5, 77, 150, 3, 8]))
    assert err < 1e-4, f'{variant}: max |f32 - f64| = {err}'
    print(f'{variant}: max |f32 logits - f64 numpy| = {err:.2e} (logit std {ref.std():.2f})')
    assert ref.std() > 0.1  # a non-degenerate model


@pytest.mark.timeout(120)
def test_cached_forward_matches_full_with_left_padding():
    cfg = ModelConfig.tiny(vocab_size=300)
    model = _randomize(Qwen2(cfg, rngs=nnx.Rngs(0)))
    toks = jnp.array([[0, 0, 5, 6, 7], [1, 2, 3, 4, 9]])
    mask = jnp.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    pos = jnp.maximum(jnp.cumsum(mask, 1) - 1, 0)
    cache = KVCache.init(cfg, 2, 8)
    valid = jnp.concatenate([mask, jnp.zeros((2, 3), int)], 1)
    lg, cache = model(toks, pos, cache, valid)
    ref0 = model(toks[:1, 2:])
    np.testing.assert_allclose(lg[0, 2:], ref0[0], atol=1e-5)
    np.testing.assert_allclose(lg[1], model(toks[1:])[0], atol=1e-5)
    # one decode step
    nxt = jnp.array([[11], [12]])
    valid = valid.at[:, 5].set(1)
    lg2, cache = model(nxt, pos[:, -1:] + 1, cache, valid)
    np.testing.assert_allclose(lg2[0, 0], model(jnp.array([[5, 6, 7, 11]]))[0, -1], atol=1e-5)
    assert int(cache.index) == 6


@pytest.mark.timeout(120)
def test_sharded_roundtrip_and_bf16(tmp_path):
    cfg = ModelConfig.tiny(vocab_size=300)
    model = _randomize(Qwen2(cfg, rngs=nnx.Rngs(0)))
    save_hf(model, cfg, tmp_path / 's', max_shard_bytes=150_000)
    idx = json.loads((tmp_path / 's' / 'model.safetensors.index.json').read_text())
    assert len(set(idx['weight_map'].values())) > 1
    m2, c2 = load_hf(tmp_path / 's')
    assert c2 == cfg
    a, b = hf_state_dict(model), hf_state_dict(m2)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # save back the loaded model and compare bytes-level tensors
    save_hf(m2, c2, tmp_path / 'again')
    again = np_load(str(tmp_path / 'again' / 'model.safetensors'))
    assert all(np.array_equal(np.asarray(a[k]), again[k]) for k in a)
    # bf16
    save_hf(model, cfg, tmp_path / 'bf', dtype='bfloat16')
    mb, cb = load_hf(tmp_path / 'bf')
    assert cb.dtype == 'bfloat16'
    assert all(v.dtype == jnp.bfloat16 for v in hf_state_dict(mb).values())
    toks = jnp.array([[3, 4, 5, 6]])
    lb = mb(toks).astype(jnp.float32)
    assert np.abs(np.asarray(lb) - np.asarray(model(toks))).max() < 0.1
    # bf16 round-trip is exact
    save_hf(mb, cb, tmp_path / 'bf2')
    bf2 = hf_state_dict(load_hf(tmp_path / 'bf2')[0])
    assert all(np.array_equal(np.asarray(hf_state_dict(mb)[k], np.float32),
                              np.asarray(bf2[k], np.float32)) for k in a)


def test_config_errors():
    with pytest.raises(ValueError, match='arch'): ModelConfig(arch='llama')
    with pytest.raises(ValueError, match='dtype'): ModelConfig(dtype='int8')


def test_load_errors(tmp_path):
    cfg = ModelConfig.tiny(vocab_size=300)
    model = Qwen2(cfg, rngs=nnx.Rngs(0))
    save_hf(model, cfg, tmp_path)
    hf = json.loads((tmp_path / 'config.json').read_text())
    (tmp_path / 'config.json').write_text(json.dumps({**hf, 'vocab_size': 301}))
    with pytest.raises(ValueError, match='has shape'): load_hf(tmp_path)


# ---- config.json as the pinned transformers (4.57) writes it (issue 30) ---------------------------

def _transformers_rewrite(path) -> dict:
    "Let transformers read our config.json and write it back its own way; return what it wrote."
    transformers = pytest.importorskip('transformers')
    transformers.AutoConfig.from_pretrained(path).save_pretrained(path)
    return json.loads((path / 'config.json').read_text())


@pytest.mark.parametrize('arch', ['qwen2', 'qwen3'])
def test_bf16_checkpoint_written_by_transformers_loads_bf16(tmp_path, arch):
    "transformers 4.57 writes `dtype`, not `torch_dtype`: a bf16 checkpoint must load bf16 (issue 30)."
    cfg = ModelConfig.tiny(vocab_size=300, **VARIANTS[arch])
    model = _randomize(Qwen2(cfg, rngs=nnx.Rngs(0)))
    save_hf(model, cfg, tmp_path, dtype='bfloat16')
    hf = _transformers_rewrite(tmp_path)
    assert hf['dtype'] == 'bfloat16' and 'torch_dtype' not in hf
    loaded, c2 = load_hf(tmp_path)
    assert c2.dtype == 'bfloat16'
    assert all(v.dtype == jnp.bfloat16 for v in hf_state_dict(loaded).values())


@pytest.mark.parametrize('arch', ['qwen2', 'qwen3'])
def test_sliding_window_refused_by_name(tmp_path, arch):
    "`use_sliding_window: true` with a layer that slides is refused, not silently run full (issue 30)."
    transformers = pytest.importorskip('transformers')
    kw = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    Cfg = transformers.Qwen2Config if arch == 'qwen2' else transformers.Qwen3Config
    Cfg(**kw, use_sliding_window=True, sliding_window=8, max_window_layers=1).save_pretrained(tmp_path)
    hf = json.loads((tmp_path / 'config.json').read_text())
    assert hf['layer_types'] == ['full_attention', 'sliding_attention']
    with pytest.raises(ValueError, match='use_sliding_window'): ModelConfig.from_hf_config(hf)
    # a window on no layer (max_window_layers >= layers), or no window at all, reads as before
    for extra in (dict(use_sliding_window=True, sliding_window=8, max_window_layers=2),
                  dict(use_sliding_window=False, sliding_window=32768, max_window_layers=1)):
        Cfg(**kw, **extra).save_pretrained(tmp_path)
        c = ModelConfig.from_hf_config(json.loads((tmp_path / 'config.json').read_text()))
        assert (c.arch, c.num_layers) == (arch, 2)



FAMILIES = {  # each family's tiny model
    'qwen2': lambda: Qwen2(ModelConfig.tiny(), rngs=nnx.Rngs(0)),
    'qwen3': lambda: Qwen2(ModelConfig.tiny(arch='qwen3', qkv_bias=False, qk_norm=True),
                           rngs=nnx.Rngs(0)),
    'llama3': lambda: Qwen2(Llama3Config.tiny(), rngs=nnx.Rngs(0)),
    'gemma3': lambda: Gemma3(Gemma3Config.tiny(), rngs=nnx.Rngs(0)),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize('family', list(FAMILIES))
def test_each_family_is_a_decoder_model(family):
    "The protocol's shape, and its contract: a cached forward in two pieces gives the full logits."
    model = FAMILIES[family]()
    assert isinstance(model, DecoderModel) and check_decoder(model) is model
    assert isinstance(model.cfg, DecoderConfig)
    toks = jnp.array([[3, 1, 4, 1, 5, 9]])
    full = model(toks)
    assert full.shape == (1, 6, model.cfg.vocab_size)
    cache = KVCache.init(model.cfg, 1, 8)
    lg1, cache = model(toks[:, :4], jnp.arange(4)[None], cache)
    lg2, cache = model(toks[:, 4:], 4 + jnp.arange(2)[None], cache)
    assert int(cache.index) == 6
    np.testing.assert_allclose(jnp.concatenate([lg1, lg2], 1), full, atol=1e-4)
