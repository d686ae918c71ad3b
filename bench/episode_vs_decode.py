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
Each figure is the median of --reps timed runs after one warm-up run (compiles excluded from
the timings; the compiles of each phase are counted). Runs on a GPU unchanged.

Run: JAX_PLATFORMS=cpu python bench/episode_vs_decode.py [--batch 64 256] [--reps 3]
The last line states the figures.
"""
import argparse, logging, os, re, statistics, sys, time

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


def bare_decode(engine, tok, tasks, sp, cfg, reps):
    "Median seconds of one `generate` of every task's first prompt (no stops), after a warm-up."
    agent = agent_factory(cfg)()
    from tunix_agentic.app.compose import env_factory
    from tunix_agentic.envs.environments import task_observation
    prompts = [tok.apply_chat_template(agent.prompt(task_observation(t)), tokenize=True,
                                       add_generation_prompt=True,
                                       tools=env_factory(cfg)(t).tool_schemas) for t in tasks]
    params = [sp.replace(seed=i) for i in range(len(tasks))]
    outs = engine.generate(prompts, params)
    assert all(len(o.token_ids) == sp.max_new_tokens for o in outs), 'a row stopped early'
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        engine.generate(prompts, params)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def episodes(engine, tok, cfg, tasks, turns: str):
    "Wall seconds, sampled tokens, turns and engine seconds of one collection of `tasks`."
    coll = make_collector(engine, tok, cfg, 1, cfg.seed, cfg.episode.sampling.temperature)
    if turns == 'teacher':
        make = coll.agent_fn
        coll.agent_fn = lambda t: TeacherActs(make(t))
    batcher = engine.batcher
    busy, gen = [0.0], batcher.batch_fn
    def timed_generate(prompts, params):
        t0 = time.perf_counter()
        try: return gen(prompts, params)
        finally: busy[0] += time.perf_counter() - t0
    batcher.batch_fn = timed_generate
    try:
        t0 = time.perf_counter()
        trajs = run_sync(coll.collect_many(tasks))
        wall = time.perf_counter() - t0
    finally: batcher.batch_fn = gen
    sampled = sum(sum(t.response_mask) for t in trajs)
    n_turns = sum(t.metrics['turns'] for t in trajs)
    return dict(wall=wall, tokens=sampled, turns=n_turns, engine_s=busy[0],
                statuses=sorted({t.status.value for t in trajs}))


def one_batch(b: int, reps: int, turns: str, model, tok, cfg) -> dict:
    engine = make_engine(model, tok, b, b)
    sp = SamplingParams(temperature=cfg.episode.sampling.temperature,
                        max_new_tokens=cfg.episode.sampling.max_new_tokens)
    ev = compile_events()
    train, _ = make_splits(cfg.seed, b * (reps + 2), 0)
    n0 = len(ev.programs)
    t_bare = bare_decode(engine, tok, train[:b], sp, cfg, reps)
    n_bare = len(ev.programs) - n0
    bare_tps = b * sp.max_new_tokens / t_bare
    n0 = len(ev.programs)
    warm = episodes(engine, tok, cfg, train[b:2 * b], turns)
    n_warm = len(ev.programs) - n0
    runs = [episodes(engine, tok, cfg, train[(2 + k) * b:(3 + k) * b], turns) for k in range(reps)]
    n_timed = len(ev.programs) - n0 - n_warm
    r = sorted(runs, key=lambda r: r['tokens'] / r['wall'])[len(runs) // 2]
    ep_tps = r['tokens'] / r['wall']
    return dict(batch=b, bare_s=t_bare, bare_tps=bare_tps, ep_tps=ep_tps, ratio=ep_tps / bare_tps,
                compiles_bare=n_bare, compiles_warm=n_warm, compiles_timed=n_timed,
                shapes=len(engine.shapes_seen), warm_s=warm['wall'],
                batches=len(engine.batcher.batch_sizes), **r)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--batch', type=int, nargs='+', default=[64])
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--turns', choices=('teacher', 'model'), default='teacher')
    ap.add_argument('--preset', default='calculator')
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger('tunix_agentic.chat.encoder').setLevel(logging.ERROR)  # random text drifts
    cfg = load_config(a.preset)
    model, tok = build_policy(cfg)
    dev = jax.devices()[0]
    print(f'{a.preset} policy, max_new_tokens {cfg.episode.sampling.max_new_tokens}, '
          f'T={cfg.episode.sampling.temperature:g}, turns: {a.turns}; JAX {jax.__version__} on '
          f'{dev.platform} ({dev.device_kind}), {os.cpu_count()} CPUs')
    res = []
    for b in a.batch:
        r = one_batch(b, a.reps, a.turns, model, tok, cfg)
        res.append(r)
        print(f"batch {b}: bare decode {r['bare_tps']:.0f} tok/s ({r['bare_s']:.3f} s, "
              f"{r['compiles_bare']} compiles); episodes {r['ep_tps']:.0f} tok/s ({r['tokens']} "
              f"tokens, {r['turns']} turns in {r['wall']:.2f} s, engine busy {r['engine_s']:.2f} "
              f"s; warm-up {r['warm_s']:.1f} s with {r['compiles_warm']} compiles, "
              f"{r['compiles_timed']} in timed runs; {r['shapes']} engine shapes; "
              f"status {r['statuses']}); ratio {r['ratio']:.3f}")
    print('RESULT ' + '; '.join(
        f"batch {r['batch']}: episodes {r['ep_tps']:.0f} / bare decode {r['bare_tps']:.0f} tok/s "
        f"= {r['ratio']:.3f}" for r in res) + f' ({dev.platform}, median of {a.reps})')


if __name__ == '__main__':
    main()
    sys.stdout.flush()
