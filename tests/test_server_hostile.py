"""Issue 43's server attacks, each pinned: a request's bad sampling parameter or engine failure
confined to that request; prompt text bounded before the tokenizer; rollout ids scoped to the caller
and bound to the body; callback answers bounded in bytes, time and encoding; abandoned rollouts
cancelled (or kept and held against a per-caller quota) and `timeout_s` capped; slow heads and
bodies closed on every request of a connection, idle kept-alive connections and oversized heads too;
OpenAI fields implemented (`stop`) or refused; strict schemas, `/generate` validated like chat, and
keyless servers that answer only JSON addressed to loopback; `RemoteCollector` checking answers."""
import asyncio, gzip, json, socket, threading, time

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.core.trajectory import TrajectoryStatus
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.http_plumbing import BackgroundServer
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.serve.remote import RemoteCollector
from tunix_agentic.serve.rollout_server import RolloutServer, RolloutSettings

SCRIPT = ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
          'The answer is 3.']
HI = [{'role': 'user', 'content': 'hi'}]


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


def body(rid, url, **kw):
    return {'rollout_id': rid, 'server_url': url, 'max_turns': 3, 'timeout_s': 30,
            'messages': [{'role': 'user', 'content': 'What is 1+2?'}], **kw}


def rollout_server(**kw) -> RolloutServer:
    return RolloutServer(RolloutSettings(**{'callback_hosts': ('loopback',), **kw})).start()


class Poisoned(ScriptedEngine):
    "A batch engine that fails the whole batch when any request has seed 13 (a bad request)."
    batch_wait_s = 0.2  # gather the concurrent chats into one batch
    def generate(self, prompts, params):
        if any(p.seed == 13 for p in params): raise OverflowError('int32 overflow')
        return super().generate(prompts, params)


# ---- one request's failure is its own ----
@pytest.mark.timeout(60)
def test_a_huge_top_k_is_refused_and_a_bad_request_fails_alone(tok):
    eng = Poisoned(tok, ['Hi.'])
    with EngineServer(eng, tok) as srv:
        url = srv.url + '/v1/chat/completions'
        for top_k in (len(tok) + 1, 2 ** 40, 10 ** 30):
            r = httpx.post(url, json={'messages': HI, 'top_k': top_k}, timeout=10)
            assert r.status_code == 422 and 'top_k' in r.text, r.text
        r = httpx.post(srv.url + '/generate', timeout=10,
                       json={'prompts': [[1, 2]], 'params': {'top_k': 2 ** 40}})
        assert r.status_code == 422 and 'top_k' in r.text
        def chat(i):  # 8 concurrent chats, one of them poisoned
            return httpx.post(url, json={'messages': HI, 'seed': 13 if i == 3 else i,
                                         'max_tokens': 8}, timeout=30).status_code
        with __import__('concurrent.futures').futures.ThreadPoolExecutor(8) as ex:
            codes = list(ex.map(chat, range(8)))
    assert max(eng.batcher.batch_sizes) > 1  # they did share a batch
    assert codes.count(200) == 7 and codes[3] == 500, codes



@pytest.mark.timeout(120)
def test_the_jax_engine_itself_holds_top_k_stop_ids_and_seeds_to_what_it_can_do():
    "Past the servers: a huge top_k (off), stop id (dropped) or seed (mod 2**63) fails no batch."
    from flax import nnx
    from tunix_agentic.engines.engine import SamplingParams
    from tunix_agentic.engines.jax_engine import JaxEngine, JaxEngineConfig
    from tunix_agentic.models.qwen2 import ModelConfig, Qwen2
    eng = JaxEngine(Qwen2(ModelConfig.tiny(), rngs=nnx.Rngs(0)), config=JaxEngineConfig.tiny())
    wild = SamplingParams(top_k=2 ** 40, stop_token_ids=(2 ** 40, -2 ** 40), seed=2 ** 70 + 7,
                          max_new_tokens=6)
    same = SamplingParams(top_k=0, seed=(2 ** 70 + 7) % (1 << 63), max_new_tokens=6)
    outs = eng.generate([[1, 2, 3], [1, 2, 3], [4, 5]],
                        [wild, same, SamplingParams(seed=1, max_new_tokens=6)])
    assert outs[0].token_ids == outs[1].token_ids and len(outs[0].token_ids) == 6, outs
    assert len(outs[2].token_ids) == 6 and outs[2].finish_reason == 'length', outs


# ---- text bounded before tokenizing ----
@pytest.mark.timeout(60)
def test_a_megabyte_of_text_is_refused_before_the_tokenizer(tok):
    srv = EngineServer(ScriptedEngine(tok, ['Hi.']), tok, max_prompt_tokens=4096)
    calls = []
    render, encode = srv.render, srv.tokenizer.encode
    srv.render = lambda *a, **kw: calls.append('render') or render(*a, **kw)
    srv.tokenizer.encode = lambda *a, **kw: calls.append('encode') or encode(*a, **kw)
    rs = rollout_server()
    try:
        srv.start()
        text = 'hello world ' * 80_000  # ~1 MB, under the 1 MiB cap of one string
        r = httpx.post(srv.url + '/v1/chat/completions', timeout=30,
                       json={'messages': [{'role': 'user', 'content': text}]})
        assert r.status_code == 422 and 'characters' in r.text
        r = httpx.post(srv.url + '/v1/completions', json={'prompt': text}, timeout=30)
        assert r.status_code == 422  # (a text prompt was already capped by its schema)
        assert calls == []  # never tokenized
        r = httpx.post(rs.url + '/rollout', timeout=30, json=body(
            'big', srv.url, max_tokens_total=8192, messages=[{'role': 'user', 'content': text}]))
        assert r.status_code == 422 and 'characters' in r.text
        assert rs.tokenizers.loads == 0  # refused at admission, before any tokenizer
    finally:
        srv.close()
        rs.close()
    srv.tokenizer.encode = encode


# ---- rollout ids ----
@pytest.mark.timeout(90)
def test_a_rollout_id_is_scoped_to_its_caller_and_bound_to_its_body(tok):
    a = EngineServer(ScriptedEngine(tok, SCRIPT), tok, api_key='ka').start()
    b = EngineServer(ScriptedEngine(tok, SCRIPT), tok, api_key='kb').start()
    srv = rollout_server()
    try:
        post = lambda bd: httpx.post(srv.url + '/rollout', json=bd, timeout=30)
        first = body('r1', a.url, callback_api_key='ka',
                     messages=[{'role': 'user', 'content': 'secret of A: 1+2?'}])
        assert post(first).json()['status'] == 'COMPLETED'
        assert post(first).json()['final_messages'][0]['content'] == 'secret of A: 1+2?'  # retry
        other = {**first, 'messages': [{'role': 'user', 'content': 'what did A ask?'}]}
        r = post(other)
        assert r.status_code == 409 and 'in use' in r.text and 'secret' not in r.text
        calls = b.engine.calls
        theirs = post(body('r1', b.url, callback_api_key='kb'))  # another caller's r1
        assert theirs.status_code == 200 and 'secret' not in theirs.text
        assert b.engine.calls > calls  # the second trainer was called
    finally:
        srv.close()
        a.close()
        b.close()


# ---- callback answers ----
def _liar(pause_s: float) -> BackgroundServer:
    app, packed = FastAPI(), gzip.compress(b' ' * (100 << 20), 6)  # ~100 KB that inflate to 100 MB
    ok = {'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'x'},
                       'finish_reason': 'stop'}], 'token_ids': [5], 'token_logprobs': [0.0]}
    @app.post('/big/v1/chat/completions')
    async def big(): return Response(b' ' * (5 << 20) + json.dumps(ok).encode())
    @app.post('/endless/v1/chat/completions')
    async def endless():
        async def gen():
            while True:
                yield b' ' * 65536
                await asyncio.sleep(0)
        return StreamingResponse(gen(), media_type='application/json')
    @app.post('/bomb/v1/chat/completions')
    async def bomb():
        return Response(packed, media_type='application/json',
                        headers={'Content-Encoding': 'gzip'})
    @app.post('/trickle/v1/chat/completions')
    async def trickle():
        async def gen():
            for _ in range(1000):
                yield b' '
                await asyncio.sleep(pause_s)
        return StreamingResponse(gen(), media_type='application/json')
    return BackgroundServer(app).start()


@pytest.mark.timeout(120)
def test_callback_answers_are_bounded_in_bytes_time_and_encoding():
    liar = _liar(0.2)
    srv = rollout_server(max_callback_bytes=1 << 20, callback_timeout_s=1.0)
    try:
        want = {'big': 'over 1048576 bytes', 'endless': 'over 1048576 bytes',
                'bomb': "content-encoding 'gzip' refused", 'trickle': 'took over 1.0 s'}
        for path, why in want.items():
            r = httpx.post(srv.url + '/rollout', json=body(path, f'{liar.url}/{path}'),
                           timeout=60).json()
            assert r['status'] == 'ERROR' and why in r['error_message'], (path, r)
        assert httpx.get(srv.url + '/health').json()['active_rollouts'] == 0
    finally:
        srv.close()
        liar.close()


# ---- abandoned rollouts, capped timeouts ----
class Slow(ScriptedEngine):
    def generate(self, prompts, params):
        time.sleep(0.3)
        return super().generate(prompts, params)


@pytest.mark.timeout(90)
def test_abandoned_rollouts_are_cancelled_and_timeouts_capped(tok):
    eng = EngineServer(Slow(tok, [SCRIPT[0]] * 50), tok).start()
    srv = rollout_server(max_timeout_s=1.0)  # on_disconnect: cancel by default
    try:
        for i in range(4):  # post and leave
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(srv.url + '/rollout', timeout=0.2,
                           json=body(f'gone{i}', eng.url, max_turns=50))
        t0 = time.monotonic()
        while httpx.get(srv.url + '/health').json()['active_rollouts']:
            assert time.monotonic() - t0 < 20
            time.sleep(0.1)
        r = httpx.post(srv.url + '/rollout', timeout=60,
                       json=body('long', eng.url, max_turns=50, timeout_s=86400)).json()
        assert r['status'] == 'ERROR' and 'exceeded 1.0 s' in r['error_message'], r
    finally:
        srv.close()
        eng.close()



@pytest.mark.timeout(90)
def test_a_caller_holds_at_most_its_quota_of_rollouts(tok):
    "Kept rollouts of a caller that left count against it: its next one is a 429, others run."
    slow = EngineServer(Slow(tok, [SCRIPT[0]] * 50), tok).start()
    fast = EngineServer(ScriptedEngine(tok, SCRIPT), tok).start()
    srv = rollout_server(on_disconnect='keep', max_rollouts_per_caller=2, max_timeout_s=3.0)
    post = lambda b, t=30: httpx.post(srv.url + '/rollout', json=b, timeout=t)
    try:
        for i in range(2):  # post and leave: kept, and held against this caller
            with pytest.raises(httpx.ReadTimeout):
                post(body(f'kept{i}', slow.url, max_turns=50), 0.2)
        r = post(body('third', slow.url))
        assert r.status_code == 429 and r.headers['retry-after'] == '1', r.text
        assert 'max_rollouts_per_caller=2' in r.json()['error']['message'], r.text
        other = post(body('other', fast.url))  # another caller: its own quota
        assert other.status_code == 200 and other.json()['status'] == 'COMPLETED', other.text
        joined = post(body('kept0', slow.url, max_turns=50))  # a retry joins, never counted
        assert joined.status_code == 200 and 'exceeded 3.0 s' in joined.json()['error_message']
        t0 = time.monotonic()
        while httpx.get(srv.url + '/health').json()['active_rollouts']:
            assert time.monotonic() - t0 < 20
            time.sleep(0.1)
        assert post(body('third', slow.url)).status_code == 200  # ended ones are free again
        metrics = httpx.get(srv.url + '/metrics').text
        assert 'rollouts_rejected_total{reason="caller_quota"} 1.0' in metrics, metrics
    finally:
        srv.close()
        slow.close()
        fast.close()


# ---- slow heads and bodies ----
@pytest.mark.timeout(60)
def test_a_trickled_second_head_and_a_trickled_body_are_closed(tok, monkeypatch):
    import tunix_agentic.engines.http_plumbing as hp
    monkeypatch.setattr(hp, 'HEADER_TIMEOUT_S', 0.5)
    srv = EngineServer(ScriptedEngine(tok, ['Hi.']), tok)
    for m in srv.app.user_middleware: m.kwargs['body_timeout_s'] = 0.5
    srv.app.middleware_stack = None
    srv.start()
    try:
        s = socket.create_connection((srv.http.host, srv.http.port), timeout=10)
        s.sendall(b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
        assert b' 200 ' in s.recv(4096).split(b'\r\n')[0]  # one whole request, kept alive
        head, closed = b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ' + b'a' * 200, False
        for c in head:  # the next head, a byte at a time
            try: s.sendall(bytes([c]))
            except OSError: closed = True
            if closed: break
            time.sleep(0.05)
        closed = closed or s.recv(100) == b''
        assert closed
        s.close()
        s = socket.create_connection((srv.http.host, srv.http.port), timeout=10)
        s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'
                  b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n')
        answer = b''
        for _ in range(200):  # the body, a byte every 50 ms: 408 after the body deadline
            try: s.sendall(b' ')
            except OSError: break
            time.sleep(0.05)
            s.setblocking(False)
            try: answer = s.recv(4096)
            except BlockingIOError: pass
            s.setblocking(True)
            if answer: break
        assert b' 408 ' in answer.split(b'\r\n')[0], answer[:80]
        s.close()
    finally: srv.close()


@pytest.mark.timeout(60)
def test_an_idle_kept_alive_connection_and_an_oversized_head_are_closed(tok, monkeypatch):
    import tunix_agentic.engines.http_plumbing as hp
    monkeypatch.setattr(hp, 'KEEP_ALIVE_S', 0.5)
    with EngineServer(ScriptedEngine(tok, ['Hi.']), tok) as srv:
        s = socket.create_connection((srv.http.host, srv.http.port), timeout=10)
        s.sendall(b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
        assert b' 200 ' in s.recv(4096).split(b'\r\n')[0]
        assert s.recv(100) == b''  # idle past the keep-alive: closed by the server
        s.close()
        s = socket.create_connection((srv.http.host, srv.http.port), timeout=10)
        try: s.sendall(b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ' + b'a' * 65536)
        except OSError: pass
        line = s.recv(4096).split(b'\r\n')[0]
        assert line == b'' or b' 400 ' in line or b' 431 ' in line, line  # h11's head limit
        s.close()


# ---- OpenAI fields ----
@pytest.mark.timeout(60)
def test_openai_fields_are_implemented_or_refused(tok):
    with EngineServer(ScriptedEngine(tok, ['one two. three']), tok) as srv:
        chat = lambda **kw: httpx.post(srv.url + '/v1/chat/completions', timeout=10,
                                       json={'messages': HI, **kw})
        r = chat(stop=['.', 'zzz']).json()
        assert r['choices'][0]['message']['content'] == 'one two'
        assert r['choices'][0]['finish_reason'] == 'stop'
        assert tok.decode(r['token_ids']).startswith('one two.')  # ids end at the stop
        assert 'three' not in tok.decode(r['token_ids'])
        r = httpx.post(srv.url + '/v1/completions', json={'prompt': 'x', 'stop': 'two'},
                       timeout=10).json()
        assert r['choices'][0]['text'] == 'one ' and r['choices'][0]['finish_reason'] == 'stop'
        refused = {'logit_bias': {'5': 10}, 'response_format': {'type': 'json_object'},
                   'tool_choice': 'required', 'frequency_penalty': 0.5,
                   'presence_penalty': -1.0, 'top_logprobs': 2, 'n': 2,
                   'stream': True, 'best_of': 2}
        for k, v in refused.items():
            kw = {k: v, 'stop': 'x'} if k == 'stream' else {k: v}  # streamed stop strings
            r = chat(**kw)
            assert r.status_code == 422 and (k if k != 'stream' else 'stop') in r.text, (k, r.text)
        r = httpx.post(srv.url + '/v1/completions', json={'prompt': 'x', 'stream': True},
                       timeout=10)
        assert r.status_code == 422 and 'stream' in r.text
        assert chat(logit_bias={}, response_format={'type': 'text'},
                    frequency_penalty=0).status_code == 200


# ---- strict schemas, /generate, keyless servers ----
@pytest.mark.timeout(60)
def test_strict_schemas_generate_validation_and_keyless_checks(tok):
    with EngineServer(ScriptedEngine(tok, ['Hi.']), tok) as srv:
        post = lambda path, raw, **h: httpx.post(srv.url + path, content=raw, timeout=10,
                                                 headers={'content-type': 'application/json', **h})
        r = post('/v1/chat/completions', json.dumps(
            {'messages': [{'role': 'user', 'content': 'hi', 'pad': 'x' * 1000}]}))
        assert r.status_code == 422 and 'pad' in r.text
        for params, field in [('{"temperature": NaN}', 'temperature'),
                              ('{"temperature": Infinity}', 'temperature'),
                              ('{"max_new_tokens": 2.5}', 'max_new_tokens'),
                              ('{"max_new_tokens": true}', 'max_new_tokens'),
                              ('{"seed": 1e400}', 'seed'), ('{"top_p": 0}', 'top_p')]:
            r = post('/generate', '{"prompts": [[1]], "params": %s}' % params)
            assert r.status_code == 422 and field in r.text, (params, r.text)
        r = post('/v1/chat/completions', json.dumps({'messages': HI}), **{'content-type': 'text/plain'})
        assert r.status_code == 415
        r = post('/v1/chat/completions', json.dumps({'messages': HI}), host='evil.example')
        assert r.status_code == 403 and 'loopback' in r.text
    srv = rollout_server()
    try:
        post = lambda raw: httpx.post(srv.url + '/rollout', content=raw, timeout=10,
                                      headers={'content-type': 'application/json'})
        deep = {}
        for _ in range(100): deep = {'a': deep}
        bad = [body('x1', 'http://127.0.0.1:9/a\x00b'), body('x2', 'http://[::1'),
               body('x3', 'http://127.0.0.1:9', metadata={'task': deep}),
               body('x4', 'http://127.0.0.1:9', messages=[{'role': 'user', 'content': 'a',
                                                           'extra': 'x'}])]
        for b in bad:
            r = post(json.dumps(b))
            assert 400 <= r.status_code < 500, (b['rollout_id'], r.status_code, r.text)
        raw = json.dumps(body('x5', 'http://127.0.0.1:9', metadata={'k': 'SURROGATE'}))
        r = post(raw.replace('SURROGATE', '\\ud800'))
        assert r.status_code == 422, r.text
    finally: srv.close()


# ---- RemoteCollector ----
@pytest.mark.timeout(90)
def test_remote_collector_refuses_answers_out_of_shape(tok):
    fake = FastAPI()
    traj = {'steps': [{'reward': 1e308}], 'status': 'done'}
    answers = {'nan': b'{"rollout_id": "r", "status": "COMPLETED", "finish_reason": "stop", '
                      b'"reward": NaN}',
               'huge': b'{"rollout_id": "r", "status": "COMPLETED", "finish_reason": "stop", '
                       b'"error_message": "' + b'x' * (2 << 20) + b'"}',
               'reward': json.dumps({'rollout_id': 'r', 'status': 'COMPLETED',
                                     'finish_reason': 'stop', 'trajectory': traj}).encode(),
               'shape': b'{"rollout_id": 5}'}
    @fake.post('/{kind}/rollout')
    async def rollout(kind: str):
        return Response(answers[kind], media_type='application/json')
    http = BackgroundServer(fake).start()
    try:
        for kind, why in [('nan', 'reward'), ('huge', 'over'), ('reward', 'not finite or over'),
                          ('shape', 'not a rollout answer')]:
            col = RemoteCollector(ScriptedEngine(tok, SCRIPT), tok, f'{http.url}/{kind}',
                                  max_answer_bytes=1 << 20, retry_budget_s=1)
            try: t = asyncio.run(col.collect({'question': '1+2?'}, episode_id=kind))
            finally: col.close()
            assert t.status == TrajectoryStatus.ERROR and why in t.error, (kind, t.error)
            assert t.reward == 0.0
    finally: http.close()


# ---- streaming cost ----
@pytest.mark.timeout(60)
def test_streaming_decodes_each_token_a_bounded_number_of_times(tok):
    from tunix_agentic.engines.engine import GenerateOutput
    from tunix_agentic.engines.openai_requests import ChatRequest
    from tunix_agentic.engines.streaming import chat_stream
    class Counting:  # the tiny tokenizer, counting the ids it decodes
        decoded = 0
        def decode(self, ids, **kw):
            Counting.decoded += len(ids)
            return tok.decode(ids, **kw)
    srv = EngineServer(ScriptedEngine(tok, ['x']), tok)
    srv.tokenizer = Counting()
    ids = tok.encode('12 × 34 = 408 ✓ and more words ' * 60, add_special_tokens=False)
    async def outs():  # one token per engine chunk
        for i, t in enumerate(ids):
            yield GenerateOutput([t], [0.0], 'stop' if i == len(ids) - 1 else 'length')
    async def read():
        resp = chat_stream(srv, ChatRequest(messages=HI, stream=True), [1], outs())
        return ''.join([c async for c in resp.body_iterator])
    events = [json.loads(e[6:]) for e in asyncio.run(read()).split('\n\n')
              if e.startswith('data: {')]
    content = ''.join(c['delta'].get('content') or '' for e in events for c in e['choices'])
    from tunix_agentic.engines.server import PlainTextParser
    assert content == PlainTextParser().parse(tok.decode(ids)).content  # as the whole answer's
    assert Counting.decoded < 40 * len(ids), (Counting.decoded, len(ids))  # not ~len(ids)**2 / 2
