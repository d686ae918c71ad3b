"""Multi-turn trajectory collection side by side: Google Tunix 0.1.7 against this project.

Both sides run the same scripted episodes. Episode i's task is "(i + 4) * 5 = ?"; the instant
model answers, turn by turn,
  1. <tool_call>{"name": "calculator", "arguments": {"a": i, "b": 4, "op": "+"}}</tool_call>
  2. <tool_call>{"name": "calculator", "arguments": {"a": i+4, "b": 5, "op": "*"}}</tool_call>
  3. "The answer is <(i+4)*5>."   (no tool call: the scored final answer, reward 1.0)
with pre-tokenized responses, and one `calculator(a, b, op)` tool with Tunix's `CalculatorTool`
semantics and JSON schema (str of the result) computes the tool results.

(a) 1,000 episodes x 3 turns, model and tool instant, all episodes concurrent and 32 concurrent:
    framework CPU ms per turn (process CPU time of the collection minus the model calls' thread CPU
    time, over 3N turns; CPU time is what a shared machine disturbs least) and episodes/s (wall).
    Tunix runs in its token mode (TokenizerAdapter + QwenChatTemplateParser, `collect_mode="Token"`)
    and its text mode (no tokenizer, `"Trajectory"`); this project always produces token ids, so
    its one figure per concurrency is set against both.
(b) 256 episodes, the tool sleeps U(10, 100) ms per call (seeded, drawn once per episode and call,
    identical on both sides): wall / critical path, the critical path being the slowest episode's
    total sleep (1.0 = perfect overlap). Token mode on both sides, all episodes concurrent.

Every (side, workload, configuration) runs in a fresh subprocess, the sides alternating within
each round (and the order reversed every other round); the figures are medians over `--reps`
rounds. Each child warms up on 8 extra episodes before its timed run and reports its peak RSS
(whole process, imports included). This project is measured with its default `CollectConfig` and
with `CollectConfig(prefix_check=0.1)` (a tenth of the episodes re-rendered at the end), and in
(b) also over `--workers` worker processes (`ProcessCollector`, default 2; each worker builds the
same collector and engine, the parent hands out the 256 tasks): its framework CPU is the parent's
plus every worker's, less the engines' model time.

Tunix's side is driven as its agentic learner drives it: `RolloutOrchestrator` (group size 8,
`max_concurrency` = the concurrency) over `TrajectoryCollector`, `ToolAgent` (qwen tool
parser), `ToolEnvironment` with `CalculatorTool`, a default executor of concurrency + 1 threads
(as `AgenticRLLearner` sets it), and a synchronous `model_call` (Tunix calls it through
`run_in_executor`), as shipped (absl logging at its default level).

Where the two sides differ, as the APIs make them:
- Tokenizer: both use this project's tiny Qwen-style tokenizer (`build_tiny_tokenizer`, saved to a
  temporary folder and loaded by Tunix's side); Tunix renders the chat with its own hard-coded
  `QwenChatTemplateParser`, this project with the tokenizer's Jinja chat template. The prompts are
  therefore not byte-identical: Tunix puts its tool prompt into the system message text, this
  project passes the tool schemas to the template; Tunix prefixes tool results with
  "Tool returned result: ".
- Model: Tunix's `model_call` gets the env and looks the episode up; this project's policy
  (`BaseEngine.generate`, batched by the collector) sees only prompt ids, so it decodes the
  prompt's last 48 tokens and counts the `<tool_response>` ids to pick the response. Both
  return pre-tokenized ids; their CPU time is measured per call and left out of the framework
  figure on both sides.
- Tools: Tunix's tool is a sync `BaseTool`, run by `ToolManager` in its thread pool inside
  `env.step`, itself in the executor; in (b) it sleeps with `time.sleep`. This project's is a
  `FunctionTool` with the same schema, sync and run inline in (a) (`blocking=False`, like the
  project's own calculator tools), async with `asyncio.sleep` in (b).
- Grouping: Tunix's orchestrator groups 8 consecutive episodes (distinct tasks); this project runs
  the 1,000 distinct tasks with `group_size=1` (its groups share one task).
- Reward: Tunix's `calculate_reward` (unwrapped to a float, as its engine needs) on one side, this
  project's 'gsm8k' reward (last number of the answer) on the other; both give 1.0 here.

Usage (from the repository root, with the project's virtualenv):
  python bench/vs_tunix.py                  # builds .bench/tunix-venv once, then 3 rounds
  python bench/vs_tunix.py --reps 1 --episodes 200 --sleep-episodes 64   # a quick look
  python bench/vs_tunix.py --tunix-python /path/to/python   # a Python that has google-tunix 0.1.7
The last line states the ratios: CPU per turn Tunix / ours in token mode at both concurrencies,
and (b) wall / critical path on both sides (ours in one process, with prefix_check=0.1, and over
worker processes).
"""
import argparse, asyncio, json, os, random, re, resource, statistics, subprocess, sys, tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUNIX_PIN = 'google-tunix==0.1.7'
DEFAULT_VENV = ROOT / '.bench' / 'tunix-venv'
SYSTEM_PROMPT = 'You are a helpful math assistant. Use the calculator tool.'
GROUP_SIZE = 8  # Tunix orchestrator's group size (GRPO num_generations); N divisible by it
WARMUP = 8  # untimed episodes per child, before the timed run
CALC_DESCRIPTION = ('A basic calculator tool that performs arithmetic operations: addition, '
                    'subtraction, multiplication and division.')
CALC_PARAMETERS = {'type': 'object', 'required': ['a', 'b', 'op'], 'properties': {
    'a': {'type': 'number', 'description': 'The first operand'},
    'b': {'type': 'number', 'description': 'The second operand'},
    'op': {'type': 'string', 'enum': ['+', '-', '*', '/'],
           'description': 'Operator, one of: + - * /'}}}


# ---------------------------------------------------------------- the workload (both sides)
def question(i: int) -> str: return f'({i} + 4) * 5 = ?'

def responses_for(i: int) -> list[str]:
    "The three scripted turns of episode i."
    call = ('{}\n<tool_call>\n{{"name": "calculator", "arguments": '
            '{{"a": {}, "b": {}, "op": "{}"}}}}\n</tool_call>')
    return [call.format('I will add first.', i, 4, '+'),
            call.format('Now multiply.', i + 4, 5, '*'), f'The answer is {(i + 4) * 5}.']

def sleep_schedule(n: int, seed: int) -> tuple[dict, float]:
    "Tool sleeps in seconds keyed by the call's (a, b, op), and the critical path."
    rng, sleeps, per_ep = random.Random(seed), {}, []
    for i in range(n):
        s1, s2 = rng.uniform(0.010, 0.100), rng.uniform(0.010, 0.100)
        sleeps[(i, 4, '+')], sleeps[(i + 4, 5, '*')] = s1, s2
        per_ep.append(s1 + s2)
    return sleeps, max(per_ep)

def calculate(a, b, op) -> str:
    "Tunix's `CalculatorTool.apply` semantics: the result as `str`, errors as text."
    if a is None or b is None or op is None: raise ValueError("Missing required arguments")
    if op == '+': return str(a + b)
    if op == '-': return str(a - b)
    if op == '*': return str(a * b)
    if op == '/':
        if b == 0: raise ValueError('Division by zero is not allowed')
        return str(a / b)
    raise ValueError(f'Unsupported operator: {op}')

def _spec_n(spec: dict) -> int:
    return spec['episodes'] if spec['workload'] == 'a' else spec['sleep_episodes']


# ---------------------------------------------------------------- Tunix's side (side virtualenv)
def tunix_child(spec: dict) -> dict:
    "One timed collection with Tunix's own components."
    import concurrent.futures
    import numpy as np
    from transformers import AutoTokenizer
    from tunix.generate import tokenizer_adapter
    from tunix.rl.agentic import utils as autils
    from tunix.rl.agentic.agents import tool_agent
    from tunix.rl.agentic.environments import tool_environment
    from tunix.rl.agentic.parser.chat_template_parser import parser as cp
    from tunix.rl.agentic.pipeline import rollout_orchestrator as ro
    from tunix.rl.agentic.rewards import reward as reward_lib
    from tunix.rl.agentic.tools import calculator_tool
    from tunix.rl.rollout import base_rollout

    n, token = _spec_n(spec), spec['mode'] == 'token'
    sleeps, crit = sleep_schedule(n, spec['seed']) if spec['workload'] == 'b' else ({}, None)

    slept = []
    class Calculator(calculator_tool.CalculatorTool):
        __doc__ = calculator_tool.CalculatorTool.__doc__  # the same tool prompt
        def apply(self, **kw):
            s = sleeps.get((kw.get('a'), kw.get('b'), kw.get('op')))
            if s: time.sleep(s); slept.append(s)
            return super().apply(**kw)

    def reward_fn(task, action): return reward_lib.calculate_reward(task, action).reward

    def make_pair(i):
        tmap = {'calculator': Calculator}
        agent = tool_agent.ToolAgent(system_prompt=SYSTEM_PROMPT, tool_parser_name='qwen',
                                     tool_map=tmap)
        env = tool_environment.ToolEnvironment(
            task={'question': question(i), 'ep': i}, tool_map=tmap, reward_fn=reward_fn,
            max_steps=10, group_id=i // GROUP_SIZE, pair_index=i)
        return agent, env

    tokenizer = chat_parser = None
    hf = AutoTokenizer.from_pretrained(spec['tokenizer_dir'])
    if token:
        tokenizer = tokenizer_adapter.TokenizerAdapter(hf)
        chat_parser = cp.QwenChatTemplateParser(tokenizer)
    eos = [hf.convert_tokens_to_ids('<|im_end|>')]
    total = n + WARMUP
    resp = [responses_for(i) for i in range(total)]
    toks = [[np.asarray(hf.encode(r, add_special_tokens=False) + eos, dtype=np.int32) for r in rs]
            for rs in resp]
    model_cpu = [0.0]

    def model_call(chat_completions, env, max_generation_steps=None, **kw):
        c = time.thread_time()
        ep, turn = env.task['ep'], sum(m['role'] == 'assistant' for m in chat_completions)
        out = base_rollout.RolloutOutput(
            text=[resp[ep][turn]], logits=[], tokens=[toks[ep][turn]] if token else [],
            left_padded_prompt_tokens=None, logprobs=None)
        model_cpu[0] += time.thread_time() - c  # += of floats under the GIL: fine here
        return out

    engine_kwargs = dict(model_call=model_call, timeout=1800.0)
    if token:
        engine_kwargs.update(tokenizer=tokenizer, chat_parser=chat_parser,
                             max_response_length=8192)
    mode = 'Token' if token else 'Trajectory'

    async def drive(lo, hi, mc):
        orch = ro.RolloutOrchestrator(rollout_sync_lock=autils.RolloutSyncLock(),
                                      engine_kwargs=engine_kwargs, max_concurrency=mc)
        producer = asyncio.create_task(orch.run_producers_from_stream(
            (make_pair(i) for i in range(lo, hi)), group_size=GROUP_SIZE,
            group_key_fn=lambda i, env, traj: env.extra_kwargs['group_id'], collect_mode=mode))
        await asyncio.sleep(0)
        out = []
        async for batch in orch.yield_batches(batch_size=GROUP_SIZE):
            out.extend(it.traj for it in batch)
        await producer
        return out

    def collect(lo, hi, mc):
        loop = asyncio.new_event_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=mc + 1))
        try:
            t0, c0, m0 = time.perf_counter(), time.process_time(), model_cpu[0]
            trajs = loop.run_until_complete(drive(lo, hi, mc))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            loop.run_until_complete(loop.shutdown_default_executor())
        finally: loop.close()
        return trajs, wall, cpu, model_cpu[0] - m0

    collect(n, total, WARMUP)  # warm-up: episodes n..n+7, untimed
    mc = n if spec['concurrency'] == 'all' else int(spec['concurrency'])
    trajs, wall, cpu, mcpu = collect(0, n, mc)
    bad = 0
    for t in trajs:
        if token: bad += not (t['status'] == 'SUCCEEDED' and t['trajectory_reward'] == 1.0)
        else: bad += not (t.status.name == 'SUCCEEDED' and t.reward == 1.0 and len(t.steps) == 3)
    bad += n - len(trajs) + (abs(2 * n - len(slept)) if spec['workload'] == 'b' else 0)
    return dict(wall_s=wall, cpu_s=cpu, model_cpu_s=mcpu, turns=3 * n, bad=bad, critical_s=crit,
                sleeps=len(slept), threads=mc + 1)


# ---------------------------------------------------------------- this project's side
SLEPT: list[float] = []  # tool sleeps done in this process (in each worker process with --workers)

def ours_collector(spec: dict):
    "This project's collector for `spec` (module level, so worker processes can build it too)."
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    sys.path.insert(0, str(ROOT))
    from tunix_agentic.envs.agents import ToolAgent
    from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
    from tunix_agentic.rollout.episode_config import EpisodeConfig
    from tunix_agentic.envs.environments import EnvGroup, EnvSpec
    from tunix_agentic.engines.engine import BaseEngine, GenerateOutput, SamplingParams
    from tunix_agentic.tools.base import FunctionTool
    from transformers import AutoTokenizer

    n = _spec_n(spec)
    sleeps, _ = sleep_schedule(n, spec['seed']) if spec['workload'] == 'b' else ({}, None)
    tok = AutoTokenizer.from_pretrained(spec['tokenizer_dir'])  # the same files as Tunix's side
    eos, resp_id = (tok.convert_tokens_to_ids(t) for t in ('<|im_end|>', '<tool_response>'))
    resp = [responses_for(i) for i in range(n + WARMUP * max(1, spec.get('workers') or 0))]
    ids = {r: tok.encode(r, add_special_tokens=False) + [eos] for rs in resp for r in rs}

    class InstantEngine(BaseEngine):
        "Pre-tokenized scripted turns, picked from the prompt's tail; CPU time recorded."
        cpu_s = 0.0
        def pick(self, prompt: list[int]) -> str:
            k, tail = prompt.count(resp_id), tok.decode(prompt[-48:], skip_special_tokens=False)
            if k == 0: return resp[int(re.search(r'\((\d+) \+ 4\) \* 5 = \?', tail)[1])][0]
            r = int(re.findall(r'<tool_response>\s*(-?\d+)', tail)[-1])  # the last tool result
            return responses_for(r - 4)[1] if k == 1 else responses_for(r // 5 - 4)[2]
        def generate(self, prompts, params):
            c = time.thread_time()
            out = []
            for p in prompts:
                t = ids[self.pick(p)]
                out.append(GenerateOutput(list(t), [-0.5] * len(t), 'stop'))
            self.cpu_s += time.thread_time() - c
            return out

    if spec['workload'] == 'a':
        def calculator(a: float, b: float, op: str) -> str: return calculate(a, b, op)
        tool = FunctionTool(calculator, description=CALC_DESCRIPTION, parameters=CALC_PARAMETERS,
                            blocking=False)
    else:
        async def calculator(a: float, b: float, op: str) -> str:
            s = sleeps.get((a, b, op))
            if s: await asyncio.sleep(s); SLEPT.append(s)
            return calculate(a, b, op)
        tool = FunctionTool(calculator, description=CALC_DESCRIPTION, parameters=CALC_PARAMETERS)
    envs = EnvGroup({'calc': EnvSpec(env='tool', tools=[tool], reward_fn='gsm8k', max_turns=10)})
    mc = n if spec['concurrency'] == 'all' else int(spec['concurrency'])
    kw = {} if spec['prefix_check'] is None else {'prefix_check': spec['prefix_check']}
    cfg = CollectConfig(max_concurrency=mc, **kw, episode=EpisodeConfig(max_seq_len=8192, episode_timeout_s=1800, sampling=SamplingParams(max_new_tokens=128)))
    return TrajectoryCollector(InstantEngine(), tok, envs, config=cfg,
                               agent_fn=lambda task: ToolAgent(system_prompt=SYSTEM_PROMPT))

def ours_tasks(lo: int, hi: int) -> list[dict]:
    return [{'question': question(i), 'answer': str((i + 4) * 5)} for i in range(lo, hi)]

def worker_counters(collector) -> tuple[float, float, int]:
    "A worker process's CPU time, its engine's CPU time and its tool sleeps so far."
    return time.process_time(), collector.engine.cpu_s, len(SLEPT)

def ours_child(spec: dict) -> dict:
    "One timed collection with this project's collector (in `spec['workers']` processes, if set)."
    import functools
    n, workers = _spec_n(spec), spec.get('workers') or 0
    crit = sleep_schedule(n, spec['seed'])[1] if spec['workload'] == 'b' else None
    if workers:  # the factory by reference to an importable module, not to this `__main__`
        sys.path.insert(0, str(ROOT / 'bench'))
        import vs_tunix as bench
        from tunix_agentic.rollout.process_workers import ProcessCollector
        coll = ProcessCollector(functools.partial(bench.ours_collector, spec), workers)
        counters = lambda: coll.call(bench.worker_counters)
    else:
        coll = ours_collector(spec)
        counters = lambda: [worker_counters(coll)]
    from tunix_agentic.core.trajectory import TrajectoryStatus
    coll.run(ours_tasks(n, n + WARMUP * max(1, workers)))  # warm-up, untimed: WARMUP per process
    before, c0, t0 = counters(), time.process_time(), time.perf_counter()
    trajs = coll.run(ours_tasks(0, n))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = counters()
    if workers: coll.close()
    # the parent's CPU plus every worker's (with workers), less the engines' model time
    cpu += sum(a[0] - b[0] for a, b in zip(after, before)) if workers else 0.0
    model_cpu = sum(a[1] - b[1] for a, b in zip(after, before))
    slept = sum(a[2] - b[2] for a, b in zip(after, before))
    ok = lambda t: t.status == TrajectoryStatus.DONE and t.reward == 1.0 and t.metrics['turns'] == 3
    bad = sum(not ok(t) for t in trajs) + n - len(trajs)
    bad += abs(2 * n - slept) if spec['workload'] == 'b' else 0  # every tool call slept
    return dict(wall_s=wall, cpu_s=cpu, model_cpu_s=model_cpu, turns=3 * n, bad=bad,
                critical_s=crit, sleeps=slept, threads=None, workers=workers)


def child_main(spec: dict):
    "Run one configuration, print its figures as one JSON line."
    fn = tunix_child if spec['side'] == 'tunix' else ours_child
    out = fn(spec)
    out['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print('RESULT ' + json.dumps(out), flush=True)


# ---------------------------------------------------------------- the side virtualenv
def _has_tunix(py: Path) -> bool:
    code = 'import importlib.metadata as m; print(m.version("google-tunix"))'
    r = subprocess.run([str(py), '-c', code], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == TUNIX_PIN.split('==')[1]

def ensure_tunix_venv(venv: Path) -> Path | None:
    "The side virtualenv's python with google-tunix 0.1.7, built when missing; None if unreachable."
    py = venv / 'bin' / 'python'
    if py.exists() and _has_tunix(py): return py
    print(f'building {venv} with {TUNIX_PIN} (once; several minutes)...', flush=True)
    with tempfile.TemporaryDirectory() as d:  # can the package index be reached at all?
        r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '-q', '-d', d,
                            TUNIX_PIN], capture_output=True, text=True, timeout=600)
    if r.returncode:
        print(f'SKIPPED: the package index could not be reached for {TUNIX_PIN} (pip: '
              f'{(r.stderr.strip().splitlines() or ["?"])[-1]}); nothing was measured.')
        return None
    if not py.exists(): subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    r = subprocess.run([str(py), '-m', 'pip', 'install', '-q', TUNIX_PIN], text=True)
    if r.returncode or not _has_tunix(py):
        raise SystemExit(f'installing {TUNIX_PIN} into {venv} failed (see pip above)')
    return py


# ---------------------------------------------------------------- the driver
def configs(args) -> list[dict]:
    "One round: every configuration once, Tunix and ours alternating."
    base = dict(episodes=args.episodes, sleep_episodes=args.sleep_episodes, seed=args.seed)
    tunix = lambda wl, mode, conc: dict(base, side='tunix', workload=wl, mode=mode,
                                        concurrency=conc)
    ours = lambda wl, conc, pc, workers=0: dict(base, side='ours', workload=wl, mode='token',
                                                concurrency=conc, prefix_check=pc, workers=workers)
    out = []
    if 'a' in args.workloads:  # Tunix token, ours default, Tunix text, ours prefix_check=0.1
        for conc in ('all', str(args.concurrency)):
            out += [tunix('a', 'token', conc), ours('a', conc, None),
                    tunix('a', 'text', conc), ours('a', conc, args.prefix_check)]
    if 'b' in args.workloads:
        out += [ours('b', 'all', None), tunix('b', 'token', 'all'),
                ours('b', 'all', args.prefix_check)]
        if args.workers: out.append(ours('b', 'all', None, args.workers))
    return out

def key(spec: dict) -> tuple:
    pc, workers = spec.get('prefix_check'), spec.get('workers')
    side = spec['side'] if pc is None else f"ours pc={pc:g}"
    if workers: side = f'ours w={workers}'
    return spec['workload'], side, spec['mode'], spec['concurrency']

def run_one(spec: dict, py: str, pause_file: str | None) -> dict | None:
    while pause_file and os.path.exists(pause_file): time.sleep(10)
    p = subprocess.run([py, __file__, '--child', json.dumps(spec)], capture_output=True,
                       text=True, cwd=ROOT)
    line = [l for l in p.stdout.splitlines() if l.startswith('RESULT ')]
    if p.returncode or not line:
        print(f'  {key(spec)} FAILED rc={p.returncode}\n{p.stderr[-3000:]}', flush=True)
        return None
    r = json.loads(line[-1][7:])
    r['stderr_lines'] = sum(1 for l in p.stderr.splitlines() if l.strip())
    return r

def _med(rs: list[dict], f) -> float:
    return statistics.median(f(r) for r in rs) if rs else float('nan')

def _fw(r: dict) -> float:
    "Framework CPU ms per turn: the collection's process CPU less the model calls'."
    return 1e3 * (r['cpu_s'] - r['model_cpu_s']) / r['turns']

def _over_crit(r: dict) -> float: return r['wall_s'] / r['critical_s']

def fmt(k: tuple, rs: list[dict], n: int) -> str:
    "One table row: the medians of a configuration's rounds (each round's value in brackets)."
    row = f'{k[0]} {k[1]:<12} {k[2]:<5} {k[3]:>4}  '
    if k[0] == 'a':
        row += (f'framework CPU {_med(rs, _fw):6.2f} ms/turn '
                f'({", ".join(f"{_fw(r):.2f}" for r in rs)}); '
                f'{n / _med(rs, lambda r: r["wall_s"]):5.0f} episodes/s; '
                f'model CPU {_med(rs, lambda r: 1e3 * r["model_cpu_s"] / r["turns"]):.3f} ms/turn')
    else:
        row += (f'wall {_med(rs, lambda r: r["wall_s"]):.3f} s / critical path '
                f'{rs[0]["critical_s"]:.3f} s = {_med(rs, _over_crit):5.2f} '
                f'({", ".join(f"{_over_crit(r):.2f}" for r in rs)}); '
                f'framework CPU {_med(rs, _fw):.2f} ms/turn')
    bad = sum(r['bad'] for r in rs)
    return (row + f'; peak RSS {_med(rs, lambda r: r["peak_rss_mib"]):.0f} MiB; '
            f'stderr lines {max(r["stderr_lines"] for r in rs)}'
            + (f'; FAILED EPISODES OR MISSED SLEEPS {bad}' if bad else ''))

def report(results: dict, args) -> None:
    "The table, the ratios, and the one-line result."
    print(f'(a) {args.episodes} episodes x 3 turns, instant model and tool; (b) '
          f'{args.sleep_episodes} episodes, tool sleeps 10-100 ms. Medians of {args.reps} rounds:')
    for k in sorted(results):
        print('  ' + fmt(k, results[k], args.episodes if k[0] == 'a' else args.sleep_episodes))
    pc, conc = f'ours pc={args.prefix_check:g}', ('all', str(args.concurrency))
    fw = lambda k: _med(results.get(k, []), _fw)
    eps = lambda k: 1 / _med(results.get(k, []), lambda r: r['wall_s'])
    print('ratios Tunix / ours (framework CPU per turn; episodes/s ours / Tunix), '
          f'ours with default CollectConfig | with prefix_check={args.prefix_check:g}:')
    for mode in ('token', 'text'):
        for c in conc:
            t, o, o2 = ('a', 'tunix', mode, c), ('a', 'ours', 'token', c), ('a', pc, 'token', c)
            print(f'  {mode:<5} {c:>4} concurrent: CPU {fw(t) / fw(o):.2f} | {fw(t) / fw(o2):.2f};'
                  f' episodes/s {eps(o) / eps(t):.2f} | {eps(o2) / eps(t):.2f}')
    cpu = lambda side, c: fw(('a', 'tunix', 'token', c)) / fw(('a', side, 'token', c))
    crit = lambda side: _med(results.get(('b', side, 'token', 'all'), []), _over_crit)
    print(f'RESULT: CPU per turn Tunix / ours, token mode: all-concurrent {cpu("ours", "all"):.2f}'
          f' (prefix_check={args.prefix_check:g}: {cpu(pc, "all"):.2f}), {conc[1]} concurrent '
          f'{cpu("ours", conc[1]):.2f} ({cpu(pc, conc[1]):.2f}); (b) wall / critical path: '
          f'Tunix {crit("tunix"):.2f}, ours {crit("ours"):.2f} ({crit(pc):.2f}'
          + (f'; {args.workers} worker processes: {crit(f"ours w={args.workers}"):.2f}'
             if args.workers and 'b' in args.workloads else '') + '); '
          f'{args.reps} rounds, load average {os.getloadavg()[0]:.1f}')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--child', help=argparse.SUPPRESS)
    ap.add_argument('--episodes', type=int, default=1000, help='(a) episodes')
    ap.add_argument('--sleep-episodes', type=int, default=256, help='(b) episodes')
    ap.add_argument('--concurrency', type=int, default=32, help='the bounded concurrency of (a)')
    ap.add_argument('--reps', type=int, default=3, help='rounds; medians are reported')
    ap.add_argument('--workloads', default='ab', help="'a', 'b' or 'ab'")
    ap.add_argument('--prefix-check', type=float, default=0.1,
                    help="our second configuration's CollectConfig.prefix_check")
    ap.add_argument('--workers', type=int, default=2,
                    help='(b) also with a ProcessCollector of this many worker processes (0: no)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--tunix-venv', type=Path, default=DEFAULT_VENV)
    ap.add_argument('--tunix-python', help='a Python with google-tunix 0.1.7 (skips the venv)')
    ap.add_argument('--pause-file', help='between subprocesses, wait while this file exists')
    ap.add_argument('--json', help='also write every subprocess result to this file')
    args = ap.parse_args(argv)
    if args.child: return child_main(json.loads(args.child))
    for k in ('episodes', 'sleep_episodes'):
        if getattr(args, k) % GROUP_SIZE:
            ap.error(f'--{k.replace("_", "-")} must be a multiple of {GROUP_SIZE}')
    tpy = args.tunix_python or ensure_tunix_venv(args.tunix_venv)
    if tpy is None: return
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    sys.path.insert(0, str(ROOT))
    from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
    started = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())
    print(f'vs_tunix: {started}; {os.cpu_count()} CPUs, load average '
          f'{" ".join(f"{x:.1f}" for x in os.getloadavg())}; Tunix python {tpy}', flush=True)
    results: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tdir:
        build_tiny_tokenizer(save_dir=tdir)
        round_ = configs(args)
        for rep in range(args.reps):
            t = time.perf_counter()
            for spec in (round_ if rep % 2 == 0 else round_[::-1]):
                spec = dict(spec, tokenizer_dir=tdir)
                r = run_one(spec, str(tpy) if spec['side'] == 'tunix' else sys.executable,
                            args.pause_file)
                if r is not None: results.setdefault(key(spec), []).append(r)
            print(f'round {rep + 1}/{args.reps} done in {time.perf_counter() - t:.0f} s, load '
                  f'average {os.getloadavg()[0]:.1f}', flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump([dict(key=k, runs=v) for k, v in results.items()], f, indent=1)
    report(results, args)


if __name__ == '__main__':
    main()
