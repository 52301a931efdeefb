"""Schedules in one process: the fire arithmetic (interval, cron in a time
zone across DST, misfire), bad input refused with nothing written, the
schedule scripts seeded against the server clock (every outcome), pause /
resume / run now with a worker, and a record edited into nonsense skipped
while the other schedules keep firing."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from leasequeue import App, ConfigError, Context
from leasequeue.schedule_spec import (
    Misfire,
    ScheduleSpec,
    decide,
    jitter_delay,
    make_spec,
    parse_record,
)
from leasequeue.store.keys import schedules_keys
from leasequeue.store.specs import (
    ScheduleDoneReply,
    ScheduleFireReply,
    SchedulePauseReply,
    ScheduleTriggerReply,
    ScheduleUpsertReply,
)
from tests.helpers import eventually, server_ms, worker_running

SECOND = timedelta(seconds=1)


def ms(text: str, tz: str = "UTC") -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp() * 1000)


def every(seconds: float, misfire: str = "skip") -> ScheduleSpec:
    return make_spec("s", "j", every=timedelta(seconds=seconds), queue="q", misfire=misfire)


# -- the arithmetic ---------------------------------------------------------------


def test_an_interval_fires_on_multiples_of_itself() -> None:
    spec = every(60)
    assert spec.next_after(120_000) == 180_000
    assert spec.next_after(120_001) == 180_000
    assert spec.latest_at_or_before(179_999) == 120_000
    assert spec.latest_at_or_before(180_000) == 180_000


def test_cron_in_a_time_zone_follows_dst() -> None:
    spec = make_spec("n", "j", cron="0 2 * * *", tz="Europe/Berlin", queue="q")
    # 2024-03-31 02:00 does not exist in Berlin: cron fires at 03:00 (01:00 UTC)
    assert spec.next_after(ms("2024-03-30T23:30")) == ms("2024-03-31T03:00", "Europe/Berlin")
    # the day after, 02:00 local is 00:00 UTC (summer time)
    assert spec.next_after(ms("2024-03-31T12:00")) == ms("2024-04-01T00:00")
    assert spec.latest_at_or_before(ms("2024-04-01T00:00")) == ms("2024-04-01T00:00")


@pytest.mark.parametrize(("due", "now", "misfire", "fire", "next_"), [
    (10_000, 10_000, "skip", 10_000, 11_000),  # on time
    (10_000, 10_900, "skip", 10_000, 11_000),  # late, within its period: still fires
    (10_000, 15_500, "skip", 0, 16_000),  # 5 missed: none fires
    (10_000, 15_500, "once", 15_000, 16_000),  # 5 missed: one catch-up, the latest
    (10_000, 11_000, "once", 11_000, 12_000),  # two due: once, never both
])
def test_misfire_policy(due: int, now: int, misfire: str, fire: int, next_: int) -> None:
    d = decide(every(1, misfire), due, now)
    assert (d.fire_ms, d.next_ms) == (fire, next_)
    assert d.missed == (now >= due + 1000)


def test_jitter_is_the_same_for_one_fire_and_spread_over_fires() -> None:
    spec = make_spec("s", "j", every=SECOND, queue="q", jitter=30)
    delays = {jitter_delay(spec, k * 1000) for k in range(50)}
    assert all(0 <= d < 30 for d in delays) and len(delays) == 50
    assert jitter_delay(spec, 7000) == jitter_delay(spec, 7000)
    assert jitter_delay(every(1), 7000) == 0.0


def test_a_spec_survives_its_json() -> None:
    spec = make_spec("n", "j", cron="*/5 * * * *", tz="America/New_York", queue="q",
                     payload={"a": [1, "x"]}, misfire="once", jitter=1.5)
    assert ScheduleSpec.from_json("n", spec.to_json()) == spec
    assert spec.misfire is Misfire.ONCE


# -- bad input: ConfigError naming the problem, nothing written ---------------------


BAD: list[tuple[dict[str, Any], str]] = [
    ({"cron": "61 * * * *"}, "does not parse"),
    ({"cron": "every day"}, "does not parse"),
    ({"cron": "0 2 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"every": timedelta(milliseconds=500)}, "under the floor of 1 s"),
    ({"every": 60}, "must be a datetime.timedelta"),
    ({}, "exactly one of cron= and every="),
    ({"cron": "* * * * *", "every": SECOND}, "exactly one of cron= and every="),
    ({"every": SECOND, "misfire": "all"}, "misfire must be one of skip, once"),
    ({"every": SECOND, "jitter": -1}, "jitter must be"),
    ({"every": SECOND, "payload": {"when": datetime.now(UTC)}}, "JSON-serializable"),
    ({"every": SECOND, "payload": [1]}, "payload must be a dict"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("kwargs", "message"), BAD)
async def test_bad_schedules_are_refused_and_nothing_is_written(
        real_app: App, kwargs: dict[str, Any], message: str) -> None:
    @real_app.job
    async def nightly(ctx: Context) -> None: ...

    with pytest.raises(ConfigError, match=message):
        real_app.schedule("bad", "nightly", **kwargs)
    await real_app.schedules.record()
    assert await real_app.redis.exists(*schedules_keys(real_app.prefix).all()) == 0


@pytest.mark.anyio
async def test_an_unknown_job_or_a_second_declaration_is_refused(real_app: App) -> None:
    @real_app.job
    async def known(ctx: Context) -> None: ...

    with pytest.raises(ConfigError, match="names the job 'unknwon', which is not registered"):
        real_app.schedule("s", "unknwon", every=SECOND)
    real_app.schedule("s", "known", every=SECOND)
    with pytest.raises(ConfigError, match="declared twice"):
        real_app.schedule("s", "known", every=SECOND)
    # a job another service handles: name its queue, as for enqueue
    spec = real_app.schedule("other", "elsewhere", every=SECOND, queue="theirs")
    assert spec.queue == "theirs"


# -- the scripts, seeded against the server clock ------------------------------------


@pytest.mark.anyio
async def test_upsert_creates_keeps_and_updates(real_app: App) -> None:
    s, sk = real_app.scripts, schedules_keys(real_app.prefix)
    up = ScheduleUpsertReply
    assert await s.schedule_upsert(sk, "a", '{"x":1}', 5000, True) is up.CREATED
    assert await s.schedule_upsert(sk, "a", '{"x":1}', 9999, False) is up.UNCHANGED
    assert await real_app.redis.hget(sk.state, "a") == b"5000|1|0|0"
    # a changed spec: new spec and next fire, the operator's pause kept
    assert await s.schedule_upsert(sk, "a", '{"x":2}', 7000, False) is up.UPDATED
    assert await real_app.redis.hgetall(sk.specs) == {b"a": b'{"x":2}'}
    assert await real_app.redis.hgetall(sk.state) == {b"a": b"7000|1|0|0"}
    # a state edited into nonsense is rewritten by the next declaration
    await real_app.redis.hset(sk.state, "a", "garbage")
    assert await s.schedule_upsert(sk, "a", '{"x":2}', 8000, False) is up.UPDATED
    assert await real_app.redis.hget(sk.state, "a") == b"8000|0|0|0"


@pytest.mark.anyio
async def test_fire_checks_due_on_the_server_clock_and_takes_each_fire_once(
        real_app: App) -> None:
    s, sk, r = real_app.scripts, schedules_keys(real_app.prefix), real_app.redis
    F = ScheduleFireReply
    now = await server_ms(real_app)
    await r.hset(sk.state, "a", f"{now + 60_000}|0|0|0")
    code, _, _ = await s.schedule_fire(sk, "a", now + 60_000, now + 61_000, now + 60_000, 5000,
                                       "w1")
    assert code is F.NOT_DUE  # whatever the client believes the time is
    await r.hset(sk.state, "a", f"{now - 10}|0|0|0")
    assert (await s.schedule_fire(sk, "a", now - 1000, now + 1000, now - 1000, 5000,
                                  "w1"))[0] is F.MOVED
    assert (await s.schedule_fire(sk, "a", now - 10, now - 5, now - 10, 5000, "w1"))[0] is F.STALE
    code, fire, at = await s.schedule_fire(sk, "a", now - 10, now + 990, now - 10, 5000, "w1")
    assert (code, fire) == (F.FIRED, now - 10)
    assert await r.hget(sk.state, "a") == f"{now + 990}|0|{now - 10}|{at + 5000}|w1".encode()
    # a second replica with the same read: the fire is taken (pending elsewhere)
    assert (await s.schedule_fire(sk, "a", now - 10, now + 990, now - 10, 5000, "w2"))[0] is F.BUSY
    # the taker's own call again (its reply lost): answered as taken, nothing written
    assert (await s.schedule_fire(sk, "a", now - 10, now + 990, now - 10, 5000, "w1"))[:2] == (
        F.FIRED, now - 10)
    assert await r.hget(sk.state, "a") == f"{now + 990}|0|{now - 10}|{at + 5000}|w1".encode()
    assert await s.schedule_done(sk, "a", now - 10) is ScheduleDoneReply.DONE
    assert await s.schedule_done(sk, "a", now - 10) is ScheduleDoneReply.NOT_PENDING
    assert await r.hget(sk.state, "a") == f"{now + 990}|0|0|0".encode()  # (no taker kept)
    # a taker that died before confirming: its fire is handed over after its lease
    await r.hset(sk.state, "a", f"{now + 990}|0|{now - 10}|{now - 1}|w1")
    code, fire, at = await s.schedule_fire(sk, "a", now + 990, now + 1990, 0, 5000, "w2")
    assert (code, fire) == (F.RETRY, now - 10)
    assert await r.hget(sk.state, "a") == f"{now + 990}|0|{now - 10}|{at + 5000}|w2".encode()
    # the take-over's own call again: RETRY again (the fire it took over is
    # never the one it asked for); the dead taker's id is not its
    assert (await s.schedule_fire(sk, "a", now + 990, now + 1990, 0, 5000, "w2"))[:2] == (
        F.RETRY, now - 10)
    assert (await s.schedule_fire(sk, "a", now + 990, now + 1990, 0, 5000, "w1"))[0] is F.BUSY
    # a pending fire recorded with no taker (a state written before takers
    # were): busy for every worker until its lease lapses
    await r.hset(sk.state, "a", f"{now + 990}|0|{now - 10}|{now + 60_000}")
    assert (await s.schedule_fire(sk, "a", now - 10, now + 990, now - 10, 5000, "w1"))[0] is F.BUSY
    # skip: the next fire moves on, nothing pending
    await r.hset(sk.state, "a", f"{now - 5000}|0|0|0")
    code, _, _ = await s.schedule_fire(sk, "a", now - 5000, now + 1000, 0, 5000, "w1")
    assert code is F.SKIPPED
    assert await r.hget(sk.state, "a") == f"{now + 1000}|0|0|0".encode()
    await r.hset(sk.state, "a", f"{now - 5000}|1|0|0")
    assert (await s.schedule_fire(sk, "a", now - 5000, now + 1000, 0, 5000, "w1"))[0] is F.PAUSED
    for malformed in ("5000|x|0", f"{now - 5000}|0|0|0|", f"{now - 5000}|0|0|0|a|b"):
        await r.hset(sk.state, "a", malformed)
        assert (await s.schedule_fire(sk, "a", 5000, now + 1000, 0, 5000,
                                      "w1"))[0] is F.MALFORMED
    assert (await s.schedule_fire(sk, "b", 5000, now + 1000, 0, 5000, "w1"))[0] is F.MISSING


@pytest.mark.anyio
async def test_pause_resume_and_trigger_scripts(real_app: App) -> None:
    s, sk, r = real_app.scripts, schedules_keys(real_app.prefix), real_app.redis
    P = SchedulePauseReply
    await r.hset(sk.specs, "a", "{}")
    await r.hset(sk.state, "a", "1000|0|0|0")
    assert await s.schedule_pause(sk, "a", True) is P.CHANGED
    assert await s.schedule_pause(sk, "a", True) is P.UNCHANGED
    assert await r.hget(sk.state, "a") == b"1000|1|0|0"
    assert await s.schedule_pause(sk, "a", False, 9000) is P.CHANGED
    assert await r.hget(sk.state, "a") == b"9000|0|0|0"
    assert await s.schedule_pause(sk, "b", True) is P.MISSING
    code, at, spec = await s.schedule_trigger(sk, "a")
    assert (code, spec) == (ScheduleTriggerReply.TRIGGERED, "{}")
    assert abs(at - await server_ms(real_app)) < 1000
    assert (await s.schedule_trigger(sk, "b"))[0] is ScheduleTriggerReply.MISSING


# -- with a worker ----------------------------------------------------------------


@pytest.mark.anyio
async def test_pause_resume_and_run_now_with_a_worker(app: App) -> None:
    ran: list[str] = []

    @app.job
    async def tick(ctx: Context, n: int) -> None:
        ran.append(ctx.job_id)

    app.schedule("t", "tick", every=SECOND, payload={"n": 1})
    async with worker_running(app, schedule_poll=0.2):
        await eventually(lambda: len(ran) >= 2, what="two fires")
        assert await app.schedules.pause("t") is True
        assert await app.schedules.pause("t") is False
        _, rec = await app.schedules.get("t")
        assert rec.paused
        paused_at = len(ran)
        job = await app.schedules.trigger("t")  # run now, while paused
        assert job.id.startswith("schedule:t:manual:") and job.created
        await eventually(lambda: job.id in ran, what="the manual run")
        # a paused schedule does not fire: the loop looked at it several times
        _, rec2 = await app.schedules.get("t")
        await eventually(lambda: _looked_past(app, rec2.next_ms), what="two periods to pass")
        assert [j for j in ran[paused_at:] if ":manual:" not in j] == []
        assert await app.schedules.resume("t") is True
        await eventually(lambda: len([j for j in ran[paused_at:] if ":manual:" not in j]) >= 1,
                         what="a fire after resume")
    regular = [int(j.rsplit(":", 1)[1]) for j in ran if ":manual:" not in j]
    assert len(set(regular)) == len(regular) and all(m % 1000 == 0 for m in regular)


async def _looked_past(app: App, next_ms: int | None) -> bool:
    assert next_ms is not None
    return await server_ms(app) > next_ms + 2000


@pytest.mark.anyio
async def test_a_malformed_record_is_reported_and_skipped_while_others_fire(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    ran: list[str] = []

    @app.job
    async def tick(ctx: Context) -> None:
        ran.append(ctx.job_id)

    app.schedule("good", "tick", every=SECOND)
    app.schedule("bad", "tick", every=SECOND)
    caplog.set_level(logging.INFO, logger="leasequeue")
    sk = schedules_keys(app.prefix)
    async with worker_running(app, schedule_poll=0.2):
        await eventually(lambda: any(":bad:" in j for j in ran), what="bad to fire once")
        await app.redis.hset(sk.state, "bad", "soon|0|0|0")  # edited into nonsense
        await app.redis.hset(sk.specs, "other", "{not json")
        edited = len([j for j in ran if ":good:" in j])
        await eventually(lambda: len([j for j in ran if ":good:" in j]) >= edited + 3,
                         what="good to keep firing")
        bad_after = [j for j in ran if ":bad:" in j]
        await eventually(lambda: len([j for j in ran if ":good:" in j]) >= edited + 4,
                         what="one more good fire")
        assert [j for j in ran if ":bad:" in j] == bad_after  # skipped
    reports = [r for r in caplog.records if r.getMessage().startswith("schedule record malformed")]
    # each reported once (not at every look), naming the problem
    assert sorted(r.__dict__["fields"]["schedule"] for r in reports) == ["bad", "other"]
    problems = " ".join(r.__dict__["fields"]["problem"] for r in reports)
    assert "'soon|0|0|0' is not next_ms|paused" in problems and "is not JSON" in problems
    _, records = await app.schedules.list()
    assert {r.name: bool(r.problem) for r in records} == {"bad": True, "good": False,
                                                          "other": True}


def test_parse_record_names_the_problem() -> None:
    rec = parse_record("x", "{}", "1|0|0|0")
    assert rec.spec is None and "not a version 1 schedule" in rec.problem


def test_parse_record_reads_a_pending_fire_s_taker_as_the_scripts_do() -> None:
    """The state's fifth field, written by schedule_fire while a fire is
    pending, names the worker that took it (shown by describe()); a state
    without it (written before takers were recorded) still reads; anything
    else after the four numbers is a malformed state, as Lua's pattern
    (_lib.lua SCHEDULE_TAKEN_PATTERN) finds it (test above)."""
    spec = make_spec("s", "j", every=timedelta(seconds=60), queue="q").to_json()
    rec = parse_record("s", spec, "9000|0|8000|9500|host:12:ab")
    assert (rec.next_ms, rec.pending_ms, rec.pending_until_ms, rec.pending_taker) == (
        9000, 8000, 9500, "host:12:ab")
    assert not rec.problem and rec.describe(0)["pending_fire_taker"] == "host:12:ab"
    old = parse_record("s", spec, "9000|0|8000|9500")
    assert (old.pending_ms, old.pending_taker, old.problem) == (8000, "", "")
    assert "pending_fire_taker" not in old.describe(0)
    for bad in ("9000|0|8000|9500|", "9000|0|8000|9500|a|b", "9000|0|8000|9500|a b"):
        assert "is not next_ms|paused|pending_ms|pending_until_ms[|taker]" in parse_record(
            "s", spec, bad).problem
