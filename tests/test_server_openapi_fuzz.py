"""Property-based fuzzing of both servers from their own OpenAPI schemas: hypothesis strategies built
from each route's JSON schema (`schema_strategy`, the subset pydantic emits: $ref, anyOf, enums,
bounds, lengths, patterns, extra keys) draw bodies the schema accepts for every POST route (and
every GET route is called); the app answers in-process, and no answer is a 5xx. (schemathesis 4
pulls seven packages and hypothesis-jsonschema 0.23 does not run on hypothesis 6.170.) Bodies the schema accepts are the ones that reach the servers'
own code (the vocabulary check, the prompt-length check, the callback, the collector), so this is
where a missing check shows up as a 500 (38 of them on `/generate` before issue 28)."""
import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, strategies as st

from tunix_agentic.chat.tokenizer import build_tiny_tokenizer
from tunix_agentic.engines.engine import ScriptedEngine
from tunix_agentic.engines.server import EngineServer
from tunix_agentic.serve.rollout_server import RolloutServer, RolloutSettings

DEAD = 'http://127.0.0.1:9'  # the discard port: connection refused, never a real service
SCRIPT = ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', 'ok']


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=8),
                    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=8), ch,
                                                                          max_size=3),
                    max_leaves=6)


def schema_strategy(s: dict, defs: dict) -> st.SearchStrategy:
    "Values a JSON schema (pydantic's subset) accepts."
    if '$ref' in s: return st.deferred(lambda: schema_strategy(defs[s['$ref'].split('/')[-1]], defs))
    if 'anyOf' in s: return st.one_of([schema_strategy(x, defs) for x in s['anyOf']])
    if 'const' in s: return st.just(s['const'])
    if 'enum' in s: return st.sampled_from(s['enum'])
    t = s.get('type')
    if t is None: return JSON
    if t == 'null': return st.none()
    if t == 'boolean': return st.booleans()
    if t == 'integer':
        lo = s.get('minimum', s['exclusiveMinimum'] + 1 if 'exclusiveMinimum' in s else None)
        hi = s.get('maximum', s['exclusiveMaximum'] - 1 if 'exclusiveMaximum' in s else None)
        edges = [x for x in (lo, hi, 0, 1, 2 ** 40, 2 ** 63) if x is not None and
                 (lo is None or x >= lo) and (hi is None or x <= hi)]
        return st.integers(lo, hi) | st.sampled_from(edges or [0])
    if t == 'number':
        return st.floats(s.get('minimum', s.get('exclusiveMinimum')),
                         s.get('maximum', s.get('exclusiveMaximum')), allow_nan=False,
                         allow_infinity=False, exclude_min='exclusiveMinimum' in s,
                         exclude_max='exclusiveMaximum' in s)
    if t == 'string':
        lo, hi = s.get('minLength', 0), min(s.get('maxLength', 40), max(40, s.get('minLength', 0)))
        if 'pattern' in s:
            return st.from_regex(s['pattern'], fullmatch=True).filter(lambda x: lo <= len(x) <= hi)
        return st.text(min_size=lo, max_size=hi)
    if t == 'array':
        lo = s.get('minItems', 0)
        return st.lists(schema_strategy(s.get('items', {}), defs), min_size=lo,
                        max_size=min(s.get('maxItems', lo + 5), lo + 5))
    props, req = s.get('properties', {}), set(s.get('required', ()))
    fixed = st.fixed_dictionaries(
        {k: schema_strategy(v, defs) for k, v in props.items() if k in req},
        optional={k: schema_strategy(v, defs) for k, v in props.items() if k not in req})
    extra = s.get('additionalProperties', True)
    if extra is False: return fixed
    more = st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in props),
                           JSON if extra is True else schema_strategy(extra, defs), max_size=2)
    return st.builds(lambda a, b: {**b, **a}, fixed, more)


def routes(app) -> list[tuple[str, str, st.SearchStrategy | None]]:
    "`(method, path, bodies)` of every route in the app's OpenAPI (None: no body)."
    spec = app.openapi()
    out = []
    for path, ops in sorted(spec['paths'].items()):
        for method, op in sorted(ops.items()):
            s = op.get('requestBody', {}).get('content', {}).get('application/json', {})
            s = s.get('schema')
            defs = spec.get('components', {}).get('schemas', {})
            out.append((method, path, None if s is None else schema_strategy(s, defs)))
    return out


def fuzz(client: TestClient, app, tweak, n: int) -> dict:
    "POST `n` schema-valid bodies (through `tweak`) to each route; return the status counts."
    codes: dict = {}
    for method, path, bodies in routes(app):
        if bodies is None:
            r = client.request(method.upper(), path)
            assert r.status_code < 500, (path, r.text[:300])
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            continue
        @settings(max_examples=n, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(bodies, st.randoms(use_true_random=False))
        def check(body, rnd):
            body = tweak(path, body, rnd)
            r = client.request(method.upper(), path, json=body)
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            assert r.status_code < 500, (path, json.dumps(body)[:300], r.text[:300])
            assert r.status_code == 200 or 'error' in r.json()
        check()
    return codes


def engine_tweak(path, body, rnd):
    if isinstance(body, dict) and rnd.random() < 0.5:  # reach the engine, not only the checks
        body.pop('model', None); body.pop('prompt_token_ids', None); body.pop('response_mask', None)
        for k in ('max_tokens', 'max_completion_tokens'):
            if isinstance(body.get(k), int): body[k] = min(body[k], 16)
    return body


def rollout_tweak(path, body, rnd):
    if isinstance(body, dict) and rnd.random() < 0.5:  # run the rollout (the callback is dead)
        body.update(server_url=DEAD, tokenizer_name='tiny', timeout_s=5,
                    max_turns=min(body.get('max_turns', 2), 2))
        body.pop('tools', None)
    return body


@pytest.mark.timeout(300)
def test_engine_server_openapi_fuzz_no_5xx():
    tok = build_tiny_tokenizer()
    srv = EngineServer(ScriptedEngine(tok, SCRIPT), tok, max_tokens=64)
    with TestClient(srv.app, raise_server_exceptions=False, base_url='http://127.0.0.1') as client:
        codes = fuzz(client, srv.app, engine_tweak, 120)
    assert not any(c >= 500 for c in codes), codes
    assert codes.get(200, 0) > 20 and codes.get(422, 0) > 20, codes
    print(f'\nengine server: {sum(codes.values())} requests, status counts {sorted(codes.items())}')


@pytest.mark.timeout(300)
def test_rollout_server_openapi_fuzz_no_5xx():
    srv = RolloutServer(RolloutSettings(callback_hosts=('127.0.0.1:9',)))
    with TestClient(srv.app, raise_server_exceptions=False, base_url='http://127.0.0.1') as client:
        codes = fuzz(client, srv.app, rollout_tweak, 150)
        assert client.get('/health').json()['active_rollouts'] == 0
    assert not any(c >= 500 for c in codes), codes
    assert codes.get(200, 0) > 20, codes
    print(f'\nrollout server: {sum(codes.values())} requests, status counts {sorted(codes.items())}')
