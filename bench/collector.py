"""Benchmark of the trajectory collector (CPU only; no model).

(a) Framework overhead: an instant scripted policy and instant calculator tools, N episodes x 3
    turns (two tool calls, then the answer). Reports episodes/s and the framework overhead per turn:
    wall time minus the time the (scripted) engine spent in its batch calls, divided by the turns;
    also the same in process CPU time, which other jobs on a shared machine disturb less.
(b) Concurrency: tools that sleep 10-100 ms (seeded), M episodes x 3 turns. The critical path is the
    slowest episode's total tool sleep; wall / critical path is 1.0 for perfect overlap, and
    sum(all sleeps) / wall is the effective parallelism.

Usage: python bench/collector.py [--episodes 1000] [--sleep-episodes 256] [--concurrency 256]
The last line states the figures.
"""
import argparse, asyncio, json, os, random, re, statistics, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
logging_level = os.environ.get('BENCH_LOG', 'ERROR')
import logging; logging.basicConfig(level=logging_level)

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector

from tunix_agentic.rollout.episode_config import EpisodeConfig
from tunix_agentic.envs.environments import EnvGroup, EnvSpec
from tunix_agentic.engines.engine import ScriptedEngine, SamplingParams
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.base import FunctionTool
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import TrajectoryStatus

SCRIPT = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
          '<tool_call>\n{"name": "add", "arguments": {"a": 408, "b": 17}}\n</tool_call>',
          '12*34 = 408 and 408 + 17 = 425. #### 425']


class TimedEngine(ScriptedEngine):
    "ScriptedEngine that records the time spent inside its batch calls (the 'model' time)."
    busy_s = busy_cpu_s = 0.0
    def generate(self, prompts, params):
        t, c = time.perf_counter(), time.thread_time()
        try: return super().generate(prompts, params)
        finally:
            self.busy_s += time.perf_counter() - t
            self.busy_cpu_s += time.thread_time() - c


def bench_a(tok, n: int, concurrency: int, prefix_check: bool = True) -> dict:
    engine = TimedEngine(tok, SCRIPT)
    envs = EnvGroup({'calc': EnvSpec(env='tool', tools=calculator_tools(), reward_fn='gsm8k',
                                     max_turns=5)})
    cfg = CollectConfig(max_concurrency=concurrency, episode=EpisodeConfig(max_seq_len=4096, episode_timeout_s=600, sampling=SamplingParams(max_new_tokens=128), prefix_check=prefix_check))
    task = {'task_type': 'calc', 'question': 'What is 12*34+17?', 'answer': '#### 425'}
    TrajectoryCollector(engine, tok, envs, config=cfg).run([task] * 8)  # warm up (templates)
    engine.busy_s = engine.busy_cpu_s = 0.0; engine.batcher.batch_sizes.clear()
    coll = TrajectoryCollector(engine, tok, envs, config=cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    trajs = coll.run([task] * n)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ok = all(t.status == TrajectoryStatus.DONE and t.reward == 1.0 for t in trajs)
    assert ok, 'bench (a): some episodes failed'
    turns = sum(t.metrics['turns'] for t in trajs)
    sizes = engine.batcher.batch_sizes
    return dict(episodes=n, turns=turns, wall_s=wall, eps_per_s=n / wall, turns_per_s=turns / wall,
                model_busy_s=engine.busy_s, cpu_s=cpu, wall_ms_per_turn=1e3 * wall / turns,
                engine_ms_per_turn=1e3 * engine.busy_s / turns,
                framework_ms_per_turn=1e3 * (wall - engine.busy_s) / turns,
                framework_cpu_ms_per_turn=1e3 * (cpu - engine.busy_cpu_s) / turns,
                mean_batch=statistics.mean(sizes), batches=len(sizes))


def bench_b(tok, n: int, concurrency: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    sleeps = [(rng.randint(10, 100), rng.randint(10, 100)) for _ in range(n)]

    async def nap(ms: int) -> str:
        "Sleep `ms` milliseconds.\n\nArgs:\n    ms: milliseconds to sleep"
        await asyncio.sleep(ms / 1000)
        return f'slept {ms}'
    def respond(prompt: str) -> str:
        plan = [int(x) for x in re.search(r'Nap (\d+) then (\d+)', prompt).groups()]
        k = prompt.count('<tool_response>')
        if k >= 2: return 'Done. #### 0'
        return f'<tool_call>\n{{"name": "nap", "arguments": {{"ms": {plan[k]}}}}}\n</tool_call>'
    engine = TimedEngine(tok, respond)
    envs = EnvGroup({'nap': EnvSpec(env='tool', tools=[FunctionTool.from_function(nap)],
                                    reward_fn='gsm8k', max_turns=5)})
    cfg = CollectConfig(max_concurrency=concurrency, episode=EpisodeConfig(max_seq_len=4096, episode_timeout_s=600))
    tasks = [{'question': f'Nap {a} then {b}.', 'answer': '0'} for a, b in sleeps]
    coll = TrajectoryCollector(engine, tok, envs, config=cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    trajs = coll.run(tasks)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    bad = [t for t in trajs if t.status != TrajectoryStatus.DONE or t.metrics['tool_calls'] != 2]
    assert not bad, f'bench (b): {len(bad)} episodes failed, e.g. {bad[0].status} {bad[0].error}'
    crit = max(a + b for a, b in sleeps) / 1000  # the slowest episode's tool time (model instant)
    total = sum(a + b for a, b in sleeps) / 1000
    return dict(episodes=n, wall_s=wall, critical_path_s=crit, ratio=wall / crit,
                sequential_s=total, parallelism=total / wall, model_busy_s=engine.busy_s, cpu_s=cpu,
                ratio_vs_cpu_bound=wall / max(crit, cpu))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--episodes', type=int, default=1000)
    ap.add_argument('--sleep-episodes', type=int, default=256)
    ap.add_argument('--concurrency', type=int, default=256)
    ap.add_argument('--json', help='also write the figures to this file')
    args = ap.parse_args(argv)
    tok = build_tiny_tokenizer()
    a = bench_a(tok, args.episodes, args.concurrency)
    print(f"(a) instant policy+tools: {a['episodes']} episodes x 3 turns = {a['turns']} turns in "
          f"{a['wall_s']:.2f} s -> {a['eps_per_s']:.0f} episodes/s, {a['turns_per_s']:.0f} turns/s")
    print(f"    wall {a['wall_ms_per_turn']:.2f} ms/turn = scripted engine "
          f"{a['engine_ms_per_turn']:.2f}"
          f" + framework {a['framework_ms_per_turn']:.2f}; framework CPU "
          f"{a['framework_cpu_ms_per_turn']:.2f} ms/turn; {a['batches']} engine batches, "
          f"mean size {a['mean_batch']:.1f}")
    a2 = bench_a(tok, args.episodes, args.concurrency, prefix_check=False)
    gain = a['framework_cpu_ms_per_turn'] / a2['framework_cpu_ms_per_turn']
    print(f"    without the end-of-episode prefix check: {a2['eps_per_s']:.0f} episodes/s, "
          f"framework {a2['framework_ms_per_turn']:.2f} ms/turn wall, "
          f"{a2['framework_cpu_ms_per_turn']:.2f} CPU (with / without = {gain:.2f}x)")
    b = bench_b(tok, args.sleep_episodes, args.concurrency)
    print(f"(b) tools sleeping 10-100 ms: {b['episodes']} episodes x 2 calls; wall "
          f"{b['wall_s']:.3f} s vs critical path {b['critical_path_s']:.3f} s -> ratio "
          f"{b['ratio']:.2f} (1.00 = perfect)")
    print(f"    sequential sum {b['sequential_s']:.1f} s -> effective parallelism "
          f"{b['parallelism']:.0f}x; process CPU {b['cpu_s']:.2f} s -> "
          f"wall / max(critical path, CPU) = {b['ratio_vs_cpu_bound']:.2f}")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'a': a, 'a_no_prefix_check': a2, 'b': b}, f, indent=1)
    print(f"FIGURES: (a) {a['eps_per_s']:.0f} episodes/s, framework overhead "
          f"{a['framework_ms_per_turn']:.2f} ms/turn wall "
          f"({a['framework_cpu_ms_per_turn']:.2f} CPU), {a['episodes']} episodes x 3 turns; "
          f"(b) wall/critical path = {b['ratio']:.2f} (wall/max(critical path, CPU) = "
          f"{b['ratio_vs_cpu_bound']:.2f}), {b['episodes']} episodes, tools 10-100 ms; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")


if __name__ == '__main__':
    main()
