"""Benchmark of remote rollouts (seed 004) on loopback: a rollout server in its own process, the
trainer's EngineServer over a scripted engine in this one (CPU only; no model).

(a) Per-turn HTTP overhead: the same scripted calculator episodes (3 turns, instant tools) collected
    in process (TrajectoryCollector) and remotely (RemoteCollector -> POST /rollout -> callbacks
    to /v1/chat/completions), at concurrency 1 (latency) and C (throughput). Reports ms per turn
    and the ratio remote / in-process.
(b) Load: R rollouts at C concurrent, tools sleeping 10-100 ms, the server's max_concurrent_rollouts
    M, run twice side by side: with today's FIFO wait queue (max_queued_rollouts=1024: 429 only
    when it is full) and with the earlier 429-only design (max_queued_rollouts=0: every request
    past M is refused and retried after Retry-After). Every rollout must finish `stop` exactly
    once; reports p50/p99 latency as the client sees it (429 waits included) and as the server
    measured it, throughput, and the 429s the client retried.

(c) Streaming: time to the first content chunk against the whole answer's time, for a greedy
    64-token answer of the default model (JaxEngine, prefix cache on) behind EngineServer, answers
    sampled whole (stream_chunk_tokens=0) and in chunks of 8 tokens, each continuing the last;
    the streamed text must equal the non-streamed one.

Usage: python bench/server.py [--episodes 200] [--rollouts 1000] [--concurrency 200]
                              [--max-concurrent 100] [--parts abc]
The last line states the figures.
"""
import argparse, json, os, re, statistics, subprocess, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import logging; logging.basicConfig(level=os.environ.get('BENCH_LOG', 'CRITICAL'))

import httpx

from tunix_agentic.rollout.collector import CollectConfig, TrajectoryCollector

from tunix_agentic.rollout.episode_config import EpisodeConfig
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
    e = {**os.environ, 'ROLLOUT_SERVER_PORT': '0', 'HF_HUB_OFFLINE': '1',
         'ROLLOUT_CALLBACK_HOSTS': 'loopback', **env}
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
    return CollectConfig(max_concurrency=concurrency, episode=EpisodeConfig(max_seq_len=4096, episode_timeout_s=600, sampling=SamplingParams(max_new_tokens=128)))


def timed(collector, n: int) -> tuple[float, int]:
    collector.run([TASK] * 4)  # warm up: templates, connections, the callback server
    t0 = time.perf_counter()
    trajs = collector.run([TASK] * n)
    wall = time.perf_counter() - t0
    bad = [t.error for t in trajs if t.status != TrajectoryStatus.DONE or t.reward != 1.0]
    assert not bad, f'{len(bad)} episodes failed: {bad[:3]}'
    return wall, sum(t.metrics.get('turns', t.metrics.get('remote_turns', 0)) for t in trajs)


def bench_a(tok, url: str, n: int, concurrency: int) -> dict:
    env_fn = lambda t: ToolEnvironment(t, tools=calculator_tools(), reward_fn='gsm8k', max_turns=4)
    out = {}
    for c, k in ((1, max(n // 4, 10)), (concurrency, n)):
        local_s, turns = timed(TrajectoryCollector(ScriptedEngine(tok, SCRIPT), tok, env_fn,
                                                   config=cfg(c)), k)
        col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, url, config=cfg(c), max_turns=4)
        try: remote_s, rturns = timed(col, k)
        finally: col.close()
        assert turns == rturns == 3 * k
        out[c] = dict(episodes=k, turns=turns, local_ms_per_turn=1e3 * local_s / turns,
                      remote_ms_per_turn=1e3 * remote_s / turns, ratio=remote_s / local_s,
                      overhead_ms_per_turn=1e3 * (remote_s - local_s) / turns)
    return out


def bench_b(tok, n: int, concurrency: int, max_concurrent: int, queued: int) -> dict:
    p, url = spawn_rollout_server(MAX_CONCURRENT_ROLLOUTS=str(max_concurrent),
                                  MAX_QUEUED_ROLLOUTS=str(queued),
                                  ROLLOUT_TOOL_LATENCY_MS='10,100')
    try:
        col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, url, config=cfg(concurrency), max_turns=4)
        try:
            col.run([TASK] * 4)
            col.counts.clear()
            t0 = time.perf_counter()
            trajs = col.run([{**TASK, 'question': f'What is 12*34+17? (#{i})'} for i in range(n)])
            wall = time.perf_counter() - t0
        finally: col.close()
        metrics = httpx.get(url + '/metrics').text
    finally: stop(p)
    def val(name):
        m = re.search(rf'^{re.escape(name)} (\S+)$', metrics, re.M)
        return float(m.group(1)) if m else 0.0
    assert len({t.episode_id for t in trajs}) == n, 'lost or duplicated episodes'
    assert all(t.status == TrajectoryStatus.DONE for t in trajs), 'some rollouts failed'
    assert val('rollouts_total{finish_reason="stop"}') == n + 4, 'the server ran a rollout twice'
    client = sorted(t.metrics['time_remote_s'] * 1e3 for t in trajs)
    server = sorted(t.metrics['rollout_total_latency_ms'] for t in trajs)
    q = lambda xs, f: xs[min(int(f * len(xs)), len(xs) - 1)]
    return dict(rollouts=n, concurrency=concurrency, max_concurrent=max_concurrent, queued=queued,
                wall_s=wall,
                rollouts_per_s=n / wall, client_p50_ms=q(client, .5), client_p99_ms=q(client, .99),
                server_p50_ms=q(server, .5), server_p99_ms=q(server, .99),
                retried_429=col.counts['rejected_429'],
                server_429=val('rollouts_rejected_total{reason="concurrency"}'))


def bench_c(new_tokens: int = 64, chunk: int = 8, reps: int = 5) -> dict:
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.engines.server import EngineServer
    from tunix_agentic.models.default import load_default
    model, _, tok = load_default()
    engine = JaxEngine(model, config=JaxEngineConfig(prefix_cache_tokens=1 << 16,
                                                     min_gen_bucket=8))
    body = {'messages': [{'role': 'user', 'content': 'Count from one to a hundred, please.'}],
            'max_tokens': new_tokens, 'temperature': 0.0, 'stream': True}
    def stream(client, url) -> tuple[float, float, str, int]:
        t0, first, text, n = time.perf_counter(), None, '', 0
        with client.stream('POST', url, json=body) as r:
            for line in r.iter_lines():
                if not line.startswith('data: {'): continue
                e = json.loads(line[6:])
                d = e['choices'][0]['delta'] if e['choices'] else {}
                if d.get('content') or d.get('tool_calls'):
                    first = first or time.perf_counter() - t0
                    text += d.get('content') or ''
                n = len(e.get('token_ids') or []) or n
        return first or float('nan'), time.perf_counter() - t0, text, n
    out = {}
    with EngineServer(engine, tok, max_tokens=new_tokens) as srv, httpx.Client(timeout=600) as c:
        url = srv.url + '/v1/chat/completions'
        whole = c.post(url, json={**body, 'stream': False}).json()
        for k in (0, chunk):
            srv.stream_chunk_tokens = k
            for _ in range(2): stream(c, url)  # compile every shape first
            runs = [stream(c, url) for _ in range(reps)]
            assert all(r[2] == (whole['choices'][0]['message']['content'] or '') for r in runs), \
                'the streamed text differs from the non-streamed one'
            out[k] = dict(first_s=statistics.median(r[0] for r in runs),
                          total_s=statistics.median(r[1] for r in runs), tokens=runs[0][3])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--episodes', type=int, default=200)
    ap.add_argument('--rollouts', type=int, default=1000)
    ap.add_argument('--concurrency', type=int, default=200)
    ap.add_argument('--max-concurrent', type=int, default=100)
    ap.add_argument('--parts', default='abc', help='which parts to run: any of a, b, c')
    args = ap.parse_args()
    tok = build_tiny_tokenizer()
    if 'a' in args.parts:
        p, url = spawn_rollout_server()
        try: a = bench_a(tok, url, args.episodes, args.concurrency)
        finally: stop(p)
        for c, r in a.items():
            print(f"(a) concurrency {c:>3}: {r['episodes']} episodes, {r['turns']} turns; in "
                  f"process {r['local_ms_per_turn']:.2f} ms/turn, remote "
                  f"{r['remote_ms_per_turn']:.2f} ms/turn (x{r['ratio']:.2f}, "
                  f"+{r['overhead_ms_per_turn']:.2f} ms/turn)")
        a1, ac = a[1], a[args.concurrency]
        print(f"RESULT (a) remote/in-process per turn: x{a1['ratio']:.2f} at concurrency 1 "
              f"(+{a1['overhead_ms_per_turn']:.2f} ms/turn), x{ac['ratio']:.2f} at "
              f"{args.concurrency}")
    if 'b' in args.parts:
        runs = {name: bench_b(tok, args.rollouts, args.concurrency, args.max_concurrent, q)
                for name, q in (('429-only', 0), ('queue', 1024))}
        for name, b in runs.items():
            print(f"(b) {name:>8}: {b['rollouts']} rollouts at {b['concurrency']} concurrent, "
                  f"max_concurrent_rollouts={b['max_concurrent']}, max_queued_rollouts="
                  f"{b['queued']}, tools 10-100 ms: {b['rollouts_per_s']:.1f} rollouts/s, "
                  f"latency p50/p99 {b['client_p50_ms']:.0f}/{b['client_p99_ms']:.0f} ms as the "
                  f"client sees it, {b['server_p50_ms']:.0f}/{b['server_p99_ms']:.0f} ms on the "
                  f"server; {b['retried_429']} 429s retried (server counted "
                  f"{b['server_429']:.0f}); none lost or duplicated")
        o, q = runs['429-only'], runs['queue']
        print(f"RESULT (b) client p50/p99: queue {q['client_p50_ms']:.0f}/{q['client_p99_ms']:.0f}"
              f" ms (p99/p50 x{q['client_p99_ms'] / q['client_p50_ms']:.2f}, "
              f"{q['retried_429']} 429s) vs 429-only {o['client_p50_ms']:.0f}/"
              f"{o['client_p99_ms']:.0f} ms (p99/p50 x{o['client_p99_ms'] / o['client_p50_ms']:.2f},"
              f" {o['retried_429']} 429s); {q['rollouts_per_s']:.1f} vs {o['rollouts_per_s']:.1f} "
              f"rollouts/s; 0 lost, 0 duplicated in both")
    if 'c' in args.parts:
        c = bench_c()
        for k, r in c.items():
            print(f"(c) stream_chunk_tokens={k}: {r['tokens']} tokens; first content chunk after "
                  f"{r['first_s'] * 1e3:.0f} ms of {r['total_s'] * 1e3:.0f} ms "
                  f"({r['first_s'] / r['total_s']:.0%})")
        w, k = c[0], c[max(c)]
        print(f"RESULT (c) time to first SSE chunk / whole answer ({w['tokens']} tokens, default "
              f"model, CPU): {k['first_s'] * 1e3:.0f}/{k['total_s'] * 1e3:.0f} ms in chunks of "
              f"{max(c)} vs {w['first_s'] * 1e3:.0f}/{w['total_s'] * 1e3:.0f} ms whole; "
              f"streamed text equal to the non-streamed answer")


if __name__ == '__main__':
    main()
