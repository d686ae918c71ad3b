"""Episode tokens/s over bare batched decode tokens/s of the same JaxEngine, at the same batch.

Both halves use the demo's engine (`make_engine`: lockstep, cascade over the 16-token shared
prefix) on the demo's policy (the `calculator` preset: the embedded tiny Qwen2 re-headed and
initialised from seed 0) and the same `max_new_tokens` (the preset's 48), sampled at T=1:
(a) bare decode: `engine.generate` of B first prompts of the demo task, no stop ids (every row
    decodes exactly `max_new_tokens`); tokens/s = B * max_new_tokens / seconds;
(b) episodes: B concurrent episodes of the demo task through `TrajectoryCollector`
    (the demo's env, tools, parser, budgets); tokens/s = sampled tokens / wall seconds.
An untrained policy calls no tool, so its episodes would end after one turn. With `--turns teacher`
(the default) each turn's tokens are sampled by the engine as usual but the agent acts as the
demo's teacher would (the calls a trained policy makes): 3 turns per episode, prompts growing by
the sampled turn and the tool's answer, as in the demo's GRPO steps. `--turns model` parses the
model's own text instead.
After one warm-up of each (compiles excluded from the timings; the compiles of each phase are
counted), --reps reps each time one bare decode, then one collection of B new tasks; the figures
are those of the rep with the median ratio. Runs on a GPU unchanged.

Run: JAX_PLATFORMS=cpu python bench/episode_vs_decode.py [--batch 64 256] [--reps 3]
The last line states the figures. On a shared machine the wall-clock ratio wanders with the load;
the ratio of tokens per process CPU second (printed too) wanders less.

Measured (2 shared CPU cores, load average 9-14, `bench/calibrate.py` 16-28 GFLOP/s), batch 64,
`--reps 5`, ratio = episode tokens/s / bare decode tokens/s:
  before (6d548fc): wall 0.472, 0.524, 0.308 in three runs; per CPU second 0.542, 0.492.
  after, `--decode-chunk 1 --prompt-bucket-step 0` (the old programs): wall 0.515, CPU 0.507;
  after (chunks of 8, prompts padded to the next 64): wall 0.574 (reps 0.50-0.68), CPU 0.609.
  after, again (`--reps 3`, load 10.1): wall 0.646 (0.687, 0.638, 0.646), CPU 0.615.
  Bare decode 2049-3125 tok/s; episodes: 64 x 3 turns, 8970 tokens, the engine busy 90% of the
  wall time in 3 batches of 64 (lockstep); 4 compiles in the warm-up, none in the timed runs.
  What is left of the gap: turn 1 costs what bare decode costs (1.30 s vs 1.34 s), turns 2 and 3
  about 2.1 s each: every turn prefills the whole conversation again (64-192 tokens a row past the
  shared prefix) and decodes over a longer cache.
"""
import argparse, dataclasses, logging, os, statistics, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import jax

from tunix_agentic.core.compiles import compile_events
from tunix_agentic.core.sync import run_sync
from tunix_agentic.engines.engine import SamplingParams
from tunix_agentic.envs.agents import ToolAgent
from tunix_agentic.app.config import load_config
from tunix_agentic.app.calc_tasks import Teacher, make_splits
from tunix_agentic.app.compose import (agent_factory, build_policy, make_collector,
                                       make_engine, prompt_tokens)


class TeacherActs(ToolAgent):
    "The demo's agent whose actions are the teacher's (the model's text is sampled, then ignored)."
    def __init__(self, base: ToolAgent):
        super().__init__(base.system_prompt, parser=base.parser)
        self.teacher, self.question, self.outputs = Teacher(), '', []
    def reset(self, task=None, tools=None):
        super().reset(task, tools)
        self.question, self.outputs = (task or {}).get('question', ''), []
    def observe(self, observation):
        msgs = super().observe(observation)
        self.outputs += [m['content'] for m in msgs if m.get('role') == 'tool']
        return msgs
    def parse(self, response: str):
        said = ''.join(f'<tool_response>\n{o}\n</tool_response>' for o in self.outputs)
        return super().parse(self.teacher(f'{self.question}\n{said}'))


def first_prompts(tok, cfg, tasks) -> list[list[int]]:
    "Each task's first prompt as its episode renders it (system prompt, tools, question)."
    from tunix_agentic.app.compose import env_factory
    from tunix_agentic.envs.environments import task_observation
    agent, env = agent_factory(cfg)(), env_factory(cfg)
    return [tok.apply_chat_template(agent.prompt(task_observation(t)), tokenize=True,
                                    add_generation_prompt=True, tools=env(t).tool_schemas)
            for t in tasks]


def bare_decode(engine, prompts, sp) -> float:
    "Seconds of one `generate` of `prompts` with no stops: every row samples `max_new_tokens`."
    params = [sp.replace(seed=i) for i in range(len(prompts))]
    t0, c0 = time.perf_counter(), time.process_time()
    outs = engine.generate(prompts, params)
    assert all(len(o.token_ids) == sp.max_new_tokens for o in outs), 'a row stopped early'
    return time.perf_counter() - t0, time.process_time() - c0


def episodes(engine, tok, cfg, tasks, turns: str):
    "Wall seconds, sampled tokens, turns and engine seconds of one collection of `tasks`."
    coll = make_collector(engine, tok, cfg, 1, cfg.seed, cfg.episode.sampling.temperature)
    if turns == 'teacher':
        make = coll.agent_fn
        coll.agent_fn = lambda t: TeacherActs(make(t))
    batcher = engine.batcher
    busy, calls, gen = [0.0], [], batcher.batch_fn
    def timed_generate(prompts, params):
        t0 = time.perf_counter()
        try: return gen(prompts, params)
        finally:
            busy[0] += time.perf_counter() - t0
            calls.append((len(prompts), max(map(len, prompts)), time.perf_counter() - t0))
    batcher.batch_fn = timed_generate
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        trajs = run_sync(coll.collect_many(tasks))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally: batcher.batch_fn = gen
    sampled = sum(sum(t.response_mask) for t in trajs)
    n_turns = sum(t.metrics['turns'] for t in trajs)
    return dict(wall=wall, cpu=cpu, tokens=sampled, turns=n_turns, engine_s=busy[0], calls=calls,
                statuses=sorted({t.status.value for t in trajs}))


def one_batch(b: int, reps: int, turns: str, model, tok, cfg, **engine_kw) -> dict:
    "Bare decode and episodes at batch `b`, interleaved rep by rep (load drifts hit both alike)."
    engine = make_engine(model, tok, b, b)
    engine.config = dataclasses.replace(engine.config, **engine_kw)
    sp = SamplingParams(temperature=cfg.episode.sampling.temperature,
                        max_new_tokens=cfg.episode.sampling.max_new_tokens)
    ev = compile_events()
    train, _ = make_splits(cfg.seed, b * (reps + 1), 0)
    prompts = first_prompts(tok, cfg, train[:b])
    n0 = len(ev.programs)
    bare_decode(engine, prompts, sp)
    n_bare = len(ev.programs) - n0
    t0 = time.perf_counter()
    warm = episodes(engine, tok, cfg, train[:b], turns)
    warm_s, n_warm = time.perf_counter() - t0, len(ev.programs) - n0 - n_bare
    runs = []
    for k in range(1, reps + 1):
        t, c = bare_decode(engine, prompts, sp)
        r = episodes(engine, tok, cfg, train[k * b:(k + 1) * b], turns)
        r.update(bare_s=t, bare_tps=b * sp.max_new_tokens / t, ep_tps=r['tokens'] / r['wall'])
        cpu_ratio = r['tokens'] / r['cpu'] / (b * sp.max_new_tokens / c)  # per CPU second
        runs.append(r | dict(ratio=r['ep_tps'] / r['bare_tps'], cpu_ratio=cpu_ratio))
    r = sorted(runs, key=lambda r: r['ratio'])[len(runs) // 2]  # the median rep
    return dict(batch=b, config=engine.config, compiles_bare=n_bare, compiles_warm=n_warm,
                compiles_timed=len(ev.programs) - n0 - n_bare - n_warm,
                shapes=len(engine.shapes_seen), warm_s=warm_s, warm_turns=warm['turns'],
                ratios=[x['ratio'] for x in runs],
                cpu_ratios=[x['cpu_ratio'] for x in runs], **r)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--batch', type=int, nargs='+', default=[64])
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--turns', choices=('teacher', 'model'), default='teacher')
    ap.add_argument('--preset', default='calculator')
    ap.add_argument('--decode-chunk', type=int, help="JaxEngineConfig's (default: make_engine's)")
    ap.add_argument('--prompt-bucket-step', type=int, help="JaxEngineConfig's")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger('tunix_agentic.chat.encoder').setLevel(logging.ERROR)  # random text drifts
    cfg = load_config(a.preset)
    model, tok = build_policy(cfg)
    dev = jax.devices()[0]
    print(f'{a.preset} policy, max_new_tokens {cfg.episode.sampling.max_new_tokens}, '
          f'T={cfg.episode.sampling.temperature:g}, turns: {a.turns}; JAX {jax.__version__} on '
          f'{dev.platform} ({dev.device_kind}), {os.cpu_count()} CPUs, load average '
          f'{os.getloadavg()[0]:.1f}')
    res = []
    for b in a.batch:
        kw = {k: v for k, v in (('decode_chunk', a.decode_chunk),
                                ('prompt_bucket_step', a.prompt_bucket_step)) if v is not None}
        r = one_batch(b, a.reps, a.turns, model, tok, cfg, **kw)
        res.append(r)
        print(f"batch {b}: bare decode {r['bare_tps']:.0f} tok/s ({r['bare_s']:.3f} s, "
              f"{r['compiles_bare']} compiles); episodes {r['ep_tps']:.0f} tok/s ({r['tokens']} "
              f"tokens, {r['turns']} turns in {r['wall']:.2f} s, engine busy {r['engine_s']:.2f} "
              f"s; warm-up {r['warm_s']:.1f} s with {r['compiles_warm']} compiles, "
              f"{r['compiles_timed']} in timed runs; {r['shapes']} engine shapes; "
              f"status {r['statuses']}); ratio {r['ratio']:.3f} (reps: "
              f"{', '.join(f'{x:.3f}' for x in r['ratios'])}); per process CPU second: "
              f"median {statistics.median(r['cpu_ratios']):.3f}")
        print('  engine calls (rows, longest prompt, seconds): ' + ', '.join(
            f'({n}, {p}, {t:.2f})' for n, p, t in r['calls']))
    print(f"engine (the last batch's): {res[-1]['config']}")
    print('RESULT ' + '; '.join(
        f"batch {r['batch']}: episodes {r['ep_tps']:.0f} / bare decode {r['bare_tps']:.0f} tok/s "
        f"= {r['ratio']:.3f}" for r in res) + f' ({dev.platform}, median of {a.reps})')


if __name__ == '__main__':
    main()
    sys.stdout.flush()
