"""Loaders refuse, by name, every config field value our modules do not implement, instead of loading
a checkpoint that would give wrong logits without a word.

Each HF case is a tiny config written by the pinned transformers (`save_pretrained`), loaded with the
family's `load_hf`: the refusal comes from `config.json`, before any weights are read. Each GGUF case
is a file written by the pinned `gguf` package, loaded with `load_gguf`. Beside them, the values we do
implement are read (not refused) from the same kind of file."""
import json

import numpy as np
import pytest

transformers = pytest.importorskip('transformers')

from tunix_agentic.models import gemma3, llama3, qwen2

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
YARN = {'rope_type': 'yarn', 'factor': 2.0, 'original_max_position_embeddings': 32}

# (case, transformers config class, its fields, our loader module, the message's substring)
HF_CASES = [
    ('qwen2 gelu activation', 'Qwen2Config', dict(hidden_act='gelu'), qwen2,
     "qwen2 config: hidden_act='gelu' is not implemented; expected 'silu'"),
    ('qwen2 yarn rope', 'Qwen2Config', dict(rope_scaling=YARN), qwen2, 'rope_scaling='),
    ('qwen2 sliding window', 'Qwen2Config', dict(use_sliding_window=True, sliding_window=16,
                                                 max_window_layers=1), qwen2,
     'use_sliding_window=True'),
    ('qwen2 mixture of experts', 'Qwen2MoeConfig', {}, qwen2, "model_type='qwen2_moe'"),
    ('qwen3 relu activation', 'Qwen3Config', dict(hidden_act='relu'), qwen2,
     "qwen3 config: hidden_act='relu' is not implemented"),
    ('qwen3 dynamic rope', 'Qwen3Config', dict(rope_scaling={'rope_type': 'dynamic', 'factor': 2.0}),
     qwen2, 'rope_scaling='),
    ('qwen3 sliding window', 'Qwen3Config', dict(use_sliding_window=True, sliding_window=16,
                                                 max_window_layers=0), qwen2,
     'use_sliding_window=True'),
    ('llama gelu activation', 'LlamaConfig', dict(hidden_act='gelu'), llama3,
     "llama config: hidden_act='gelu' is not implemented; expected 'silu'"),
    ('llama MLP bias', 'LlamaConfig', dict(mlp_bias=True), llama3,
     'llama config: mlp_bias=True is not implemented'),
    ('llama linear rope', 'LlamaConfig', dict(rope_scaling={'rope_type': 'linear', 'factor': 2.0}),
     llama3, "expected null or rope_type 'llama3'"),
    ('llama yarn rope', 'LlamaConfig', dict(rope_scaling=YARN), llama3,
     "expected null or rope_type 'llama3'"),
    ('gemma3 exact gelu', 'Gemma3TextConfig', dict(hidden_activation='gelu'), gemma3,
     "gemma3 config: hidden_activation='gelu' is not implemented; expected 'gelu_pytorch_tanh'"),
    ('gemma3 attention bias', 'Gemma3TextConfig', dict(attention_bias=True), gemma3,
     'gemma3 config: attention_bias=True is not implemented'),
    ('gemma3 bidirectional attention', 'Gemma3TextConfig', dict(use_bidirectional_attention=True),
     gemma3, 'gemma3 config: use_bidirectional_attention=True is not implemented'),
    ('gemma3 attention softcapping', 'Gemma3TextConfig', dict(attn_logit_softcapping=50.0), gemma3,
     'gemma3 config: attn_logit_softcapping=50.0 is not implemented'),
    ('gemma3 yarn rope', 'Gemma3TextConfig', dict(rope_scaling=YARN), gemma3,
     'expected null, default or linear'),
    ('gemma3 window of an unknown kind', 'Gemma3TextConfig',
     dict(layer_types=['chunked_attention', 'full_attention']), gemma3, "layer_types=('chunked"),
]


def saved(tmp_path, cls_name: str, fields: dict) -> tuple:
    "A tiny config of `cls_name` with `fields`, saved by transformers; (folder, config.json dict)."
    cls = getattr(transformers, cls_name)
    cls(**{**TINY, **fields}).save_pretrained(tmp_path)
    return tmp_path, json.loads((tmp_path / 'config.json').read_text())


@pytest.mark.parametrize('case', HF_CASES, ids=[c[0] for c in HF_CASES])
def test_hf_config_refused_by_name(tmp_path, case):
    _, cls_name, fields, loader, want = case
    folder, _ = saved(tmp_path, cls_name, fields)
    with pytest.raises(ValueError) as e: loader.load_hf(folder)
    assert want in str(e.value), str(e.value)


def test_hf_values_we_implement_are_read(tmp_path):
    "The same kind of files with values our modules do implement: read, not refused."
    q3 = qwen2.ModelConfig.from_hf_config(saved(tmp_path / 'q3', 'Qwen3Config',
                                                dict(attention_bias=True))[1])
    assert (q3.arch, q3.qkv_bias, q3.o_bias, q3.qk_norm) == ('qwen3', True, True, True)
    q2 = qwen2.ModelConfig.from_hf_config(saved(tmp_path / 'q2', 'Qwen2Config', {})[1])
    assert (q2.arch, q2.qkv_bias, q2.o_bias) == ('qwen2', True, False)
    ll = llama3.Llama3Config.from_hf_config(saved(tmp_path / 'll', 'LlamaConfig',
                                                  dict(attention_bias=True))[1])
    assert (ll.qkv_bias, ll.o_bias, ll.rope_factor) == (True, True, None)
    _, hf = saved(tmp_path / 'g', 'Gemma3TextConfig', dict(
        sliding_window_pattern=2, num_hidden_layers=4, rope_scaling={'rope_type': 'linear',
                                                                     'factor': 8.0}))
    g = gemma3.Gemma3Config.from_hf_config(hf)
    assert g.layer_types == tuple(hf['layer_types']) == ('sliding_attention', 'full_attention') * 2
    assert g.rope_scaling_factor == 8.0


# GGUF: metadata keys (and a tensor) our Gemma 3 does not implement
GGUF_CASES = [
    ('rope scaling yarn', {'gemma3.rope.scaling.type': 'yarn'},
     "gemma3 GGUF: gemma3.rope.scaling.type='yarn' is not implemented; expected 'none' or 'linear'"),
    ('non-causal attention', {'gemma3.attention.causal': False},
     'gemma3 GGUF: gemma3.attention.causal=False is not implemented'),
    ('another window pattern', {'gemma3.attention.sliding_window_pattern': 4},
     'gemma3 GGUF: gemma3.attention.sliding_window_pattern=4 is not implemented; expected 6'),
    ('another local rope base', {'gemma3.rope.freq_base_swa': 100000.0},
     'gemma3 GGUF: gemma3.rope.freq_base_swa=100000.0 is not implemented'),
    ('attention softcapping', {'gemma3.attn_logit_softcapping': 50.0},
     'gemma3 GGUF: gemma3.attn_logit_softcapping=50.0 is not implemented'),
    ('a bias tensor', {}, "gemma3 GGUF: tensor 'blk.0.attn_q.bias' is a bias"),
]


def write_gguf(path, extra: dict, bias: bool = False):
    "A tiny gemma3 GGUF (metadata; one bias tensor if `bias`) written by the gguf package."
    gguf = pytest.importorskip('gguf', reason='needs the gguf package (extra: gguf)')
    w = gguf.GGUFWriter(str(path), 'gemma3')
    w.add_block_count(2)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(8)
    w.add_value_length(8)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(16)
    w.add_tokenizer_model('llama')
    w.add_token_list([f'<t{i}>' for i in range(64)])
    for k, v in extra.items():
        add = (w.add_bool if isinstance(v, bool) else w.add_string if isinstance(v, str)
               else w.add_float32 if isinstance(v, float) else w.add_uint32)
        add(k, v)
    if bias: w.add_tensor('blk.0.attn_q.bias', np.zeros(32, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize('case', GGUF_CASES, ids=[c[0] for c in GGUF_CASES])
def test_gguf_refused_by_name(tmp_path, case):
    from tunix_agentic.models.gguf_io import load_gguf
    _, extra, want = case
    path = write_gguf(tmp_path / 'm.gguf', extra, bias=not extra)
    with pytest.raises(ValueError) as e: load_gguf(path)
    assert want in str(e.value), str(e.value)


def test_gguf_values_we_implement_are_read(tmp_path):
    from gguf import GGUFReader
    from tunix_agentic.models.gguf_io import gemma3_config, gguf_metadata
    path = write_gguf(tmp_path / 'm.gguf', {'gemma3.rope.scaling.type': 'linear',
                                            'gemma3.rope.scaling.factor': 8.0,
                                            'gemma3.attention.causal': True,
                                            'gemma3.attention.sliding_window_pattern': 6,
                                            'gemma3.rope.freq_base_swa': 10000.0})
    cfg = gemma3_config(gguf_metadata(GGUFReader(str(path))))
    assert (cfg.rope_scaling_factor, cfg.rope_local_theta, cfg.sliding_window) == (8.0, 1e4, 16)
