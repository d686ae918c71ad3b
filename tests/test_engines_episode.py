"""One multi-turn calculator episode collected through each engine (vanilla JAX sampler and the
real sglang-jax engine) with the collector: masks and logprobs consistent with the model.

A random tiny model never writes a tool call, so the default model is first taught (teacher
forcing, a few hundred Adam steps on one sequence) to answer the calculator task with the scripted
two tool calls and a final answer. The engines then *sample* that episode greedily; nothing is
scripted at collection time."""
import threading

import numpy as np
import optax
import pytest
import jax, jax.numpy as jnp
from flax import nnx

from tunix_agentic.chat.encoder import response_spans as _spans
from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.models.default import default_model_dir, load_default
from tunix_agentic.engines.engine import ScriptedEngine, SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
from tunix_agentic.core.trajectory import TrajectoryStatus as S

from conftest import CALC_SCRIPT, CALC_TASK, calc_group

SCRIPT, TASK = CALC_SCRIPT, CALC_TASK
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=64)


def collect(engine, tok):
    coll = TrajectoryCollector(engine, tok, calc_group(),
                                  config=CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(sampling=GREEDY, episode_timeout_s=600.0)))  # slow CI
    [t] = coll.run([TASK])
    return t


def teach(model, ids, mask, steps=300):
    "Teacher-force `model` on the mask-1 tokens of one sequence until greedy reproduces them."
    x, y = jnp.asarray([ids[:-1]]), jnp.asarray([ids[1:]])
    w = jnp.asarray([mask[1:]], jnp.float32)
    opt = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
        def loss_fn(m):
            lp = jax.nn.log_softmax(m(x), -1)
            nll = -jnp.take_along_axis(lp, y[..., None], -1)[..., 0]
            return (nll * w).sum() / w.sum()
        loss, g = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, g)
        return loss

    @nnx.jit
    def exact(model):
        return jnp.all((jnp.argmax(model(x), -1) == y) | (w == 0))

    for i in range(steps):
        loss = step(model, opt)
        if i % 25 == 24 and bool(exact(model)): break
    assert bool(exact(model)), f'not memorised after {i + 1} steps (loss {float(loss):.3g})'
    return model


def ref_logprobs(model, ids):
    lg = np.asarray(nnx.jit(lambda m, x: m(x))(model, jnp.asarray([ids]))[0], np.float64)
    lg = lg - lg.max(-1, keepdims=True)
    lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    return np.concatenate([[0.0], lp[np.arange(len(ids) - 1), ids[1:]]])  # lp of token t at t


def check(t, golden, model, name):
    assert (t.status, t.reward, t.error) == (S.DONE, 1.0, None), (name, t.status, t.error)
    assert sum(len(s.action.tool_calls) for s in t.steps if s.action is not None) == 2, name
    assert t.input_ids == golden.input_ids and t.response_mask == golden.response_mask, name
    m = np.asarray(t.response_mask, bool)
    lp = np.asarray(t.logprobs)
    assert len(lp) == len(t.input_ids) and np.all(lp[~m] == 0.0), name
    ref = ref_logprobs(model, t.input_ids)
    err = np.abs(lp[m] - ref[m]).max()
    assert err < 1e-4, (name, err)
    return err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_calculator_episode_through_both_engines():
    model, cfg, tok = load_default()
    golden = collect(ScriptedEngine(tok, SCRIPT), tok)
    assert golden.status == S.DONE and golden.reward == 1.0
    teach(model, golden.input_ids, golden.response_mask)

    vanilla = JaxEngine(model, config=JaxEngineConfig(max_batch=4))
    tv = collect(vanilla, tok)
    err_v = check(tv, golden, model, 'vanilla')

    from tunix_agentic.engines.sglang_config import SglangConfig
    from tunix_agentic.engines.sglang_engine import SglangJaxEngine
    sg = SglangJaxEngine(default_model_dir(), SglangConfig.cpu(
        context_length=1024, max_total_tokens=8192, max_prefill_tokens=2048,
        chunked_prefill_size=1024, timeout_s=300))
    calls, generate = [], sg.generate
    def recording(prompts, params=None):  # each turn's prompt and what the radix cache served of it
        outs = generate(prompts, params)
        calls.extend(zip(map(len, prompts), sg.last_stats['reused'], (len(o.token_ids) for o in outs)))
        return outs
    sg.generate = recording
    try:
        sg.update_params(model)        # the taught weights, hot-swapped into the engine
        ts = collect(sg, tok)
    finally:
        sg.close()   # ends sglang-jax's scheduler thread (it used to spin for the life of the process)
    assert not any(th.name.startswith('sglang::scheduler') for th in threading.enumerate())
    err_s = check(ts, golden, model, 'sglang')
    same = np.abs(np.asarray(ts.logprobs) - np.asarray(tv.logprobs)).max()
    assert same < 1e-4
    # the radix cache is on (the CPU preset): turn k+1 reuses all of turn k's prompt and output but
    # the output's last token (never fed back), and prefills only the tool result
    assert len(calls) == 3 and calls[0][1] == 0, calls
    for (p0, _, n0), (p1, reused, _) in zip(calls, calls[1:]): assert reused == p0 + n0 - 1, calls
    hits = [f'{r / p:.0%}' for p, r, _ in calls[1:]]
    turns = [(a, b) for a, b in _spans(tv.response_mask)]
    print(f'episode: {len(tv.input_ids)} tokens, assistant spans {turns}, 2 tool calls, reward '
          f'{tv.reward}; max |logprob - model| vanilla {err_v:.1e}, sglang {err_s:.1e}; '
          f'vanilla vs sglang {same:.1e}; sglang radix-cache hits of the prompt on turns 2, 3: {hits} '
          f'(turn, prompt, reused, new tokens: {calls})')


