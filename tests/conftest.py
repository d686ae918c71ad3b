"""Shared pytest setup: markers that mirror the notebook flags, CPU JAX by default, gpu tests skipped
where no accelerator is present, the independent mask oracle of the golden-mask tests, and the
scripted calculator episode (`CALC_TASK`, `CALC_SCRIPT`, `calc_group`) that several files drive."""
import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

import pytest


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: takes more than ~20 s (mirrors the #| slow notebook flag)')
    config.addinivalue_line('markers', 'gpu: needs an accelerator (mirrors the #| gpu notebook flag)')


def pytest_collection_modifyitems(config, items):
    if os.environ.get('JAX_PLATFORMS', 'cpu') != 'cpu': return
    skip = pytest.mark.skip(reason='needs an accelerator; JAX_PLATFORMS=cpu here')
    for item in items:
        if 'gpu' in item.keywords: item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    "The peak resident set of this process or of a child it waited for: `.ci/test` prints it per file."
    if path := os.environ.get('TEST_PEAK_RSS_FILE'):
        import resource
        kb = max(resource.getrusage(who).ru_maxrss
                 for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        with open(path, 'w') as f: f.write(str(kb))


def _oracle_mask(ids: list[int], prompt_len: int, header: list[int], end_id: int) -> list[int]:
    """A response mask from the token structure alone: 1 after each assistant `header` past the
    prompt, through the next `end_id` (the end-of-turn token) included; 0 everywhere else."""
    mask, i = [0] * len(ids), 0
    while i < len(ids):
        if ids[i:i + len(header)] == header and i + len(header) >= prompt_len:
            j = i + len(header)
            while j < len(ids) and ids[j] != end_id: mask[j] = 1; j += 1
            if j < len(ids): mask[j] = 1
            i = j + 1
        else:
            i += 1
    return mask


@pytest.fixture
def oracle_mask():
    "The independent mask oracle the golden-mask tests compare the encoder's mask with."
    return _oracle_mask


# The scripted calculator episode: `12*34+17` by a multiply call, an add call, then the answer
# (Hermes/Qwen `<tool_call>` format). Test files import these: `from conftest import CALC_SCRIPT`.
CALC_TASK = {'task_type': 'calc', 'question': 'What is 12*34+17?', 'answer': '#### 425'}
CALC_ANSWER = '12*34 = 408 and 408 + 17 = 425. #### 425'
CALC_SCRIPT = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
               '<tool_call>\n{"name": "add", "arguments": {"a": 408, "b": 17}}\n</tool_call>',
               CALC_ANSWER]
QA_TASK = {'task_type': 'qa', 'question': 'Capital of France?', 'answer': 'Paris'}


def calc_group(max_turns: int = 5, extra_tools: tuple = (), qa: bool = False):
    "An `EnvGroup` with the calculator tools under 'calc' (gsm8k reward); `qa` adds a single-turn 'qa'."
    from tunix_agentic.tools.builtin import calculator_tools
    from tunix_agentic.envs.environments import EnvGroup, EnvSpec
    specs = {'calc': EnvSpec(env='tool', tools=calculator_tools() + list(extra_tools),
                             reward_fn='gsm8k', max_turns=max_turns)}
    if qa: specs['qa'] = EnvSpec(env='single_turn', reward_fn='exact_match', max_turns=1)
    return EnvGroup(specs)


def two_sync_steps_over_workers(pool, tasks, out_dir):
    """`OnlineLoop` on a tiny trainer for two sync steps over a pool of two rollout workers
    (`RayCollector` or `ProcessCollector`): every step trains on 4 fresh episodes and every worker
    gets every weight version."""
    from flax import nnx
    from tunix_agentic.learn.loop import LoopConfig, OnlineLoop, read_metrics
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    mcfg = ModelConfig.tiny(vocab_size=len(build_tiny_tokenizer()), num_layers=1, hidden_size=32,
                            intermediate_size=64, head_dim=16)
    tr = Trainer(Qwen2(mcfg, rngs=nnx.Rngs(0)), TrainerConfig.tiny(buckets=(1024,)))
    lp = OnlineLoop(tr, pool, tasks, LoopConfig.tiny(mode='sync', steps=2, output_dir=str(out_dir),
                                                     tensorboard=False))
    recs = lp.run()
    assert [r['step'] for r in recs] == [0, 1] and all(r['episodes'] == 4 for r in recs)
    assert pool.weights.versions() == [[0, 1, 2], [0, 1, 2]]  # every worker got every version
    assert all(r['max_staleness_trained'] == 0 for r in recs)
    assert len(read_metrics(out_dir / 'metrics.jsonl')) == 2
