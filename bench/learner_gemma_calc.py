"""The real Gemma 3 270M (GGUF, dequantised to f32) through the product on the calculator task, on CPU:
teacher demonstrations -> a short SFT warm start -> held-out evaluation -> a few GRPO steps (the
collector sampling from a JaxEngine over the policy, Trainer updates with the log-probs in chunks of
tokens) -> the same held-out evaluation. Prints held-out success before/after, steps, seconds per
step and peak RSS. Sized by its flags to a bounded run (the defaults: about 20 minutes on 2 shared
cores), not the hour-long run; the lift is reported as measured.

    nice -n 10 .venv/bin/python bench/learner_gemma_calc.py [--quick]
"""
import argparse, json, resource, time
from pathlib import Path
import numpy as np

p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
p.add_argument('--n-heldout', type=int, default=8)
p.add_argument('--n-demos', type=int, default=64)
p.add_argument('--sft-steps', type=int, default=8)
p.add_argument('--sft-batch', type=int, default=4)
p.add_argument('--sft-lr', type=float, default=5e-5)
p.add_argument('--rl-steps', type=int, default=3)
p.add_argument('--tasks-per-step', type=int, default=2)
p.add_argument('--group-size', type=int, default=4)
p.add_argument('--rl-lr', type=float, default=1e-5)
p.add_argument('--rl-micro', type=int, default=4, help='micro_batches of the GRPO update')
p.add_argument('--logit-chunk', type=int, default=512)
p.add_argument('--max-new-tokens', type=int, default=48)
p.add_argument('--eval-temperature', type=float, default=0.0, help='0: greedy held-out evaluation')
p.add_argument('--out', default='runs/gemma_calc')
p.add_argument('--quick', action='store_true', help='a smoke run: 2 held-out, 1 SFT and 1 GRPO step')
a = p.parse_args()
if a.quick:
    a.n_heldout, a.n_demos, a.sft_steps, a.sft_batch, a.rl_steps, a.tasks_per_step, a.group_size = (
        2, 4, 1, 2, 1, 1, 2)
    a.rl_micro = 1

import gguf
from flax import nnx
from tunix_agentic.models.gguf_io import gemma3_270m_gguf, gguf_metadata, gguf_tokenizer, load_gguf
from tunix_agentic.chat.tokenizer import GEMMA_CHAT_TEMPLATE  # with tool turns (the GGUF has none)
from tunix_agentic.app.calc_tasks import Teacher, make_splits, demonstrations, diagnose, calc_env, calc_agent
from tunix_agentic.app.demo import DemoConfig, evaluate, engine_on_copy
from tunix_agentic.learn.trainer import Trainer, TrainerConfig
from tunix_agentic.learn.loop import run_coro
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.rollout.collector import TrajectoryCollector, CollectConfig

rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
t_start, times = time.perf_counter(), {}
path = gemma3_270m_gguf()
tok = gguf_tokenizer(gguf_metadata(gguf.GGUFReader(str(path))), chat_template=GEMMA_CHAT_TEMPLATE)
t = time.perf_counter(); model, mcfg = load_gguf(path, 'float32'); times['load_s'] = time.perf_counter() - t
dcfg = DemoConfig(seed=0, n_heldout=a.n_heldout, n_greedy=1, temperature=a.eval_temperature or 1.0,
                  max_new_tokens=a.max_new_tokens, max_turns=4, max_seq_len=1024, progress=False)
train, held = make_splits(0, max(400, a.n_demos), a.n_heldout)
t = time.perf_counter()
demos = demonstrations(train[:a.n_demos], tok, Teacher(wrong_tool=0.0, wrong_arg=0.0, wrong_answer=0.0),
                       max_turns=4, max_seq_len=1024)
times['demos_s'] = time.perf_counter() - t
demo_lens = [len(d.input_ids) for d in demos]
buckets = (256, 384, 512, 768, 1024)
pad = tok.pad_token_id or 0
common = dict(buckets=buckets, pad_id=pad, logit_chunk=a.logit_chunk)


def heldout(model, label):
    t = time.perf_counter()
    engine = engine_on_copy(model, tok, max(a.n_heldout, a.tasks_per_step * a.group_size))
    d, trajs = evaluate(engine, tok, held, dcfg, a.eval_temperature)
    engine.close()
    times[f'eval_{label}_s'] = time.perf_counter() - t
    return d, trajs


sft = Trainer(model, TrainerConfig(learning_rate=a.sft_lr, **common))
sft_rows, sft_step_s = [], []
for s in range(a.sft_steps):
    rows = [demos[(s * a.sft_batch + i) % len(demos)] for i in range(a.sft_batch)]
    t = time.perf_counter(); m = sft.update(sft.batch_from(rows, 'sft'), 'sft')
    sft_step_s.append(time.perf_counter() - t); sft_rows.append(m['loss'])
    print(f'sft step {s}: loss {m["loss"]:.3f} ({sft_step_s[-1]:.1f} s)', flush=True)
before, trajs_before = heldout(sft.model, 'before')
print('held-out after SFT:', before, flush=True)

rl = Trainer(sft.model, TrainerConfig(learning_rate=a.rl_lr, micro_batches=a.rl_micro, **common))
del sft  # its optimizer state
engine = engine_on_copy(rl.model, tok, a.tasks_per_step * a.group_size)
coll = TrajectoryCollector(engine, tok, lambda t: calc_env(t, 4), agent_fn=calc_agent, config=CollectConfig(
    max_turns=4, max_seq_len=1024, group_size=a.group_size, seed=0,
    sampling=SamplingParams(temperature=1.0, max_new_tokens=a.max_new_tokens)))
rl_records = []
for s in range(a.rl_steps):
    tasks = train[a.n_demos + s * a.tasks_per_step:a.n_demos + (s + 1) * a.tasks_per_step]
    t = time.perf_counter(); trajs = run_coro(coll.collect_many(tasks, step=s))
    t_collect = time.perf_counter() - t
    t = time.perf_counter(); m = rl.update(rl.batch_from(trajs, 'grpo'), 'grpo')
    t_update = time.perf_counter() - t
    engine.update_params(nnx.state(rl.model), rl.step)
    rl_records.append(dict(step=s, success=float(np.mean([tr.reward for tr in trajs])),
                           loss=m['loss'], collect_s=t_collect, update_s=t_update,
                           tokens=len(trajs) and int(sum(len(tr.input_ids) for tr in trajs))))
    print('grpo', rl_records[-1], flush=True)
engine.close()
after, trajs_after = heldout(rl.model, 'after')
print('held-out after GRPO:', after, flush=True)
times['total_s'] = time.perf_counter() - t_start
summary = dict(model='Gemma 3 270M (GGUF Q4_K_M dequantised to f32)', args=vars(a),
               demo_tokens_mean=float(np.mean(demo_lens)), teacher=diagnose(demos),
               heldout_before=before, heldout_after=after, sft_losses=sft_rows, sft_step_s=sft_step_s,
               rl=rl_records, times=times, peak_rss_gb=rss())
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
(out / 'summary.json').write_text(json.dumps(summary, indent=2))
med = lambda x: float(np.median(x)) if x else float('nan')
print(f'\n{"":34s}{"value":>12s}')
for k, v in [('held-out problems', a.n_heldout),
             ('held-out success after SFT', f'{before["final_answer"]:.0%}'),
             ('held-out success after GRPO', f'{after["final_answer"]:.0%}'),
             ('SFT steps x rows', f'{a.sft_steps} x {a.sft_batch}'),
             ('SFT s/step (median, 1st incl. compile)', f'{med(sft_step_s[1:] or sft_step_s):.1f}'),
             ('GRPO steps x episodes', f'{a.rl_steps} x {a.tasks_per_step * a.group_size}'),
             ('GRPO s/step (collect + update, median)',
              f'{med([r["collect_s"] + r["update_s"] for r in rl_records]):.1f}'),
             ('peak RSS GB', f'{rss():.2f}'), ('wall s', f'{times["total_s"]:.0f}')]:
    print(f'{k:40s}{str(v):>12s}')
print('RESULT ' + json.dumps({k: summary[k] for k in ('heldout_before', 'heldout_after', 'peak_rss_gb', 'times')}))
