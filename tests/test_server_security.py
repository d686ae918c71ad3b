"""Issue 28's attacks replayed against both servers, each refused or bounded: SSRF variants (numeric
hosts, user info, query and fragment tricks, redirects, the callee's body read back), a tokenizer
that would run its own code, a 200 MB body (declared and chunked), a huge message beside small
requests (work off the event loop), slow clients, a retry after a client timeout (exactly once),
a client that leaves (cancel), an over-long callback answer, keys and exposure, OpenAI shapes."""
import json, re, select, socket, threading, time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse

from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.http_plumbing import BackgroundServer
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.serve.rollout_server import RolloutServer, RolloutSettings

SCRIPT = ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
          'The answer is 3.']
SECRET = 'db_password=hunter2'


@pytest.fixture(scope='module')
def tok(): return build_tiny_tokenizer()


class Internal:
    "An internal service the rollout server must never reach: counts hits, answers its secret."
    def __init__(self):
        self.hits, app = [], FastAPI()
        @app.api_route('/{path:path}', methods=['GET', 'POST'])
        async def anything(path: str, request: Request):
            self.hits.append(path)
            return JSONResponse({'error': {'message': SECRET}, 'secret': SECRET}, 403)
        self.http = BackgroundServer(app).start()
        self.port = self.http.port


@pytest.fixture(scope='module')
def internal():
    s = Internal()
    yield s
    s.http.close()


def body(rid, url, **kw):
    return {'rollout_id': rid, 'server_url': url, 'max_turns': 3, 'timeout_s': 30,
            'messages': [{'role': 'user', 'content': 'What is 1+2?'}], **kw}


def rollout_server(**kw) -> RolloutServer:
    return RolloutServer(RolloutSettings(**kw)).start()


def metric(url, name):
    text = httpx.get(url + '/metrics').text
    m = re.search(rf'^{re.escape(name)} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


# ---- SSRF ----
@pytest.mark.timeout(60)
def test_ssrf_variants_are_refused_before_any_connection(internal):
    p = internal.port
    default = rollout_server()  # the operator allowed nothing
    only_trainer = rollout_server(callback_hosts=(f'trainer.example:{p + 1}',))
    try:
        variants = [f'http://127.0.0.1:{p}', f'http://localhost:{p}', f'http://LOCALHOST.:{p}',
                    f'http://2130706433:{p}', f'http://0x7f.1:{p}', f'http://127.1:{p}',
                    f'http://017700000001:{p}', f'http://[::ffff:127.0.0.1]:{p}',
                    f'http://[::1]:{p}', f'http://evil@127.0.0.1:{p}',
                    f'http://trainer.example:{p + 1}@127.0.0.1:{p}',
                    f'http://127.0.0.1:{p}/admin?x=', f'http://127.0.0.1:{p}/admin#']
        for srv in (default, only_trainer):
            for i, url in enumerate(variants):
                r = httpx.post(srv.url + '/rollout', json=body(f'ssrf{i}', url), timeout=10)
                assert r.status_code in (403, 422), (url, r.status_code, r.text)
                assert r.json()['error']['type'] in ('permission_error', 'invalid_request_error')
                assert SECRET not in r.text
        # the allowed name with a query or fragment that would re-aim the appended path
        for tail in ('/?x=', '/#'):
            r = httpx.post(only_trainer.url + '/rollout',
                           json=body('q', f'http://trainer.example:{p + 1}{tail}'), timeout=10)
            assert r.status_code == 403 and 'query or fragment' in r.text
    finally: default.close(); only_trainer.close()
    assert internal.hits == []


@pytest.mark.timeout(60)
def test_an_allowed_callee_body_and_redirects_never_come_back(internal):
    "Loopback allowed: the internal service's 403 body is not echoed; a redirect is not followed."
    redirector = FastAPI()
    @redirector.post('/v1/chat/completions')
    async def redirect():
        return RedirectResponse(f'http://127.0.0.1:{internal.port}/steal', status_code=307)
    red = BackgroundServer(redirector).start()
    srv = rollout_server(callback_hosts=('loopback',))
    try:
        r = httpx.post(srv.url + '/rollout', json=body('leak', f'http://127.0.0.1:{internal.port}'),
                       timeout=30).json()
        assert r['finish_reason'] == 'error' and r['error_message'].endswith('-> 403')
        assert SECRET not in json.dumps(r)
        before = len(internal.hits)
        r = httpx.post(srv.url + '/rollout', json=body('redir', red.url), timeout=30).json()
        assert r['finish_reason'] == 'error' and '307' in r['error_message']
        assert len(internal.hits) == before  # the redirect was not followed
    finally: srv.close(); red.close()


# ---- caller-chosen code ----
@pytest.mark.timeout(120)
def test_a_remote_code_tokenizer_never_runs(tmp_path, tok):
    folder, marker = tmp_path / 'evil_tok', tmp_path / 'PWNED'
    tok.save_pretrained(folder)
    cfg = json.loads((folder / 'tokenizer_config.json').read_text())
    cfg['auto_map'] = {'AutoTokenizer': ['evil.EvilTokenizer', None]}
    (folder / 'tokenizer_config.json').write_text(json.dumps(cfg))
    (folder / 'evil.py').write_text(f'open({str(marker)!r}, "w").write("ran")\n'
                                    'from transformers import PreTrainedTokenizerFast\n'
                                    'class EvilTokenizer(PreTrainedTokenizerFast): pass\n')
    with EngineServer(ScriptedEngine(tok, SCRIPT), tok) as eng:
        refuse = rollout_server(callback_hosts=('loopback',))
        listed = rollout_server(callback_hosts=('loopback',), tokenizers=('tiny', str(folder)))
        try:
            # not on the operator's list: 422, and the same answer for paths that exist or not
            answers = []
            for name in (str(folder), '/etc', '/no/such/dir'):
                r = httpx.post(refuse.url + '/rollout', timeout=30,
                               json=body('t', eng.url, tokenizer_name=name))
                assert r.status_code == 422
                answers.append(r.json()['error']['message'].replace(name[:80], 'NAME'))
            assert len(set(answers)) == 1, answers
            # on the list, but trust_remote_code is off: the folder's code does not run
            r = httpx.post(listed.url + '/rollout', timeout=60,
                           json=body('t2', eng.url, tokenizer_name=str(folder))).json()
            assert not marker.exists()
            assert r['finish_reason'] in ('error', 'stop')
            if r['finish_reason'] == 'error': assert 'evil.py' not in r['error_message']
        finally: refuse.close(); listed.close()
    assert not marker.exists()


# ---- keys and exposure ----
def test_no_key_beyond_loopback_refuses_to_start(tok):
    with pytest.raises(ValueError, match='needs an api_key'):
        RolloutServer(RolloutSettings()).start('0.0.0.0')
    with pytest.raises(ValueError, match='needs an api_key'):
        EngineServer(ScriptedEngine(tok, SCRIPT), tok, host='0.0.0.0')


@pytest.mark.timeout(60)
def test_the_key_guards_every_route_but_health(tok):
    srv = rollout_server(api_key='s3cret')
    eng = EngineServer(ScriptedEngine(tok, SCRIPT), tok, api_key='k2').start()
    try:
        for url, key, paths in [(srv.url, 's3cret', ['/tools', '/metrics', '/openapi.json']),
                                (eng.url, 'k2', ['/v1/models', '/openapi.json'])]:
            assert httpx.get(url + '/health').status_code == 200
            for path in paths:
                assert httpx.get(url + path).status_code == 401, path
                assert httpx.get(url + path, headers={'Authorization': 'Bearer nope'}
                                 ).status_code == 401
                assert httpx.get(url + path, headers={'Authorization': f'Bearer {key}'}
                                 ).status_code == 200
        assert httpx.post(srv.url + '/rollout', json=body('k', eng.url)).status_code == 401
    finally: srv.close(); eng.close()


# ---- bounded work ----
def _raw_post(url: str, path: str, head_extra: str, chunks) -> tuple[str, int]:
    "POST over a raw socket, sending `chunks` until the server answers; (status line, bytes sent)."
    u = httpx.URL(url)
    s = socket.create_connection((u.host, u.port), timeout=5)
    s.sendall(f'POST {path} HTTP/1.1\r\nHost: {u.host}\r\nContent-Type: application/json\r\n'
              f'{head_extra}\r\n'.encode())
    sent = 0
    try:
        for c in chunks:
            if select.select([s], [], [], 0)[0]: break  # the server answered already
            try: s.sendall(c); sent += len(c)
            except (TimeoutError, BrokenPipeError, ConnectionResetError): break
        return s.recv(4096).split(b'\r\n')[0].decode(), sent
    finally: s.close()


@pytest.mark.timeout(120)
def test_a_200_mb_body_is_refused_unread(tok):
    eng = EngineServer(ScriptedEngine(tok, SCRIPT), tok).start()
    srv = rollout_server()
    try:
        mb = b'x' * (1 << 20)
        for url, path in [(eng.url, '/v1/chat/completions'), (srv.url, '/rollout')]:
            line, sent = _raw_post(url, path, f'Content-Length: {200 << 20}\r\n', [mb] * 200)
            assert ' 413 ' in line, line
            assert sent < 100 << 20  # the answer came long before the body was through
            def chunked():
                for _ in range(200): yield b'%x\r\n%s\r\n' % (len(mb), mb)
            line, sent = _raw_post(url, path, 'Transfer-Encoding: chunked\r\n', chunked())
            assert ' 413 ' in line, line
            assert sent < 100 << 20
        assert httpx.get(eng.url + '/health').status_code == 200
    finally: eng.close(); srv.close()


@pytest.mark.timeout(120)
def test_a_huge_message_beside_small_requests(tok):
    "10 MB: 413. ~1 MB (allowed): rendered on a worker thread, then refused as too many tokens."
    threads = []
    eng = EngineServer(ScriptedEngine(tok, SCRIPT), tok, max_tokens=64,  # text past the chars
                       max_prompt_chars=1 << 21).start()  # bound: test_server_hostile
    render = eng.render
    def spy(*a, **kw):
        threads.append(threading.current_thread().name); return render(*a, **kw)
    eng.render = spy
    try:
        url = eng.url + '/v1/chat/completions'
        small = {'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 8}
        r = httpx.post(url, json={'messages': [{'role': 'user', 'content': 'x' * (10 << 20)}]},
                       timeout=30)
        assert r.status_code == 413
        big = {'messages': [{'role': 'user', 'content': 'hello world ' * 80_000}]}
        lat, done = [], {}
        def send_big():
            t0 = time.perf_counter()
            done['big'] = httpx.post(url, json=big, timeout=60)
            done['big_s'] = time.perf_counter() - t0
        t = threading.Thread(target=send_big); t.start()
        with httpx.Client(timeout=30) as c:
            while t.is_alive() or len(lat) < 3:
                t0 = time.perf_counter()
                assert c.post(url, json=small).status_code == 200
                lat.append(time.perf_counter() - t0)
                if len(lat) > 500: break
        t.join()
        assert done['big'].status_code == 422 and 'tokens' in done['big'].text
        assert threads and not any(n.startswith('uvicorn') for n in threads), threads
        print(f'\n~1 MB message: {done["big_s"]:.2f} s to its 422; {len(lat)} small requests '
              f'meanwhile, latency max {max(lat) * 1e3:.0f} ms, median '
              f'{sorted(lat)[len(lat) // 2] * 1e3:.0f} ms')
    finally: eng.close()


@pytest.mark.timeout(60)
def test_slow_heads_and_bodies_are_timed_out(tok, monkeypatch):
    import tunix_agentic.engines.http_plumbing as hp
    monkeypatch.setattr(hp, 'HEADER_TIMEOUT_S', 0.5)
    eng = EngineServer(ScriptedEngine(tok, SCRIPT), tok)
    for m in eng.app.user_middleware: m.kwargs['body_timeout_s'] = 0.5
    eng.app.middleware_stack = None
    eng.start()
    try:
        s = socket.create_connection((eng.http.host, eng.http.port), timeout=10)
        s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n')  # ... and nothing more
        t0 = time.monotonic()
        assert s.recv(100) == b''  # closed by the server
        assert time.monotonic() - t0 < 9
        s.close()
        s = socket.create_connection((eng.http.host, eng.http.port), timeout=10)
        s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'
                  b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{')
        assert b' 408 ' in s.recv(4096).split(b'\r\n')[0]
        s.close()
    finally: eng.close()


# ---- exactly once ----
class Slow(ScriptedEngine):
    def generate(self, prompts, params):
        time.sleep(0.3); return super().generate(prompts, params)


@pytest.mark.timeout(90)
def test_a_retry_after_a_client_timeout_runs_the_rollout_once(tok):
    eng = EngineServer(Slow(tok, SCRIPT), tok).start()
    srv = rollout_server(callback_hosts=('loopback',), on_disconnect='keep')
    try:
        b = body('once', eng.url)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + '/rollout', json=b, timeout=0.2)
        joined = httpx.post(srv.url + '/rollout', json=b, timeout=30).json()  # joins the run
        assert joined['finish_reason'] == 'stop'
        with pytest.raises(httpx.ReadTimeout):  # a second run id, whose client also leaves
            httpx.post(srv.url + '/rollout', json=body('once2', eng.url), timeout=0.2)
        while httpx.get(srv.url + '/health').json()['active_rollouts']: time.sleep(0.1)
        kept = httpx.post(srv.url + '/rollout', json=body('once2', eng.url), timeout=30).json()
        assert kept['finish_reason'] == 'stop'
        assert metric(srv.url, 'rollouts_total{finish_reason="stop"}') == 2  # each ran once
        assert metric(srv.url, 'llm_calls_total') == 4
        assert metric(srv.url, 'rollouts_rejected_total{reason="replayed"}') == 1
    finally: srv.close(); eng.close()


@pytest.mark.timeout(90)
def test_an_abandoned_rollout_is_cancelled_when_configured(tok):
    eng = EngineServer(Slow(tok, [SCRIPT[0]] * 10), tok).start()
    srv = rollout_server(callback_hosts=('loopback',), on_disconnect='cancel')
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + '/rollout', json=body('gone', eng.url, max_turns=10), timeout=0.2)
        t0 = time.monotonic()
        while httpx.get(srv.url + '/health').json()['active_rollouts']:
            assert time.monotonic() - t0 < 20; time.sleep(0.1)
        time.sleep(0.5)
        assert metric(srv.url, 'rollouts_total{finish_reason="stop"}') == 0
        assert metric(srv.url, 'llm_calls_total') < 10
    finally: srv.close(); eng.close()


# ---- the trainer's answers are not trusted ----
@pytest.mark.timeout(60)
def test_an_over_long_callback_answer_ends_the_rollout_as_error():
    liar = FastAPI()
    @liar.post('/v1/chat/completions')
    async def answer():
        n = 20_001
        return {'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'x'},
                             'finish_reason': 'stop'}],
                'token_ids': [5] * n, 'token_logprobs': [0.0] * n}
    http = BackgroundServer(liar).start()
    srv = rollout_server(callback_hosts=('loopback',))
    try:
        r = httpx.post(srv.url + '/rollout', timeout=30, json=body(
            'long', http.url, sampling_params={'max_tokens': 16})).json()
        assert (r['status'], r['finish_reason']) == ('ERROR', 'error'), r
        assert '20001 tokens for max_tokens=16' in r['error_message']
        assert r['metrics']['num_llm_calls'] == 0 and metric(srv.url, 'llm_calls_total') == 0
    finally: srv.close(); http.close()


# ---- OpenAI shapes ----
@pytest.mark.timeout(60)
def test_openai_shapes_unknown_model_and_generate_validation(tok):
    with EngineServer(ScriptedEngine(tok, SCRIPT), tok) as eng:
        msgs = [{'role': 'user', 'content': 'hi'}]
        r = httpx.post(eng.url + '/v1/chat/completions', json={'model': 'gpt-4', 'messages': msgs})
        assert r.status_code == 404 and r.json()['error']['type'] == 'not_found_error'
        for bad in ([[1099511627776]], [[False]], [[1.0]], [[-1]], [[]]):
            r = httpx.post(eng.url + '/generate', json={'prompts': bad})
            assert r.status_code == 422, (bad, r.text)
            assert r.json()['error']['type'] == 'invalid_request_error'
        r = httpx.post(eng.url + '/generate', json={'prompts': [[1]],
                                                   'params': {'max_new_tokens': True}})
        assert r.status_code == 422
        r = httpx.post(eng.url + '/v1/chat/completions', content=b'{not json',
                       headers={'Content-Type': 'application/json'})
        assert r.status_code == 422 and r.json()['error']['type'] == 'invalid_request_error'


@pytest.mark.timeout(60)
def test_callbacks_carry_tool_calls_whose_ids_the_tool_answers_use(tok):
    class Recording(EngineServer):
        seen: list = []
        async def chat(self, req):
            self.seen.append([m.model_dump(exclude_none=True) for m in req.messages])
            return await super().chat(req)
    eng = Recording(ScriptedEngine(tok, SCRIPT), tok).start()
    srv = rollout_server(callback_hosts=('loopback',))
    try:
        r = httpx.post(srv.url + '/rollout', json=body('ids', eng.url), timeout=30).json()
    finally: srv.close(); eng.close()
    assert r['finish_reason'] == 'stop'
    second = eng.seen[1]
    asst, tool = second[-2], second[-1]
    assert asst['role'] == 'assistant' and tool['role'] == 'tool'
    assert [c['function']['name'] for c in asst['tool_calls']] == ['add']
    assert asst['tool_calls'][0]['id'] == tool['tool_call_id']
    assert json.loads(asst['tool_calls'][0]['function']['arguments']) == {'a': 1, 'b': 2}


@pytest.mark.timeout(120)
def test_a_huge_rollout_prompt_is_measured_off_the_loop_beside_small_rollouts(tok):
    "A ~0.5 MB message: its length is checked on a worker thread, small rollouts keep finishing."
    eng = EngineServer(ScriptedEngine(tok, SCRIPT), tok).start()
    srv = rollout_server(callback_hosts=('loopback',))
    try:
        assert httpx.post(srv.url + '/rollout', timeout=30, json=body(
            'cap', eng.url, max_tokens_total=1 << 20)).status_code == 422
        big = body('big', eng.url, max_tokens_total=1 << 16,  # under the characters' bound
                   messages=[{'role': 'user', 'content': 'hello world ' * 40_000}])
        done = {}
        def send_big():
            t0 = time.perf_counter()
            done['big'] = httpx.post(srv.url + '/rollout', json=big, timeout=60).json()
            done['big_s'] = time.perf_counter() - t0
        t = threading.Thread(target=send_big); t.start()
        lat = []
        with httpx.Client(timeout=30) as c:
            while t.is_alive() or len(lat) < 3:
                t0 = time.perf_counter()
                r = c.post(srv.url + '/rollout', json=body(f'small{len(lat)}', eng.url)).json()
                assert r['finish_reason'] == 'stop'
                lat.append(time.perf_counter() - t0)
        t.join()
        assert done['big']['finish_reason'] == 'error'
        assert 'max_tokens_total' in done['big']['error_message']
        print(f'\n~1 MB rollout prompt: {done["big_s"]:.2f} s to its error; {len(lat)} small '
              f'rollouts meanwhile, latency max {max(lat) * 1e3:.0f} ms, median '
              f'{sorted(lat)[len(lat) // 2] * 1e3:.0f} ms')
    finally: srv.close(); eng.close()
