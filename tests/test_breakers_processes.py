"""A circuit breaker across worker processes: 50 infrastructure failures on
3 workers open it; no run starts after that but the one probe of each
half-open period; the probe that succeeds closes it; every job then
succeeds on its first attempt (runs held back spend none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasequeue import App, JobRequest
from leasequeue.store.keys import breaker_keys
from leasequeue.store.record import parse_record
from tests.harness.procs import WorkerProcs
from tests.helpers import eventually

pytestmark = pytest.mark.anyio

APP = "tests.harness.apps.breaker_app:app"
JOBS = 300
WORKERS, CONCURRENCY = 3, 4


def ms_of(stream_id: bytes) -> int:
    return int(stream_id.decode().split("-")[0])


async def test_a_breaker_opened_by_50_infra_failures_across_3_workers(
        real_app: App, prefix: str, tmp_path: Path) -> None:
    r = real_app.redis
    down, starts_key = f"{prefix}:test:down", f"{prefix}:test:starts"
    events_key = breaker_keys(real_app.limiter_prefix, "payments-api").events
    await r.set(down, "1")
    await real_app.enqueue_many([JobRequest("charge", job_id=f"c{i}") for i in range(JOBS)])

    async def breaker_events() -> list[tuple[int, str, str]]:
        return [(ms_of(i), f[b"event"].decode(), f[b"detail"].decode())
                for i, f in await r.xrange(events_key)]

    async def reopened(n: int) -> bool:
        return [e for _, e, _ in await breaker_events()].count("reopened") >= n

    with WorkerProcs(real_app.url, prefix, tmp_path) as procs:
        for n in range(WORKERS):
            procs.start(f"w{n}", "--concurrency", str(CONCURRENCY), "--lease", "5",
                        app=APP, env={"LQ_COOLDOWN": "1.0"})
        # three half-open periods whose probe fails (cooldown 1 s, then 2 s, capped)
        await eventually(lambda: reopened(3), limit=60, what="three failed probes")
        await r.delete(down)
        await eventually(lambda: _succeeded(real_app, JOBS), limit=90, what="every job done")
    events = await breaker_events()
    kinds = [e for _, e, _ in events]
    # opened once, then each half-open period ends in exactly one verdict
    assert kinds[0] == "opened" and kinds[-1] == "closed" and kinds.count("closed") == 1
    periods = kinds[1:]
    assert periods == ["half-open", "reopened"] * (len(periods) // 2 - 1) + [
        "half-open", "closed"], kinds
    opened_ms, closed_ms = events[0][0], events[-1][0]
    probes = {detail.split(" ")[0] for _, e, detail in events if e == "half-open"}

    starts = []
    for raw in await r.lrange(starts_key, 0, -1):
        job_id, token, worker, us = raw.decode().split(" ")
        starts.append((int(us) // 1000, f"{job_id}:{token}@{worker}"))
    before = [h for at, h in starts if at < opened_ms]
    assert len(before) >= 50  # 50 failures (plus runs that succeeded? none: it was down)
    # before the close: a run admitted once the probe closed it may start in
    # the very millisecond of the closed event (two CI runs failed on that)
    during = [(at, h) for at, h in starts if opened_ms <= at < closed_ms]
    late = [(at, h) for at, h in during if h not in probes]
    # runs that passed the breaker before it opened may record their start just
    # after: at most every executor's one run, soon after the opening. Soon:
    # the start is recorded in the handler, a round trip (the start mark) after
    # the admission, and on a loaded CI machine that took over 1 s once. The
    # count is the guard (a breaker that admitted runs while open would start
    # far more); the time only says they come soon
    assert len(late) <= WORKERS * CONCURRENCY, late
    assert all(at - opened_ms < 3000 for at, _ in late), (late, opened_ms, closed_ms)
    # every other start while it was not closed is the one probe of its period
    assert sorted(h for _, h in during if h in probes) == sorted(probes)
    assert len(probes) == kinds.count("half-open")
    print(f"\nbreaker: {len(before)} failures before it opened, {len(late)} runs admitted "
          f"before it opened started after, {len(probes)} probes over "
          f"{(closed_ms - opened_ms) / 1000:.1f}s open")

    # held back runs spent no attempt: every job succeeded on its first attempt
    qk = real_app.keys("default")
    raws = await r.hmget(qk.jobs, [f"c{i}" for i in range(JOBS)])
    records = [parse_record(raw) for raw in raws]
    assert {(rec["state"], rec["attempt"]) for rec in records} == {("succeeded", 1)}
    held = [f for _, f in await r.xrange(qk.events)
            if f[b"event"] == b"released" and f[b"detail"] == b"breaker open"]
    assert held, "no run was held back"


async def _succeeded(app: App, n: int) -> bool:
    return (await app.stats("default")).counters.get("succeeded", 0) >= n
