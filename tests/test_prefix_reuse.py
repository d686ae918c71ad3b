"""JaxEngine's prefix reuse across turns (issue 13, `JaxEngineConfig(prefix_cache_tokens=...)`): with
it, an episode's turn k+1 prefills only what it adds to turn k, and samples what the full prefill
samples: the same tokens, logprobs within 1e-4 (f32; the reused keys/values come from other kernels,
decode steps instead of one prefill, so sums run in another order: ~1e-6 per logit on this model).
New weights (`update_params`, or arrays replaced in a live model) empty the cache."""
import numpy as np, jax, pytest
from flax import nnx
from tunix_agentic.models.qwen2 import Qwen2, ModelConfig
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig

MCFG = ModelConfig.tiny(vocab_size=256)
ANSWER = [7, 8, 9, 10, 11]
EPS = 1e-4


def _cfg(**kw):
    return JaxEngineConfig(max_batch=4, min_batch_bucket=4, min_prompt_bucket=16, min_gen_bucket=8, **kw)


def _prompts(n=3, seed=0):
    rng = np.random.default_rng(seed)
    head = rng.integers(20, 256, 18).tolist()  # a shared "system prompt"
    return [head + rng.integers(20, 256, int(rng.integers(3, 30))).tolist() for _ in range(n)]


def _turns(engine, prompts, sps, n=3):
    outs, stats, cur = [], [], [list(p) for p in prompts]
    for _ in range(n):
        o = engine.generate(cur, sps)
        outs.append(o)
        stats.append((engine.last_stats['prefill_tokens'], engine.last_stats['reused_tokens'],
                      sum(map(len, cur))))
        cur = [p + x.token_ids + ANSWER for p, x in zip(cur, o)]
    return outs, stats


def _same(a, b):
    for x, y in zip(a, b):
        assert [o.token_ids for o in x] == [o.token_ids for o in y]
        assert [o.finish_reason for o in x] == [o.finish_reason for o in y]
        np.testing.assert_allclose(np.concatenate([o.logprobs for o in x]),
                                   np.concatenate([o.logprobs for o in y]), atol=EPS, rtol=0)


@pytest.fixture(scope='module')
def model(): return Qwen2(MCFG, rngs=nnx.Rngs(0))


@pytest.mark.parametrize('extra', [{}, {'shared_prefix': 16}, {'shared_prefix': 16, 'cascade': True}])
def test_three_turns_equal_full_prefill(model, extra):
    greedy = [SamplingParams(temperature=0.0, max_new_tokens=n) for n in (6, 9, 12)]
    full, fs = _turns(JaxEngine(model, config=_cfg(**extra)), _prompts(), greedy)
    eng = JaxEngine(model, config=_cfg(prefix_cache_tokens=10_000, **extra))
    reuse, rs = _turns(eng, _prompts(), greedy)
    _same(full, reuse)
    assert rs[0] == fs[0] and rs[0][1] == 0
    q = 16 if extra else 0  # the full path prefills the shared prefix once per batch
    assert [f for f, _, _ in fs] == [t - 2 * q for _, _, t in fs]
    # with reuse, each row's turn k+1 prefills its last sampled token and the answer, nothing else
    assert [(p, p + r) for p, r, _ in rs[1:]] == [(3 * (1 + len(ANSWER)), t) for _, _, t in rs[1:]]
    assert len(eng.prefix_cache) == 3


def test_sampled_rows_with_seeds(model):
    sps = [SamplingParams(temperature=1.0, top_k=20, top_p=0.9, max_new_tokens=10, seed=s)
           for s in (1, 2, 3)]
    full, _ = _turns(JaxEngine(model, config=_cfg()), _prompts(seed=1), sps)
    reuse, rs = _turns(JaxEngine(model, config=_cfg(prefix_cache_tokens=10_000)), _prompts(seed=1), sps)
    _same(full, reuse)
    assert all(r > 0 for _, r, _ in rs[1:])


def test_mixed_batch_and_eviction(model):
    "A batch where one row continues an episode and another starts fresh; a budget too small to keep all."
    g = SamplingParams(temperature=0.0, max_new_tokens=6)
    ps = _prompts(2, seed=2)
    eng = JaxEngine(model, config=_cfg(prefix_cache_tokens=10_000))
    ref = JaxEngine(model, config=_cfg())
    o1 = eng.generate(ps[:1], g)
    nxt = [ps[0] + o1[0].token_ids + ANSWER, ps[1]]
    _same([ref.generate(nxt, g)], [eng.generate(nxt, g)])
    assert eng.last_stats['reused_tokens'] == len(ps[0]) + len(o1[0].token_ids) - 1
    small = JaxEngine(model, config=_cfg(prefix_cache_tokens=max(map(len, ps)) + 8))
    o = small.generate(ps, g)
    assert len(small.prefix_cache) == 1 and small.prefix_cache.tokens <= small.prefix_cache.max_tokens
    nxt = [p + x.token_ids + ANSWER for p, x in zip(ps, o)]
    _same([ref.generate(nxt, g)], [small.generate(nxt, g)])
    assert 0 < small.last_stats['reused_tokens'] < sum(map(len, ps))


def test_update_params_flushes(model):
    "Turn 2 after a weight update equals a full prefill under the new weights, reusing nothing."
    g = SamplingParams(temperature=0.0, max_new_tokens=8)
    ps = _prompts(seed=3)
    new = jax.tree.map(lambda x: x * 1.3, nnx.state(model))
    eng = JaxEngine(model, config=_cfg(prefix_cache_tokens=10_000))
    o = eng.generate(ps, g)
    nxt = [p + x.token_ids + ANSWER for p, x in zip(ps, o)]
    stale = eng.generate(nxt, g)  # reused under the old weights (a witness the update must not match)
    eng.update_params(new)
    assert len(eng.prefix_cache) == 0
    eng.generate(ps, g)  # turn 1 again, now cached under the new weights
    ref = JaxEngine(model, config=_cfg())
    ref.update_params(new)
    want = ref.generate(nxt, g)
    got = eng.generate(nxt, g)
    _same([want], [got])
    assert [x.token_ids for x in stale] != [x.token_ids for x in want]  # the weights do matter here
    # and a flush through update_params on a cache that would otherwise hit
    eng.update_params(model)
    _same([JaxEngine(model, config=_cfg()).generate(nxt, g)], [eng.generate(nxt, g)])
    assert eng.last_stats['reused_tokens'] == 0


def test_live_model_changed_in_place():
    "A live model whose arrays are replaced without `update_params` also empties the cache."
    m = Qwen2(MCFG, rngs=nnx.Rngs(1))
    g = SamplingParams(temperature=0.0, max_new_tokens=8)
    ps = _prompts(seed=4)
    eng = JaxEngine(m, config=_cfg(prefix_cache_tokens=10_000))
    o = eng.generate(ps, g)
    nxt = [p + x.token_ids + ANSWER for p, x in zip(ps, o)]
    for layer in m.layers:  # an optimizer step done in place
        layer.self_attn.v_proj.kernel.value = layer.self_attn.v_proj.kernel.value * 2.0
    got = eng.generate(nxt, g)
    assert eng.last_stats['reused_tokens'] == 0
    _same([JaxEngine(m, config=_cfg()).generate(nxt, g)], [got])
