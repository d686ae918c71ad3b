"""A model trained through the product (`Run`: SFT warm start and a GRPO step), saved with
`Run.save()`, served by sglang-jax from the saved folder: its greedy tokens equal our JaxEngine's on
the same folder read back by our loader, prompt for prompt (issue 25: saved models others load)."""
import logging
import numpy as np
import pytest

sgl = pytest.importorskip('sgl_jax')
import jax, jax.numpy as jnp
from flax import nnx
from transformers import AutoTokenizer

from tunix_agentic.app.calc_tasks import SYSTEM_PROMPT
from tunix_agentic.app.run import Run
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
from tunix_agentic.engines.sglang_config import SglangConfig
from tunix_agentic.engines.sglang_engine import SglangJaxEngine
from tunix_agentic.models.qwen2 import load_hf

pytestmark = pytest.mark.slow
_log = logging.getLogger(__name__)
NEW_TOKENS = 48


def params_of(model) -> dict:
    "Host copies of a model's parameters by path."
    return {jax.tree_util.keystr(p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.Param))[0]}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "A `calculator_quick` run on the un-re-headed default model (head_dim 128: sglang-jax on CPU "
    "pads head_dim to 128), warm-started and one GRPO step on; saved with `Run.save()`."
    out = tmp_path_factory.mktemp('run')
    run = Run.from_config('calculator_quick', overrides=[
        f'log.output_dir={out}', 'model.num_heads=null', 'model.num_kv_heads=null',
        'model.head_dim=null', 'log.tensorboard=false'])
    initial = params_of(run.model)
    run.warm_start()
    run.step()
    trained = params_of(run.learner.model)
    saved = run.save()
    return saved, initial, trained, run.heldout


def test_saved_folder_is_what_sglang_jax_and_our_loader_read(trained):
    saved, initial, weights, _ = trained
    names = {p.name for p in saved.iterdir()}
    assert {'config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'} <= names
    assert any(not np.array_equal(initial[k], weights[k]) for k in weights)  # training moved them
    model, _ = load_hf(saved)
    back = params_of(model)
    assert back.keys() == weights.keys()
    assert all(np.array_equal(back[k], weights[k]) for k in weights)   # bit-exact round trip
    tok = AutoTokenizer.from_pretrained(str(saved))
    assert tok.chat_template and '<|im_start|>' in tok.chat_template


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                None if len(a) == len(b) else min(len(a), len(b)))


def test_sglang_jax_greedy_tokens_equal_our_engines(trained):
    saved, _, _, heldout = trained
    tok = AutoTokenizer.from_pretrained(str(saved))
    questions = [t['question'] for t in heldout[:5]] + ['What is 2+3?', 'Hi']
    prompts = [tok.apply_chat_template([{'role': 'system', 'content': SYSTEM_PROMPT},
                                        {'role': 'user', 'content': q}], add_generation_prompt=True)
               for q in questions]
    longest = max(map(len, prompts)) + NEW_TOKENS
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    model, _ = load_hf(saved)
    ours = JaxEngine(model, config=JaxEngineConfig(max_batch=8)).generate(prompts, greedy)
    ctx = 1 << (longest - 1).bit_length()
    engine = SglangJaxEngine(saved, SglangConfig.cpu(
        timeout_s=300, context_length=ctx, max_total_tokens=8 * ctx, max_prefill_tokens=2 * ctx,
        max_running_requests=8))
    try: theirs = engine.generate(prompts, greedy)
    finally: engine.close()
    rows = [(len(p), len(o.token_ids), len(s.token_ids), first_divergence(o.token_ids, s.token_ids))
            for p, o, s in zip(prompts, ours, theirs)]
    worst = max(float(np.abs(np.asarray(o.logprobs) - np.asarray(s.logprobs)).max())
                for o, s in zip(ours, theirs) if o.token_ids == s.token_ids and o.token_ids)
    print(f'{len(prompts)} prompts (prompt, ours, sglang-jax tokens, first divergence): {rows}; '
          f'max |logprob diff| where equal: {worst:.2e}')
    assert [o.token_ids for o in ours] == [s.token_ids for s in theirs], rows
    assert sum(len(o.token_ids) for o in ours) >= len(prompts) * 8   # not a trivially short stop
    assert worst < 1e-3
