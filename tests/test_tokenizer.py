"Tests for the tiny tokenizer: determinism, special tokens, save/load round trip, chat template."
import hashlib
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tunix_agentic.chat.tokenizer import (SPECIAL_TOKENS, TINY_CHAT_TEMPLATE, TINY_SPEC,
                                     build_tiny_tokenizer)


def _digests(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_deterministic_files(tmp_path):
    build_tiny_tokenizer(tmp_path / 'a')
    build_tiny_tokenizer(tmp_path / 'b')
    a, b = _digests(tmp_path / 'a'), _digests(tmp_path / 'b')
    assert a == b
    assert {'tokenizer.json', 'tokenizer_config.json'} <= set(a)


def test_deterministic_across_processes(tmp_path):
    "A fresh interpreter (new hash seed) builds the same tokenizer.json."
    import subprocess, sys, os
    code = ("from tunix_agentic.chat.tokenizer import build_tiny_tokenizer; import sys; "
            "build_tiny_tokenizer(sys.argv[1])")
    for name, seed in (('x', '1'), ('y', '2')):
        subprocess.run([sys.executable, '-c', code, str(tmp_path / name)], check=True, timeout=120,
                       env={**os.environ, 'PYTHONHASHSEED': seed})
    assert _digests(tmp_path / 'x') == _digests(tmp_path / 'y')


def test_special_tokens_single_and_fixed():
    tok = build_tiny_tokenizer()
    assert len(tok) == TINY_SPEC.vocab_size == 1024
    for t, i in TINY_SPEC.special_ids.items():
        assert tok.encode(t) == [i], t
        assert tok.convert_ids_to_tokens(i) == t
    assert list(TINY_SPEC.special_ids) == list(SPECIAL_TOKENS)
    assert tok.eos_token_id == TINY_SPEC.eos_id and tok.pad_token_id == TINY_SPEC.pad_id
    # special tokens glued to text still split out
    ids = tok.encode('x<tool_call>{"a":1}</tool_call><|im_end|>')
    assert TINY_SPEC.tool_call_start_id in ids and TINY_SPEC.tool_call_end_id in ids
    assert ids[-1] == TINY_SPEC.eos_id


def test_digits_split():
    tok = build_tiny_tokenizer()
    for n in ('0', '12', '408', '1234567890', '3.14', '-42'):
        toks = [tok.decode([i]) for i in tok.encode(n)]
        assert ''.join(toks) == n
        assert all(len(t) == 1 for t in toks if t.isdigit() or any(c.isdigit() for c in t)), toks


@pytest.mark.parametrize('text', ['', ' ', 'hello', 'héllo wörld ✓ 日本語 😀', '\n\n\t  x  \r\n',
                                  'a' * 500, '{"name": "add", "arguments": {"a": "\\"q\\""}}'])
def test_roundtrip_text(text):
    tok = build_tiny_tokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_save_load_roundtrip(tmp_path):
    tok = build_tiny_tokenizer(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    assert back.chat_template == TINY_CHAT_TEMPLATE
    assert len(back) == len(tok)
    assert (back.eos_token, back.pad_token) == ('<|im_end|>', '<|endoftext|>')
    msgs = [{'role': 'user', 'content': 'What is 12*34?'}]
    assert (back.apply_chat_template(msgs, add_generation_prompt=True)
            == tok.apply_chat_template(msgs, add_generation_prompt=True))


def test_template_tools_layout():
    tok = build_tiny_tokenizer()
    tools = [{'type': 'function', 'function': {'name': 'add', 'parameters': {'type': 'object'}}}]
    msgs = [{'role': 'user', 'content': 'hi'},
            {'role': 'assistant', 'content': 'Sure.', 'tool_calls': [
                {'function': {'name': 'add', 'arguments': {'a': 'ü'}}}]},
            {'role': 'tool', 'content': 'r1'},
            {'role': 'user', 'content': 'thanks'}]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False)
    assert text.startswith('<|im_start|>system\n# Tools\n')
    assert ('<|im_start|>assistant\nSure.\n<tool_call>\n{"name": "add", "arguments": {"a": "ü"}}\n'
            '</tool_call><|im_end|>\n') in text
    assert '<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n' in text
    assert text.endswith('<|im_start|>user\nthanks<|im_end|>\n')


# Pinned: changing the corpus, trainer or special tokens changes token ids and silently breaks every
# saved tiny model, so such a change must be deliberate (update these two values with it).
VOCAB_SHA256 = 'd05c3409e3f35b3326f12928eb8545896f9babcbb284ead9f4b1191c2b5bb2f1'
PINNED_IDS = [522, 672, 32, 52, 56, 488, 59, 264, 485, 291, 32, 55, 50, 46]


def test_pinned_vocab_and_ids():
    import json
    tok = build_tiny_tokenizer()
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()
    assert digest == VOCAB_SHA256
    assert tok.encode('Natalia sold 48 clips; the answer is 72.') == PINNED_IDS


def test_llama3_template_tool_instructions_match_llama_3_1():
    """The tool instructions our Llama 3 template writes are Llama 3.1's text to the character
    (meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json: `value}.` then `Do not`, no space)."""
    import json
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    official = ('<|start_header_id|>user<|end_header_id|>\n\n'
                'Given the following functions, please respond with a JSON for a function call '
                'with its proper arguments that best answers the given prompt.\n\n'
                'Respond in the format {"name": function name, "parameters": dictionary of '
                'argument name and its value}.Do not use variables.\n\n')
    tok = build_tiny_tokenizer(style='llama3')
    tool = {'type': 'function', 'function': {'name': 'add', 'parameters': {'type': 'object'}}}
    text = tok.apply_chat_template([{'role': 'user', 'content': 'Hi'}], tools=[tool],
                                   tokenize=False, add_generation_prompt=True)
    assert official + json.dumps(tool, indent=4) + '\n\nHi<|eot_id|>' in text
