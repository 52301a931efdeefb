"""Circuit breakers: the scripts on their own (trip within the window, one
probe per half-open period, a lapsed probe, doubled cooldown, forced
states), runs held back by an in-process worker without spending an
attempt, due at the half-open instant, and the CLI."""

from __future__ import annotations

import pytest

from leasequeue import (
    App,
    Breaker,
    BreakerOpen,
    ConfigError,
    Context,
    JobRequest,
    RedisLimiter,
    TransientError,
)
from leasequeue.cli import main
from leasequeue.store.keys import breaker_keys
from leasequeue.store.record import parse_record
from leasequeue.store.specs import BreakerRecordReply
from tests.helpers import eventually, server_ms, worker_running

pytestmark = pytest.mark.anyio


def bound(app: App, **options: object) -> Breaker:
    options.setdefault("failures", 3)
    options.setdefault("window", 10)
    options.setdefault("cooldown", 5)
    options.setdefault("max_cooldown", 12)
    return app.breaker("payments-api", **options)  # type: ignore[arg-type]


async def end_cooldown(app: App, breaker: Breaker) -> None:
    """Move the end of the cooldown to now (server clock): no sleeping."""
    keys = breaker_keys(app.limiter_prefix, breaker.name)
    await app.redis.hset(keys.state, "until_ms", await server_ms(app))


async def events(app: App) -> list[tuple[str, str, str]]:
    keys = breaker_keys(app.limiter_prefix, "x")
    rows = await app.redis.xrange(keys.events)
    return [(f[b"breaker"].decode(), f[b"event"].decode(), f[b"detail"].decode())
            for _, f in rows]


async def test_failures_within_the_window_trip_it_and_it_holds_until_the_cooldown(
        app: App) -> None:
    b = bound(app)
    assert (await b.check("r1")).go
    assert await b.record("r1", "failure") is BreakerRecordReply.NOTED
    assert await b.record("r2", "failure") is BreakerRecordReply.NOTED
    assert await b.record("r2", "failure") is BreakerRecordReply.NOTED  # one per failure id
    assert (await b.state()).failures == 2
    assert await b.record("r3", "failure") is BreakerRecordReply.OPENED
    state = await b.state()
    assert (state.state, state.trips, state.cooldown_ms, state.failures) == ("open", 1, 5000, 0)
    assert state.open_for_ms is not None and 4000 < state.open_for_ms <= 5000
    admission = await b.check("r4")
    assert not admission.go and 4.0 < admission.wait <= 5.0
    # failures reported while it is open change nothing (those runs passed before)
    assert await b.record("r5", "failure") is BreakerRecordReply.NOTED
    assert [e[1] for e in await events(app)] == ["opened"]


async def test_failures_outside_the_window_do_not_trip_it(app: App) -> None:
    b = bound(app)
    await b.record("r1", "failure")
    await b.record("r2", "failure")
    keys = breaker_keys(app.limiter_prefix, b.name)
    old = await server_ms(app) - 11_000  # before the 10 s window
    await app.redis.zadd(keys.failures, {"r1": old, "r2": old}, xx=True)
    assert await b.record("r3", "failure") is BreakerRecordReply.NOTED
    assert (await b.state()).state == "closed"


async def test_half_open_lets_exactly_one_probe_through_and_its_success_closes_it(
        app: App) -> None:
    b = bound(app, failures=1)
    await b.record("r0", "failure")
    await end_cooldown(app, b)
    answers = [await b.check(f"c{i}") for i in range(5)]
    assert [a.probe for a in answers] == [True, False, False, False, False]
    assert [a.go for a in answers] == [True, False, False, False, False]
    # the others wait for the probe's verdict (bounded by its lease and the cooldown)
    assert all(0 < a.wait <= 5.0 for a in answers[1:])
    assert (await b.check("c0")).probe  # asking again: still the probe
    state = await b.state()
    assert (state.state, state.probe) == ("half-open", "c0")
    # an outcome from a run that is not the probe decides nothing
    assert await b.record("c1", "success") is BreakerRecordReply.NOTED
    assert await b.record("c0", "success") is BreakerRecordReply.CLOSED
    assert (await b.state()).state == "closed"
    assert (await b.check("c2")).go
    assert [e[1] for e in await events(app)] == ["opened", "half-open", "closed"]


async def test_a_failed_probe_reopens_with_a_doubled_cooldown_capped(app: App) -> None:
    b = bound(app, failures=1)
    await b.record("r0", "failure")
    cooldowns = []
    for i in range(3):
        await end_cooldown(app, b)
        assert (await b.check(f"p{i}")).probe
        assert await b.record(f"p{i}", "failure") is BreakerRecordReply.REOPENED
        cooldowns.append((await b.state()).cooldown_ms)
    assert cooldowns == [10_000, 12_000, 12_000]  # 5 s doubled, capped at max_cooldown 12 s
    await end_cooldown(app, b)
    assert (await b.check("p3")).probe
    await b.record("p3", "success")
    state = await b.state()
    assert (state.state, state.cooldown_ms, state.trips) == ("closed", 5000, 4)


async def test_a_crashed_probe_lapses_and_the_next_caller_probes(app: App) -> None:
    b = bound(app, failures=1, probe_lease=30)
    await b.record("r0", "failure")
    await end_cooldown(app, b)
    assert (await b.check("crashed")).probe
    assert not (await b.check("next")).go
    keys = breaker_keys(app.limiter_prefix, b.name)
    await app.redis.hset(keys.state, "probe_until", await server_ms(app) - 1)
    assert (await b.check("next")).probe
    # the crashed probe's late verdict is not the current probe's: ignored
    assert await b.record("crashed", "success") is BreakerRecordReply.NOTED
    assert (await b.state()).probe == "next"
    # a probe that gives its turn back unused lets the next caller probe at once
    await b.record("next", "release")
    assert (await b.check("third")).probe


async def test_an_operator_forces_it_open_and_closed(app: App) -> None:
    b = bound(app)
    assert await app.force_breaker("payments-api", "open", who="test")
    assert not await app.force_breaker("payments-api", "open")
    state = await app.breaker_state("payments-api")
    assert (state.state, state.forced) == ("open", True)
    await end_cooldown(app, b)  # forced open: no probe even after the cooldown
    admission = await b.check("c1")
    assert not admission.go and admission.wait == 5.0
    assert await app.force_breaker("payments-api", "closed")
    state = await app.breaker_state("payments-api")
    assert (state.state, state.forced) == ("closed", False)
    assert (await b.check("c2")).go
    assert [e[1:] for e in await events(app)] == [("forced-open", "test"),
                                                  ("forced-closed", "operator")]
    with pytest.raises(ConfigError):
        await app.force_breaker("payments-api", "half")


async def test_settings_that_cannot_work_are_refused(app: App) -> None:
    for bad in ({"failures": 0}, {"window": 0}, {"cooldown": -1}, {"cooldown": 10,
                                                                   "max_cooldown": 5}):
        with pytest.raises(ConfigError):
            Breaker("x", **bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Breaker("no spaces")
    with pytest.raises(ConfigError):
        app.job(breakers=Breaker("x"))(lambda ctx: None)  # type: ignore[call-overload]
    app.breaker("dup")
    with pytest.raises(ConfigError):
        app.add_breaker(Breaker("dup"))
    with pytest.raises(RuntimeError):
        async with Breaker("unbound"):
            pass


async def test_breakers_are_shared_by_services_with_the_same_limiter_prefix(
        real_app: App, prefix: str) -> None:
    other = App(real_app.url, prefix=f"{prefix}other")
    try:
        a = App(real_app.url, prefix=f"{prefix}a", limiter=RedisLimiter(prefix=f"{prefix}:s"))
        b = App(real_app.url, prefix=f"{prefix}b", limiter=RedisLimiter(prefix=f"{prefix}:s"))
        ba = a.breaker("shared", failures=1)
        bb = b.breaker("shared", failures=1)
        await ba.record("x", "failure")
        assert (await bb.state()).state == "open"
        assert [s.name for s in await b.breaker_states()] == ["shared"]
        assert await other.breaker_states() == []  # another limiter prefix: not its breaker
        await a.close()
        await b.close()
    finally:
        await other.close()


# -- runs of jobs that need a breaker -----------------------------------------------


async def test_a_run_held_back_spends_no_attempt_and_is_due_when_it_half_opens(
        app: App) -> None:
    b = bound(app, failures=1, cooldown=30, max_cooldown=60)
    ran: list[str] = []

    @app.job(breakers=[b], max_attempts=1)
    async def charge(ctx: Context) -> None:
        ran.append(ctx.job_id)

    await b.record("earlier", "failure")
    until = int((await app.redis.hget(breaker_keys(app.limiter_prefix, b.name).state,
                                      "until_ms")).decode())
    await app.enqueue("charge", job_id="j1")
    qk = app.keys("default")
    async with worker_running(app):
        await eventually(lambda: app.redis.zscore(qk.scheduled, "j1"), what="j1 held back")
    assert ran == []
    record = parse_record(await app.redis.hget(qk.jobs, "j1"))
    assert (record["state"], record["attempt"], record["infra_fail"],
            record["work_fail"]) == ("scheduled", 0, 0, 0)
    due = await app.redis.zscore(qk.scheduled, "j1")
    assert until <= due <= until + 1000  # the half-open instant (one round trip late at most)
    stats = await app.stats("default")
    assert stats.counters.get("retried", 0) == 0


async def test_infra_failures_of_a_job_trip_its_breaker_and_a_probe_closes_it(
        app: App) -> None:
    b = bound(app, failures=3, cooldown=0.2, max_cooldown=0.4)
    healthy = {"up": False}
    starts: list[str] = []

    @app.job(breakers=[b], max_infra_attempts=100, max_attempts=1,
             infra_backoff=lambda n: 0.01)
    async def charge(ctx: Context) -> None:
        starts.append(ctx.job_id)
        if not healthy["up"]:
            raise TransientError("payments-api is down")

    await app.enqueue_many([JobRequest("charge", job_id=f"j{i}") for i in range(6)])
    async with worker_running(app, concurrency=2):
        await eventually(lambda: _is(b, "open"), what="breaker open")
        assert len(starts) >= 3
        healthy["up"] = True
        await eventually(lambda: _succeeded(app, 6), limit=20, what="all six succeeded")
    kinds = [e[1] for e in await events(app)]
    assert kinds[0] == "opened" and "closed" in kinds
    assert kinds.count("closed") == 1
    for i in range(6):
        record = parse_record(await app.redis.hget(app.keys("default").jobs, f"j{i}"))
        assert (record["state"], record["attempt"]) == ("succeeded", 1)


async def _is(b: Breaker, state: str) -> bool:
    return (await b.state()).state == state


async def _succeeded(app: App, n: int) -> bool:
    return (await app.stats("default")).counters.get("succeeded", 0) >= n


async def test_an_open_breaker_inside_a_handler_puts_the_job_back_with_its_attempt_refunded(
        app: App) -> None:
    b = bound(app, failures=1, cooldown=30, max_cooldown=60)
    calls: list[str] = []

    async def call_api() -> str:
        calls.append("called")
        return "ok"

    @app.job(max_attempts=1)
    async def uses(ctx: Context) -> str:
        return await b.guard(call_api)

    await b.record("earlier", "failure")
    await app.enqueue("uses", job_id="u1")
    qk = app.keys("default")
    async with worker_running(app):
        await eventually(lambda: app.redis.zscore(qk.scheduled, "u1"), what="u1 put back")
    assert calls == []
    record = parse_record(await app.redis.hget(qk.jobs, "u1"))
    assert (record["state"], record["attempt"], record["work_fail"]) == ("scheduled", 0, 0)
    with pytest.raises(BreakerOpen):
        async with b:
            pass


async def test_async_with_counts_infra_failures_and_a_probe_verdict(app: App) -> None:
    b = bound(app, failures=2)
    for _ in range(2):
        with pytest.raises(ConnectionError):
            async with b:
                raise ConnectionError("refused")
    assert (await b.state()).state == "open"
    await end_cooldown(app, b)
    async with b:  # the probe: the work failure inside still means the API answered
        pass
    assert (await b.state()).state == "closed"
    with pytest.raises(ValueError):
        async with b:
            raise ValueError("a bug, not an outage")
    assert (await b.state()).failures == 0


async def test_the_cli_lists_forces_open_and_closes(
        real_app: App, capsys: pytest.CaptureFixture[str]) -> None:
    b = bound(real_app)
    await b.record("r", "failure")
    args = ["--url", real_app.url, "--prefix", real_app.prefix]
    assert await _cli(["breakers", "open", "payments-api", *args]) == 0
    assert "forced open" in capsys.readouterr().out
    assert await _cli(["breakers", "list", *args]) == 0
    out = capsys.readouterr().out
    assert '"name": "payments-api"' in out and '"forced": true' in out
    assert await _cli(["breakers", "close", "payments-api", *args]) == 0
    assert "forced closed" in capsys.readouterr().out
    assert (await b.state()).state == "closed"
    assert await _cli(["breakers", "open", *args]) == 1


async def _cli(argv: list[str]) -> int:
    import anyio

    return await anyio.to_thread.run_sync(main, argv)
