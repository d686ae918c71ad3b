"""Rate limiter: exact in-flight accounting after 1,000 failing calls, FIFO under contention, global and
per-tool limits, retry-later with backoff."""
import asyncio, random

import pytest

from tunix_agentic.tools.ratelimit import RateLimiter, RetryLater, ToolRateLimiter, retry_async


class Boom(Exception): pass


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_1000_failing_calls_leave_zero_in_flight():
    "Exceptions, timeouts and cancellations (waiting and running) all give their slot back."
    lim = RateLimiter(rate=50_000, burst=8, max_concurrency=7, name='t')
    tools = ToolRateLimiter(RateLimiter(max_concurrency=5, name='global'),
                            {'a': RateLimiter(max_concurrency=2, name='a'),
                             'b': RateLimiter(rate=50_000, burst=3, name='b')})
    rng = random.Random(0)
    kinds = ['exception', 'timeout', 'cancel', 'cancel']

    async def failing(i, kind):
        ctx = lim.slot() if i % 2 else tools.slot(rng.choice(['a', 'b', 'c']))
        if kind == 'exception':
            async with ctx: await asyncio.sleep(0); raise Boom(i)
        if kind == 'timeout':
            async def hold():
                async with ctx: await asyncio.sleep(10)
            await asyncio.wait_for(hold(), 0.001)
        async with ctx: await asyncio.sleep(10)  # cancelled from outside

    tasks = []
    for i in range(1000):
        kind = kinds[i % 4]
        tasks.append(asyncio.create_task(failing(i, kind)))
        if i % 50 == 49: await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    for t, i in zip(tasks, range(1000)):
        if i % 4 >= 2: t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, (Boom, asyncio.TimeoutError, asyncio.CancelledError)) for r in results)
    assert sum(isinstance(r, Boom) for r in results) == 250
    assert sum(isinstance(r, asyncio.TimeoutError) for r in results) == 250
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 500
    assert lim.in_flight == 0 and lim.waiting == 0
    assert tools.in_flight == {'a': 0, 'b': 0, 'global': 0}
    assert all(l.waiting == 0 for l in [tools.global_limiter, *tools.per_tool.values()])
    # and the limiters still work
    async with lim.slot(), tools.slot('a'): assert lim.in_flight == 1


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize('kw', [dict(max_concurrency=1), dict(max_concurrency=3),
                                dict(rate=2000, burst=1), dict(rate=2000, burst=4, max_concurrency=2)])
async def test_fifo_under_contention(kw):
    lim, order, rng = RateLimiter(**kw), [], random.Random(1)

    async def call(i):
        async with lim.slot():
            order.append(i); await asyncio.sleep(rng.random() * 0.002)

    tasks = [asyncio.create_task(call(i)) for i in range(200)]
    await asyncio.gather(*tasks)
    assert order == list(range(200))
    assert lim.in_flight == 0 and lim.granted == 200


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_fifo_late_small_caller_does_not_overtake():
    "A waiter at the head blocks later arrivals even when a slot is momentarily free for them."
    lim, order = RateLimiter(max_concurrency=1), []
    await lim.acquire()
    async def call(i):
        async with lim.slot(): order.append(i)
    ts = [asyncio.create_task(call(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert order == [] and lim.waiting == 5
    lim.release()
    await asyncio.gather(*ts)
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_token_bucket_paces_calls():
    lim = RateLimiter(rate=200, burst=1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for _ in range(21): await lim.acquire(); lim.release()
    assert loop.time() - t0 >= 20 / 200 * 0.9  # a lower bound the bucket guarantees


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_retry_backoff_no_starvation():
    "Callers that back off release their slot; all callers finish; 429s are retried up to a limit."
    lim, busy = RateLimiter(max_concurrency=2), {i: i % 3 for i in range(30)}
    done = []

    async def attempt(i):
        if busy[i] > 0:
            busy[i] -= 1; raise RetryLater('HTTP 429', retry_after=0.001)
        done.append(i); return i

    res = await asyncio.gather(*(retry_async(lambda i=i: attempt(i), base_delay=0.001, limiter=lim,
                                             rng=random.Random(i)) for i in range(30)))
    assert res == list(range(30)) and sorted(done) == list(range(30))
    assert lim.in_flight == 0 and lim.granted == 30 + 10 * 1 + 10 * 2

    calls = 0
    async def always():
        nonlocal calls; calls += 1; raise RetryLater('HTTP 429')
    with pytest.raises(RetryLater, match='gave up after 4 attempts'):
        await retry_async(always, max_retries=3, base_delay=0.001, limiter=lim)
    assert calls == 4 and lim.in_flight == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_retry_cancelled_during_backoff():
    lim = RateLimiter(max_concurrency=1)
    async def busy(): raise RetryLater('busy', retry_after=5)
    t = asyncio.create_task(retry_async(busy, base_delay=5, max_delay=5, limiter=lim))
    await asyncio.sleep(0.05)
    t.cancel()
    with pytest.raises(asyncio.CancelledError): await t
    assert lim.in_flight == 0 and lim.waiting == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_per_tool_cap_does_not_hold_global_slot():
    "A call queued on its tool's cap holds no global slot, so other tools keep flowing."
    lims = ToolRateLimiter(RateLimiter(max_concurrency=2), {'slow': RateLimiter(max_concurrency=1)})
    gate = asyncio.Event()
    async def slow():
        async with lims.slot('slow'): await gate.wait()
    slows = [asyncio.create_task(slow()) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert lims.in_flight == {'slow': 1, 'global': 1}
    async def fast():
        async with lims.slot('fast'): return 1
    assert await asyncio.wait_for(asyncio.gather(*(fast() for _ in range(10))), 5) == [1] * 10
    gate.set(); await asyncio.gather(*slows)
    assert lims.in_flight == {'slow': 0, 'global': 0}


@pytest.mark.timeout(30)
@pytest.mark.parametrize('leftover', ['cancelled waiter', 'waiter of a closed loop'])
def test_limiter_outlives_its_event_loop(leftover):
    "Regression: a refill timer (or a waiter) left on a closed loop once hung the next `asyncio.run`."
    lim = RateLimiter(rate=4, burst=1, name='t')

    async def first():
        async with lim.slot(): pass  # the bucket is empty now
        waiter = asyncio.create_task(lim.acquire())
        await asyncio.sleep(0)  # queued, with a refill timer pending on this loop
        if leftover == 'cancelled waiter':
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError): await waiter

    loop = asyncio.new_event_loop()
    loop.run_until_complete(first())
    loop.close()  # the timer never fires; the second case leaves its waiter pending as well

    async def second():
        await asyncio.wait_for(lim.acquire(), 10)
        lim.release()
        return lim.in_flight

    assert asyncio.run(second()) == 0
