"""The vanilla JAX sampler against the uncached forward: greedy tokens, logprob convention, stops,
per-request seeds, no-copy parameter sharing, async batching and bounded recompiles."""
import asyncio, dataclasses
import numpy as np
import pytest
import jax, jax.numpy as jnp
from flax import nnx

from tunix_agentic.models.default import load_default
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig, generate_tokens

CFG = JaxEngineConfig(max_batch=4, min_batch_bucket=4, min_prompt_bucket=32, min_gen_bucket=16)


@pytest.fixture(scope='module')
def setup():
    model, cfg, tok = load_default()
    prompts = [tok.apply_chat_template([{'role': 'user', 'content': q}], add_generation_prompt=True)
               for q in ('What is 2+3?', 'Hi', 'Call the calculator tool to add 17 and 25 please.',
                         'x', 'Tell me a story about a cat.')]
    return model, cfg, tok, prompts


def ref_logits(model, seqs):
    "Uncached forward of right-padded sequences (one jitted call)."
    L = max(map(len, seqs))
    x = jnp.asarray([s + [0] * (L - len(s)) for s in seqs])
    return np.asarray(nnx.jit(lambda m, x: m(x))(model, x), np.float64)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.timeout(300)
def test_greedy_and_temperature_logprobs_match_full_forward(setup):
    model, cfg, tok, prompts = setup
    s = JaxEngine(model, config=CFG)
    ps = [SamplingParams(temperature=0.0, max_new_tokens=10),
          SamplingParams(temperature=0.0, max_new_tokens=3),
          SamplingParams(temperature=0.7, top_k=5, max_new_tokens=10, seed=1),
          SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=7, seed=2),
          SamplingParams(temperature=0.0, max_new_tokens=10)]   # 5 prompts > max_batch: 2 chunks
    outs = s.generate(prompts, ps)
    assert [len(o.token_ids) for o in outs] == [10, 3, 10, 7, 10]
    assert all(o.finish_reason == 'length' for o in outs)
    lg = ref_logits(model, [p + o.token_ids for p, o in zip(prompts, outs)])
    for i, (p, o, sp) in enumerate(zip(prompts, outs, ps)):
        step = lg[i, len(p) - 1:len(p) - 1 + len(o.token_ids)]
        T = sp.temperature or 1.0
        lp = log_softmax(step / T)
        if sp.temperature == 0: assert step.argmax(-1).tolist() == o.token_ids
        if sp.top_k: assert all(lp[j, t] >= np.sort(lp[j])[-sp.top_k] for j, t in
                                enumerate(o.token_ids))
        got = np.asarray(o.logprobs)
        want = lp[np.arange(len(o.token_ids)), o.token_ids]
        assert np.abs(got - want).max() < 1e-4, (i, got, want)


@pytest.mark.timeout(300)
def test_stops_seeds_and_topk1(setup):
    model, cfg, tok, prompts = setup
    s = JaxEngine(model, config=CFG)
    g = SamplingParams(temperature=0.0, max_new_tokens=12)
    base = s.generate(prompts[:2], g)
    stop = base[0].token_ids[4]
    first = base[0].token_ids.index(stop)
    out = s.generate(prompts[:2], [g.replace(stop_token_ids=(999, stop)), g])
    assert out[0].token_ids == base[0].token_ids[:first + 1] and out[0].finish_reason == 'stop'
    assert out[1].token_ids == base[1].token_ids  # the other row is unaffected
    # top_k=1 at temperature 1 samples the argmax
    k1 = s.generate(prompts[:1],
                    SamplingParams(temperature=1.0, top_k=1, max_new_tokens=12, seed=3))
    assert k1[0].token_ids == base[0].token_ids
    # same seed -> same sample whatever the batch; different seeds -> different samples
    hot = SamplingParams(temperature=1.0, max_new_tokens=16, seed=11)
    a = s.generate([prompts[0]], hot)[0].token_ids
    b = s.generate([prompts[2], prompts[0], prompts[1]],
                   [hot.replace(seed=5), hot, hot])[1].token_ids
    assert a == b
    group = s.generate([prompts[0]] * 4, [hot.replace(seed=i) for i in range(4)])
    assert len({tuple(o.token_ids) for o in group}) > 1
    # no seed: the sampler's own stream, reproducible from JaxEngineConfig.seed
    c1 = JaxEngine(model, config=CFG).generate([prompts[0]] * 2, hot.replace(seed=None))
    c2 = JaxEngine(model, config=CFG).generate([prompts[0]] * 2, hot.replace(seed=None))
    assert [o.token_ids for o in c1] == [o.token_ids for o in c2]


@pytest.mark.timeout(300)
def test_shares_params_no_copy_and_update(setup):
    model, cfg, tok, prompts = setup
    s = JaxEngine(model, config=CFG)
    _, st = s._params()
    a = jax.tree.leaves(st)
    b = jax.tree.leaves(nnx.state(model))
    assert all(x is y for x, y in zip(a, b))   # the very same arrays: nothing copied
    g = SamplingParams(temperature=0.0, max_new_tokens=8)
    before = s.generate(prompts[:1], g)[0].token_ids
    old = nnx.state(model)
    s.update_params(jax.tree.map(lambda x: x * 1.5, old), version=3)
    assert s.policy_version == 3
    after = s.generate(prompts[:1], g)[0].token_ids
    assert after != before
    s.update_params(old)
    assert s.generate(prompts[:1], g)[0].token_ids == before
    with pytest.raises(TypeError, match='nnx.Module or nnx.State'): s.update_params({'a': 1})
    # a pushed State is pinned: in-place updates of the model (an optimizer step) do not leak in,
    # while a sampler given the module itself sees them at once
    live = JaxEngine(model, config=CFG)
    s.update_params(nnx.state(model))
    saved = jax.tree.map(lambda a: a, nnx.state(model))
    nnx.update(model, jax.tree.map(lambda x: x * 1.5, nnx.state(model)))
    try:
        assert s.generate(prompts[:1], g)[0].token_ids == before
        assert live.generate(prompts[:1], g)[0].token_ids == after
    finally:
        nnx.update(model, saved)


@pytest.mark.timeout(300)
def test_agenerate_batches_and_buckets_bound_compiles(setup):
    model, cfg, tok, prompts = setup
    s = JaxEngine(model, config=CFG)
    g = SamplingParams(temperature=0.0, max_new_tokens=6)
    sync = s.generate(prompts, g)

    async def main():
        return await asyncio.gather(*(s.agenerate(p, g) for p in prompts))
    outs = asyncio.run(main())
    assert [o.token_ids for o in outs] == [o.token_ids for o in sync]
    assert max(s.batcher.batch_sizes) > 1
    # prompt lengths 1..31 and budgets 1..16 all land in one bucket
    n0 = len(s.shapes_seen)
    for n in (1, 5, 17, 31):
        s.generate([[7] * n], SamplingParams(temperature=0.0, max_new_tokens=n % 16 + 1))
    assert len(s.shapes_seen) - n0 <= 1
    s.close()


def test_errors(setup):
    model, cfg, tok, prompts = setup
    s = JaxEngine(model, config=CFG)
    with pytest.raises(ValueError, match='empty prompt'): s.generate([[]])
    with pytest.raises(ValueError, match='outside vocab'): s.generate([[cfg.vocab_size]])
    with pytest.raises(ValueError, match='max_batch=3'): JaxEngineConfig(max_batch=3)



@pytest.mark.timeout(300)
def test_decode_chunks_sample_what_single_steps_sample(setup):
    "Chunks of 3 tokens per loop test give chunk=1's samples bit for bit (issue 41)."
    model, cfg, tok, prompts = setup  # budgets 5 and 13 end inside a chunk; 16 past the last one
    alike = [prompts[2][:16] + p for p in prompts[:4]]
    sp = [SamplingParams(temperature=1.0, max_new_tokens=m, seed=s, top_k=k,
                         stop_token_ids=(tok.eos_token_id,))
          for s, m, k in ((0, 5, 0), (1, 13, 0), (2, 16, 50), (3, 7, 0))]
    got = {}
    for chunk in (1, 3):  # turn 1: a cascaded shared prefix; turn 2: turn 1's keys/values reused
        e = JaxEngine(model, config=dataclasses.replace(
            CFG, decode_chunk=chunk, shared_prefix=16, cascade=True, prefix_cache_tokens=4096))
        o1 = e.generate(alike, sp)
        o2 = e.generate([a + o.token_ids + [5, 6] for a, o in zip(alike, o1)], sp)
        assert e.last_stats['reused_tokens'] > 0
        got[chunk] = [(o.token_ids, o.logprobs, o.finish_reason) for o in o1 + o2]
    assert [len(o[0]) for o in got[1][:4]] == [5, 13, 16, 7]
    assert got[3] == got[1]
