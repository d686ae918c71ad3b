"""Load with hostile callers (issue 43) against a rollout server in its own process, on loopback.

N rollouts are posted at C concurrent by callers of three kinds: honest callers, who wait for their
answer (retrying a 429 after its Retry-After, and joining their own rollout on a retry); callers who
post and leave after `--leave-after-s` (a share `--leave`, another tenant: their own callback key);
and one rollout whose callback trickles its answer a byte a second (a trainer that holds a slot).
The honest callers are one caller to the server (one trainer): `--per-caller` bounds what it holds.
The trainer's engine is a scripted policy behind EngineServer in this process (two tool calls, then
an answer); its records show how many times each rollout's first turn ran.

Prints: honest rollouts lost (no COMPLETED answer) and duplicated (a first turn run twice), the
honest callers' p50 / p99 latency, how the leavers' rollouts ended (cancelled ones never count as
`stop`), how the trickling one ended, and the rollout server's peak RSS (VmHWM).

Usage: python bench/hostile_load.py [--rollouts 1000] [--concurrency 200] [--leave 0.2]
                                    [--max-concurrent 32] [--per-caller N] [--callback-timeout-s 5]
"""
import argparse, asyncio, os, random, re, statistics, subprocess, sys, time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
import logging; logging.basicConfig(level=os.environ.get('BENCH_LOG', 'CRITICAL'))

import httpx
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.http_plumbing import BackgroundServer
from tunix_agentic.engines.server import EngineServer

SCRIPT = ['<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>',
          '<tool_call>\n{"name": "add", "arguments": {"a": 408, "b": 5}}\n</tool_call>',
          'The answer is 413. #### 413']


def spawn_rollout_server(**env) -> tuple[subprocess.Popen, str]:
    "A rollout server in its own process, settings from the environment; `(process, url)`."
    e = {**os.environ, 'ROLLOUT_SERVER_PORT': '0', 'HF_HUB_OFFLINE': '1',
         'ROLLOUT_CALLBACK_HOSTS': 'loopback', **{k: str(v) for k, v in env.items()}}
    code = 'from tunix_agentic.serve.rollout_server import serve; serve()'
    p = subprocess.Popen([sys.executable, '-c', code], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    url = p.stdout.readline().split()[-1]
    for _ in range(400):
        try:
            if httpx.get(url + '/health', timeout=1).status_code == 200: return p, url
        except httpx.TransportError: time.sleep(0.05)
    p.kill()
    raise RuntimeError('the rollout server did not start')


def peak_rss_mb(pid: int) -> float:
    "VmHWM of a process, in MB."
    m = re.search(r'VmHWM:\s+(\d+) kB', open(f'/proc/{pid}/status').read())
    return int(m.group(1)) / 1024


def trickler() -> BackgroundServer:
    "A callback that answers a byte a second, forever."
    app = FastAPI()
    @app.post('/v1/chat/completions')
    async def trickle():
        async def gen():
            while True:
                yield b' '
                await asyncio.sleep(1.0)
        return StreamingResponse(gen(), media_type='application/json')
    return BackgroundServer(app).start()


def body(rid: str, url: str, key: str | None = None) -> dict:
    return {'rollout_id': rid, 'server_url': url, 'max_turns': 5, 'timeout_s': 120,
            'callback_api_key': key, 'messages': [{'role': 'user', 'content': 'What is 12*34+5?'}],
            'metadata': {'task': {'answer': '#### 413'}}}


async def honest(client, url, b) -> tuple[float, str]:
    "Post until answered (429s retried after Retry-After); `(seconds, status)`."
    t0 = time.perf_counter()
    while True:
        try: r = await client.post(url + '/rollout', json=b, timeout=300)
        except httpx.TransportError: await asyncio.sleep(0.1); continue  # joins its own run
        if r.status_code == 429:
            await asyncio.sleep(float(r.headers.get('retry-after', 1)) * random.random())
            continue
        status = r.json().get('status', f'HTTP {r.status_code}') if r.status_code == 200 else \
            f'HTTP {r.status_code}'
        return time.perf_counter() - t0, status


async def leaver(client, url, b, after_s: float):
    "Post and leave after `after_s`."
    try: await client.post(url + '/rollout', json=b, timeout=after_s)
    except httpx.TransportError: pass


async def drive(a, url: str, trainer: str, slow: str):
    sem, out = asyncio.Semaphore(a.concurrency), {'honest': [], 'left': 0, 'slow': None}
    rng = random.Random(0)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as client:
        async def one(i):
            async with sem:
                if i == 0:
                    out['slow'] = await honest(client, url, body('slow', slow))
                elif rng.random() < a.leave:
                    out['left'] += 1
                    await leaver(client, url, body(f'left{i}', trainer, 'leaver'),
                                 a.leave_after_s)
                else: out['honest'].append((f'h{i}', *await honest(client, url, body(f'h{i}',
                                                                                   trainer))))
        await asyncio.gather(*map(one, range(a.rollouts)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rollouts', type=int, default=1000)
    p.add_argument('--concurrency', type=int, default=200)
    p.add_argument('--leave', type=float, default=0.2)
    p.add_argument('--leave-after-s', type=float, default=0.05)
    p.add_argument('--max-concurrent', type=int, default=32)
    p.add_argument('--per-caller', type=int, default=None)  # None: the server's default
    p.add_argument('--callback-timeout-s', type=float, default=5.0)
    a = p.parse_args()
    tok = build_tiny_tokenizer()
    trainer = EngineServer(ScriptedEngine(tok, SCRIPT), tok).start()
    slow = trickler()
    proc, url = spawn_rollout_server(MAX_CONCURRENT_ROLLOUTS=a.max_concurrent,
                                     MAX_QUEUED_ROLLOUTS=4 * a.max_concurrent,
                                     ROLLOUT_MAX_ROLLOUTS_PER_CALLER=a.per_caller or '',
                                     ROLLOUT_CALLBACK_TIMEOUT_S=a.callback_timeout_s,
                                     ROLLOUT_TOOL_LATENCY_MS='10,100')
    try:
        for i in range(a.rollouts): trainer.expect(f'h{i}')
        t0 = time.perf_counter()
        out = asyncio.run(drive(a, url, trainer.url, slow.url))
        wall = time.perf_counter() - t0
        while httpx.get(url + '/health').json()['active_rollouts']: time.sleep(0.1)
        metrics = httpx.get(url + '/metrics').text
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
        trainer.close()
        slow.close()
    firsts = {rid: sum(t['response_mask'] is None for t in trainer.take(rid))
              for rid, *_ in out['honest']}
    lost = sum(s != 'COMPLETED' for _, _, s in out['honest'])
    dup = sum(n > 1 for n in firsts.values())
    lat = sorted(s for _, s, _ in out['honest'])
    ended = dict(re.findall(r'^rollouts_total\{finish_reason="(\w+)"\} (\S+)$', metrics, re.M))
    refused = dict(re.findall(r'^rollouts_rejected_total\{reason="(\w+)"\} (\S+)$', metrics,
                              re.M))
    quota = a.per_caller or a.max_concurrent + 2 * a.max_concurrent  # the server's default
    print(f'{a.rollouts} rollouts at {a.concurrency} concurrent (server: {a.max_concurrent} '
          f'running, {4 * a.max_concurrent} queued, {quota} per caller), {len(lat)} honest, '
          f'{out["left"]} left after {a.leave_after_s} s, 1 trickling callback; {wall:.1f} s')
    print(f'server ended: {ended}; answered 429 or replayed: {refused}; the trickling one: '
          f'{out["slow"][1]} after {out["slow"][0]:.1f} s')
    print(f'lost {lost}, duplicated {dup}, p50 {statistics.median(lat):.2f} s, '
          f'p99 {lat[int(0.99 * (len(lat) - 1))]:.2f} s, rollout server peak RSS {rss:.0f} MB')


if __name__ == '__main__': main()
