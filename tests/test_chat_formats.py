"""Chat formats beyond Qwen: whole calculator episodes through the collector (and the stepper) on
the tiny Llama-3-style and Gemma-style tokenizers, with golden token-level masks; the end of turn
comes from each template (`chat.chat_format`), and a template without one is refused by name."""
import pytest

from tunix_agentic.envs.agents import ToolAgent
from tunix_agentic.chat.encoder import EpisodeEncoder, chat_format, mask_runs, response_spans
from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.ui.episode_driver import EpisodeDriver, run_async
from tunix_agentic.engines.engine import SamplingParams, ScriptedEngine
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import TrajectoryStatus as S

from conftest import CALC_ANSWER, CALC_SCRIPT, CALC_TASK, calc_group

TASK, ANSWER, HERMES = CALC_TASK, CALC_ANSWER, CALC_SCRIPT
LLAMA = ['{"name": "multiply", "parameters": {"a": 12, "b": 34}}',
         '{"name": "add", "parameters": {"a": 408, "b": 17}}', ANSWER]
LLAMA_HDR = '<|start_header_id|>assistant<|end_header_id|>\n\n'
GEMMA_TURN = '<end_of_turn>\n<start_of_turn>model\n'

# style -> (parser, script, end of turn, golden mask runs, golden mask-0 gaps between the turns)
CASES = {
    'llama3': ('llama3_json', LLAMA, '<|eot_id|>',
               # one token less than before issue 29: Llama 3.1's `value}.Do not` has no space
               [(0, 1249, 0), (1249, 1273, 1), (1273, 1290, 0), (1290, 1315, 1), (1315, 1332, 0),
                (1332, 1363, 1)],
               ['<|start_header_id|>ipython<|end_header_id|>\n\n408<|eot_id|>' + LLAMA_HDR,
                '<|start_header_id|>ipython<|end_header_id|>\n\n425<|eot_id|>' + LLAMA_HDR]),
    'gemma': ('qwen', HERMES, '<end_of_turn>',
              [(0, 474, 0), (474, 507, 1), (507, 544, 0), (544, 578, 1), (578, 615, 0),
               (615, 646, 1)],
              ['\n<start_of_turn>user\n<tool_response>\n408\n</tool_response>' + GEMMA_TURN,
               '\n<start_of_turn>user\n<tool_response>\n425\n</tool_response>' + GEMMA_TURN]),
}


def envs(): return calc_group()


def config():
    return CollectConfig.tiny(group_size=1, episode=EpisodeConfig.tiny(max_seq_len=2048, drift_policy='error'))


def schemas():
    return [t.schema for t in calculator_tools()]


def collect(style):
    parser, script = CASES[style][:2]
    tok = build_tiny_tokenizer(style=style)
    coll = TrajectoryCollector(ScriptedEngine(tok, script, logprob=-0.25), tok, envs(),
                               agent_fn=lambda task: ToolAgent(parser_name=parser),
                               config=config())
    return tok, coll, coll.run([TASK])[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize('style', ['llama3', 'gemma'])
def test_episode_golden_masks(style, oracle_mask):
    _, script, eot_text, golden_runs, gaps = CASES[style]
    tok, coll, t = collect(style)
    fmt = chat_format(tok)
    eot = tok.convert_tokens_to_ids(eot_text)
    assert (fmt.end_of_turn, fmt.end_id) == (eot_text, eot) and coll.chat_format is fmt
    assert (t.status, t.reward, t.error) == (S.DONE, 1.0, None)
    m = t.metrics
    assert (m['turns'], m['tool_calls'], m['tool_errors'], m['parse_errors'], m['drift']) == \
        (3, 2, 0, 0, 0)
    # golden token-level mask: the runs, and 1 exactly where the token structure says it is sampled
    assert mask_runs(t.response_mask) == golden_runs
    header = tok.encode(fmt.assistant_header, add_special_tokens=False)
    assert t.response_mask == oracle_mask(t.input_ids, t.prompt_len, header, eot)
    # mask-1 runs are the sampled ids: the script's tokens plus the end-of-turn token
    spans = response_spans(t.response_mask)
    assert [t.input_ids[a:b] for a, b in spans] == \
        [tok.encode(s, add_special_tokens=False) + [eot] for s in script]
    assert [tok.decode(t.input_ids[a:b]) for a, b in spans] == [s + eot_text for s in script]
    # mask-0 gaps are exactly the tool turns and the template's scaffolding
    assert [tok.decode(t.input_ids[b:a2]) for (_, b), (a2, _) in zip(spans, spans[1:])] == gaps
    # the prompt is the template's own render, all mask 0
    prompt = tok.apply_chat_template(t.messages[:2], tools=schemas(), add_generation_prompt=True)
    assert t.input_ids[:t.prompt_len] == prompt and not any(t.response_mask[:t.prompt_len])
    # logprobs: the engine's on mask 1, 0.0 elsewhere
    assert all(lp == (-0.25 if k else 0.0) for lp, k in zip(t.logprobs, t.response_mask))
    # the whole sequence re-renders from the messages (Gemma adds the newline after its last turn)
    full = tok.apply_chat_template(t.messages, tools=schemas())
    assert full == t.input_ids + ([] if style == 'llama3' else tok.encode('\n'))


@pytest.mark.timeout(60)
@pytest.mark.parametrize('style', ['llama3', 'gemma'])
def test_stepper_matches_collector(style):
    parser, script = CASES[style][:2]
    tok, coll, ref = collect(style)
    d = EpisodeDriver(tok, ScriptedEngine(tok, script, logprob=-0.25), config().episode,
                      agent_fn=lambda task: ToolAgent(parser_name=parser))
    run_async(d.reset(envs().make(TASK), TASK, seed=ref.metrics['env_seed']))
    while not d.done: t = run_async(d.step())
    for k in ('input_ids', 'response_mask', 'logprobs', 'messages', 'prompt_len', 'reward',
              'status'):
        assert getattr(t, k) == getattr(ref, k), k
    # a typed turn ends with the template's end of turn too
    run_async(d.reset(envs().make(TASK), TASK, seed=0))
    t = run_async(d.step(text=ANSWER))
    assert t.input_ids[-1] == chat_format(tok).end_id and t.response_mask[-1] == 1


def test_formats_elsewhere():
    llama, gemma = build_tiny_tokenizer(style='llama3'), build_tiny_tokenizer(style='gemma')
    eot, end_of_turn, eos = (llama.convert_tokens_to_ids('<|eot_id|>'),
                             *gemma.convert_tokens_to_ids(['<end_of_turn>', '<eos>']))
    # ScriptedEngine: closes with the template's end of turn, counts turns by its assistant header
    p = ScriptedEngine(gemma, ['first', 'second'])
    assert (p.end_id, p.turn_marker) == (end_of_turn, '<start_of_turn>model\n')
    two = gemma.apply_chat_template([{'role': 'user', 'content': 'q'},
                                     {'role': 'assistant', 'content': 'first'},
                                     {'role': 'user', 'content': 'q2'}], add_generation_prompt=True)
    assert gemma.decode(p.generate([two], [SamplingParams()])[0].token_ids) == 'second<end_of_turn>'
    # EpisodeEncoder and EngineServer take the same end of turn / stop ids
    assert EpisodeEncoder(llama).eot_id == eot
    assert EngineServer(p, gemma).end_ids == sorted([end_of_turn, eos])
    assert EngineServer(p, llama).end_ids == [eot]


def test_template_without_end_of_turn_is_refused_by_name():
    tok = build_tiny_tokenizer(style='llama3')
    tok.chat_template = ("{% for m in messages %}{{ m.role + ': ' + m.content + '\n' }}{% endfor %}"
                         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    with pytest.raises(ValueError, match=r'tokenizer PreTrainedTokenizerFast: no special token '
                                         r'closes the assistant turn.*expected an end-of-turn'):
        TrajectoryCollector(ScriptedEngine(build_tiny_tokenizer(), ['x']), tok, envs())
    for make in (lambda: ScriptedEngine(tok, ['x']), lambda: EpisodeEncoder(tok),
                 lambda: EpisodeDriver(tok)):
        with pytest.raises(ValueError, match='no special token closes the assistant turn'):
            make()
