"""The audit trail says who and why: every entry of the events stream
carries the job's correlation id and its origin (worker:<id>, reaper,
producer, schedule:<name>, operator:<command>), and can be read per job and
per correlation id (App.audit, `leasequeue audit`)."""

from __future__ import annotations

import json

import anyio
import pytest
import redis as redis_sync

from leasequeue import App, ConfigError, Context, JobRequest, StoreSettings, fixed
from leasequeue.cli import main
from leasequeue.store.record import split_record
from tests.harness.redis_proc import RedisProcess
from tests.helpers import eventually, expire_lease, worker_running
from tests.test_cli import _restore_logging  # noqa: F401 (autouse: main() sets up logging)

pytestmark = pytest.mark.anyio


@pytest.fixture
def url(backend: str, redis_server: RedisProcess, prefix: str) -> str:
    return redis_server.url if backend == "redis" else f"memory://{prefix}"


def events(entries: list) -> list[tuple[str, str, str]]:  # type: ignore[type-arg]
    return [(e.event, e.detail, e.by) for e in entries]


async def test_each_entry_says_who_and_carries_the_correlation_id(url: str, prefix: str) -> None:
    app = App(url, prefix=prefix, settings=StoreSettings(audit_all=True))
    calls = {"n": 0}

    @app.job(max_attempts=2, backoff=fixed(0))
    async def flaky(ctx: Context) -> str:
        calls["n"] += 1
        raise RuntimeError("upstream 502")

    @app.job(queue="other")
    async def fine(ctx: Context) -> str:
        return "ok"

    await app.enqueue("flaky", job_id="j1", correlation_id="order-7")
    await app.enqueue("fine", job_id="j2", correlation_id="order-7")
    await app.enqueue("fine", job_id="j3")  # its correlation id is its own id
    async with worker_running(app, worker_id="w-a", queues=["default", "other"]):
        await eventually(lambda: _ended(app, ["j1", "j2", "j3"]), what="jobs to end")
    await app.replay(["j1"])
    assert await app.cancel("j1") == "canceled"

    trail = await app.audit(job_id="j1")
    assert events(trail) == [
        ("enqueued", "queued", "producer"),
        ("claimed", "w-a", "worker:w-a"),
        ("retried", "work", "worker:w-a"),
        ("claimed", "w-a", "worker:w-a"),
        ("dead", "max-attempts", "worker:w-a"),
        ("replayed", "", "operator:replay"),
        ("canceled", "by request", "operator:cancel"),
    ]
    assert {e.correlation_id for e in trail} == {"order-7"}
    assert {(e.job_id, e.queue) for e in trail} == {("j1", "default")}
    assert [e.at_ms for e in trail] == sorted(e.at_ms for e in trail)

    by_corr = await app.audit(correlation_id="order-7")
    assert {e.job_id for e in by_corr} == {"j1", "j2"}  # across queues
    assert ("succeeded", "", "worker:w-a") in events([e for e in by_corr if e.job_id == "j2"])
    assert {e.correlation_id for e in await app.audit(job_id="j3")} == {"j3"}
    assert len(await app.audit(job_id="j1", count=2)) == 2  # the newest two
    with pytest.raises(ConfigError):
        await app.audit()
    await app.close()


async def test_a_job_s_own_id_as_its_correlation_id_is_stored_as_empty(
        url: str, prefix: str) -> None:
    """The common case (no correlation id, or the job's own) costs no second
    copy of the id in the payload: '' is stored, and the record, the run's
    context and every audit entry (enqueue's one-job and batch paths, and
    emit reading the payload) read it back as the id. Any other id is kept."""
    app = App(url, prefix=prefix, settings=StoreSettings(audit_all=True))
    seen: dict[str, str] = {}

    @app.job
    async def x(ctx: Context) -> None:
        seen[ctx.job_id] = ctx.correlation_id

    await app.enqueue("x", job_id="k1")
    await app.enqueue("x", job_id="k2", correlation_id="k2")
    await app.enqueue_many([JobRequest("x", job_id="k3"),
                            JobRequest("x", job_id="k4", correlation_id="order-4")])
    want = {"k1": "k1", "k2": "k2", "k3": "k3", "k4": "order-4"}
    if url.startswith("redis"):
        raw = redis_sync.Redis.from_url(url)
        for job_id in ("k1", "k2", "k3"):
            stored = split_record(raw.hget(app.keys("default").jobs, job_id))[1]
            assert stored is not None and stored[2:3] == b"\xa0", stored  # msgpack ''
        raw.close()
    for job_id, corr in want.items():
        assert (await app.get_job(job_id)).correlation_id == corr
    assert await app.cancel("k1") == "canceled"  # emit reads the payload in Lua
    async with worker_running(app):
        await eventually(lambda: _ended(app, ["k2", "k3", "k4"]), what="jobs to end")
    assert seen == {k: v for k, v in want.items() if k != "k1"}
    for job_id, corr in want.items():
        trail = await app.audit(job_id=job_id)
        assert len(trail) >= 2 and {e.correlation_id for e in trail} == {corr}, trail
    await app.close()


async def _ended(app: App, ids: list[str]) -> bool:
    states = [(await app.get_job(i)).state for i in ids]
    return all(state in ("succeeded", "dead") for state in states)


@pytest.mark.parametrize("length", [5, 40, 200, 300, 512])
async def test_correlation_ids_of_every_length_are_read_from_the_payload(
        url: str, prefix: str, length: int) -> None:
    """fixstr, str8 and str16 msgpack headers, parsed by hand in Lua."""
    app = App(url, prefix=prefix)
    corr = "c" * length
    await app.enqueue("x", {"blob": "y" * 70_000}, job_id="j", correlation_id=corr)
    assert await app.cancel("j") == "canceled"
    (entry,) = await app.audit(job_id="j")
    assert (entry.event, entry.by, entry.correlation_id) == ("canceled", "operator:cancel", corr)
    await app.close()


async def test_a_reaped_lease_and_a_schedule_fire_name_their_origin(real_app: App) -> None:
    app = App(real_app.url, prefix=real_app.prefix, settings=StoreSettings(audit_all=True))
    await app.enqueue("x", job_id="r1", correlation_id="c-r")
    await app.scripts.claim(app.keys("default"), 1, 30_000, "w-dead", 1, "claim-1")
    await expire_lease(app, "default", "r1")
    await app.scripts.reap(app.keys("default"), 10, 0, 0, {}, (3, 10))
    trail = await app.audit(job_id="r1")
    assert events(trail)[-1] == ("reaped", "w-dead", "reaper")
    assert trail[-1].correlation_id == "c-r"

    from datetime import timedelta

    @app.job
    async def tick(ctx: Context) -> None: ...

    app.schedule("hourly", "tick", every=timedelta(hours=1))
    await app.schedules.record()
    job = await app.schedules.trigger("hourly")
    (entry,) = await app.audit(job_id=job.id)
    assert (entry.event, entry.by) == ("enqueued", "schedule:hourly")
    await app.close()


def test_the_audit_command(redis_server: RedisProcess, prefix: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    async def seed() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            await app.enqueue("x", job_id="a1", correlation_id="req-9")
            await app.enqueue("x", job_id="a2", correlation_id="req-9", queue="q2")
            await app.cancel("a1")
            await app.cancel("a2", queue="q2")

    anyio.run(seed)
    where = ["--url", redis_server.url, "--prefix", prefix]
    assert main(["audit", "--job", "a1", *where]) == 0
    (entry,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert (entry["job_id"], entry["event"], entry["by"], entry["correlation_id"]) == (
        "a1", "canceled", "operator:cancel", "req-9")
    assert main(["audit", "--correlation", "req-9", *where]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sorted((e["job_id"], e["queue"]) for e in got) == [("a1", "default"), ("a2", "q2")]
    assert main(["audit", *where]) == 1
    assert "--job ID or --correlation CID" in capsys.readouterr().err
