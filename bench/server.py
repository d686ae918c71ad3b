"""Benchmark of remote rollouts (seed 004) on loopback: a rollout server in its own process, the
trainer's EngineServer over a scripted engine in this one (CPU only; no model).

(a) Per-turn HTTP overhead: the same scripted calculator episodes (3 turns, instant tools) collected
    in process (TrajectoryCollector) and remotely (RemoteCollector -> POST /rollout -> callbacks
    to /v1/chat/completions), at concurrency 1 (latency) and C (throughput). Reports ms per turn
    and the ratio remote / in-process.
(b) Load: R rollouts at C concurrent, tools sleeping 10-100 ms, the server's max_concurrent_rollouts
    M: every rollout must finish `stop` exactly once; reports p50/p99 latency as the client sees it
    (429 waits included) and as the server measured it, throughput, and the 429s the client retried.

Usage: python bench/server.py [--episodes 200] [--rollouts 1000] [--concurrency 200]
                              [--max-concurrent 100]
The last line states the figures.
"""
import argparse, os, re, statistics, subprocess, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import logging; logging.basicConfig(level=os.environ.get('BENCH_LOG', 'CRITICAL'))

import httpx

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector
from tunix_agentic.envs.environments import ToolEnvironment
from tunix_agentic.serve.remote import RemoteCollector
from tunix_agentic.engines.engine import SamplingParams, ScriptedEngine
from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.tools.builtin import calculator_tools
from tunix_agentic.core.trajectory import TrajectoryStatus

SCRIPT = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
          '<tool_call>\n{"name": "add", "arguments": {"a": 408, "b": 17}}\n</tool_call>',
          '12*34 = 408 and 408 + 17 = 425. #### 425']
TASK = {'question': 'What is 12*34+17?', 'answer': '#### 425'}


def spawn_rollout_server(**env) -> tuple[subprocess.Popen, str]:
    e = {**os.environ, 'ROLLOUT_SERVER_PORT': '0', 'HF_HUB_OFFLINE': '1', **env}
    code = 'from tunix_agentic.serve.rollout_server import serve; serve()'
    p = subprocess.Popen([sys.executable, '-c', code], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    url = p.stdout.readline().split()[-1]
    for _ in range(400):
        try:
            if httpx.get(url + '/health', timeout=1).status_code == 200: return p, url
        except httpx.TransportError: time.sleep(0.05)
    p.kill(); raise RuntimeError('the rollout server did not start')


def stop(p):
    p.terminate()
    try: p.wait(10)
    except subprocess.TimeoutExpired: p.kill()


def cfg(concurrency: int) -> CollectConfig:
    return CollectConfig(max_turns=4, max_seq_len=4096, episode_timeout_s=600,
                         max_concurrency=concurrency, sampling=SamplingParams(max_new_tokens=128))


def timed(collector, n: int) -> tuple[float, int]:
    collector.run([TASK] * 4)  # warm up: templates, connections, the callback server
    t0 = time.perf_counter()
    trajs = collector.run([TASK] * n)
    wall = time.perf_counter() - t0
    bad = [t.error for t in trajs if t.status != TrajectoryStatus.DONE or t.reward != 1.0]
    assert not bad, f'{len(bad)} episodes failed: {bad[:3]}'
    return wall, sum(t.metrics.get('turns', t.metrics.get('remote_turns', 0)) for t in trajs)


def bench_a(tok, url: str, n: int, concurrency: int) -> dict:
    env_fn = lambda t: ToolEnvironment(t, tools=calculator_tools(), reward_fn='gsm8k', max_turns=5)
    out = {}
    for c, k in ((1, max(n // 4, 10)), (concurrency, n)):
        local_s, turns = timed(TrajectoryCollector(ScriptedEngine(tok, SCRIPT), tok, env_fn,
                                                   config=cfg(c)), k)
        col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, url, config=cfg(c))
        try: remote_s, rturns = timed(col, k)
        finally: col.close()
        assert turns == rturns == 3 * k
        out[c] = dict(episodes=k, turns=turns, local_ms_per_turn=1e3 * local_s / turns,
                      remote_ms_per_turn=1e3 * remote_s / turns, ratio=remote_s / local_s,
                      overhead_ms_per_turn=1e3 * (remote_s - local_s) / turns)
    return out


def bench_b(tok, n: int, concurrency: int, max_concurrent: int) -> dict:
    p, url = spawn_rollout_server(MAX_CONCURRENT_ROLLOUTS=str(max_concurrent),
                                  ROLLOUT_TOOL_LATENCY_MS='10,100')
    try:
        col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, url, config=cfg(concurrency))
        try:
            col.run([TASK] * 4)
            col.counts.clear()
            t0 = time.perf_counter()
            trajs = col.run([{**TASK, 'question': f'What is 12*34+17? (#{i})'} for i in range(n)])
            wall = time.perf_counter() - t0
        finally: col.close()
        metrics = httpx.get(url + '/metrics').text
    finally: stop(p)
    val = lambda name: float(re.search(rf'^{re.escape(name)} (\S+)$', metrics, re.M).group(1))
    assert len({t.episode_id for t in trajs}) == n, 'lost or duplicated episodes'
    assert all(t.status == TrajectoryStatus.DONE for t in trajs), 'some rollouts failed'
    assert val('rollouts_total{finish_reason="stop"}') == n + 4, 'the server ran a rollout twice'
    client = sorted(t.metrics['time_remote_s'] * 1e3 for t in trajs)
    server = sorted(t.metrics['rollout_total_latency_ms'] for t in trajs)
    q = lambda xs, f: xs[min(int(f * len(xs)), len(xs) - 1)]
    return dict(rollouts=n, concurrency=concurrency, max_concurrent=max_concurrent, wall_s=wall,
                rollouts_per_s=n / wall, client_p50_ms=q(client, .5), client_p99_ms=q(client, .99),
                server_p50_ms=q(server, .5), server_p99_ms=q(server, .99),
                retried_429=col.counts['rejected_429'],
                server_429=val('rollouts_rejected_total{reason="concurrency"}'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--episodes', type=int, default=200)
    ap.add_argument('--rollouts', type=int, default=1000)
    ap.add_argument('--concurrency', type=int, default=200)
    ap.add_argument('--max-concurrent', type=int, default=100)
    args = ap.parse_args()
    tok = build_tiny_tokenizer()
    p, url = spawn_rollout_server()
    try: a = bench_a(tok, url, args.episodes, args.concurrency)
    finally: stop(p)
    for c, r in a.items():
        print(f"(a) concurrency {c:>3}: {r['episodes']} episodes, {r['turns']} turns; in process "
              f"{r['local_ms_per_turn']:.2f} ms/turn, remote {r['remote_ms_per_turn']:.2f} ms/turn "
              f"(x{r['ratio']:.2f}, +{r['overhead_ms_per_turn']:.2f} ms/turn)")
    b = bench_b(tok, args.rollouts, args.concurrency, args.max_concurrent)
    print(f"(b) {b['rollouts']} rollouts at {b['concurrency']} concurrent, max_concurrent_rollouts="
          f"{b['max_concurrent']}, tools 10-100 ms: {b['rollouts_per_s']:.1f} rollouts/s, latency "
          f"p50/p99 {b['client_p50_ms']:.0f}/{b['client_p99_ms']:.0f} ms as the client sees it "
          f"(429 waits included), {b['server_p50_ms']:.0f}/{b['server_p99_ms']:.0f} ms on the "
          f"server; "
          f"{b['retried_429']} 429s retried (server counted {b['server_429']:.0f}); none lost or "
          f"duplicated")
    a1, ac = a[1], a[args.concurrency]
    print(f"RESULT remote/in-process per turn: x{a1['ratio']:.2f} at concurrency 1 "
          f"(+{a1['overhead_ms_per_turn']:.2f} ms/turn), x{ac['ratio']:.2f} at {args.concurrency}; "
          f"load {b['rollouts_per_s']:.1f} rollouts/s, p50/p99 {b['client_p50_ms']:.0f}/"
          f"{b['client_p99_ms']:.0f} ms, {b['retried_429']} 429s retried, 0 lost, 0 duplicated")


if __name__ == '__main__':
    main()
