"""SyncApp, the producer for code without an event loop: the same scripts,
checks and typed errors as App, on redis-py's synchronous client. Jobs it
enqueues are run by an ordinary async Worker; its wait() wakes on the same
notify list as App.wait."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import anyio
import pytest
import redis as redis_sync

import leasequeue as lq
from leasequeue import App, Context, JobRequest, SyncApp
from leasequeue.store.keys import queues_key
from tests.harness.redis_proc import RedisProcess
from tests.helpers import worker_running

pytestmark = pytest.mark.anyio


def service(url: str, prefix: str) -> App:
    app = App(url, prefix=prefix)

    @app.job(queue="emails")
    async def send(ctx: Context, to: str) -> dict[str, str]:
        return {"sent": to}

    @app.job(queue="emails")
    async def bounce(ctx: Context) -> None:
        raise lq.PermanentError("mailbox gone")

    return app


@pytest.fixture
def url(backend: str, redis_server: RedisProcess, prefix: str) -> str:
    return redis_server.url if backend == "redis" else f"memory://{prefix}"


@pytest.fixture
def sync(url: str, prefix: str) -> Iterator[SyncApp]:
    s = SyncApp(url, prefix=prefix)
    yield s
    s.close()


async def test_a_sync_enqueue_is_run_by_a_worker_and_waited_for(url: str, prefix: str) -> None:
    app = service(url, prefix)
    with SyncApp.from_app(app) as sync:
        job = sync.enqueue("send", {"to": "a@x"}, job_id="mail-1", correlation_id="c1")
        assert (job.id, job.queue, job.created, job.state) == ("mail-1", "emails", True, "queued")
        again = sync.enqueue("send", {"to": "other"}, job_id="mail-1")
        assert (again.created, again.state) == (False, "queued")
        record = sync.get_job("mail-1")
        assert (record.state, record.correlation_id, record.payload) == (
            "queued", "c1", {"to": "a@x"})
        async with worker_running(app, queues=["emails"]):
            result = await anyio.to_thread.run_sync(partial(sync.wait, "mail-1", timeout=10))
            assert result == {"sent": "a@x"}
            sync.enqueue("bounce", job_id="b-1")
            with pytest.raises(lq.JobDead) as dead:
                await anyio.to_thread.run_sync(partial(sync.wait, "b-1", timeout=10))
            assert dead.value.reason == "permanent"
        assert sync.stats("emails").counters["succeeded"] == 1
        # what the async App reads is what the sync one wrote
        assert (await app.get_job("mail-1")).result == {"sent": "a@x"}
    await app.close()


async def test_enqueue_many_checks_every_job_before_writing(sync: SyncApp) -> None:
    jobs = sync.enqueue_many([JobRequest("j", {"i": i}, job_id=f"j{i}") for i in range(1200)])
    assert [j.id for j in jobs] == [f"j{i}" for i in range(1200)] and all(j.created for j in jobs)
    assert sync.stats().ready == 1200
    bad = [JobRequest("j", {"i": 1}, job_id="k1"), JobRequest("j", {"x": object()})]
    with pytest.raises(lq.PayloadNotSerializable):
        sync.enqueue_many(bad)
    with pytest.raises(lq.JobNotFound):
        sync.get_job("k1")
    with pytest.raises(lq.PayloadTooLarge):
        sync.enqueue("j", {"blob": "x" * (600 * 1024)})
    with pytest.raises(lq.ConfigError):
        sync.enqueue("j", priority=40_000)
    with pytest.raises(lq.ConfigError):
        sync.enqueue("bad name")
    assert sync.stats().ready == 1200


async def test_wait_timeout_and_not_found(sync: SyncApp) -> None:
    sync.enqueue("j", job_id="slow")
    with pytest.raises(lq.Timeout):
        sync.wait("slow", timeout=0.2)
    with pytest.raises(lq.JobNotFound):
        sync.wait("nope", timeout=0.2)
    with pytest.raises(lq.ConfigError):
        sync.wait("slow", timeout=-1)


async def test_an_app_with_handlers_refuses_an_unknown_name(url: str, prefix: str) -> None:
    app = service(url, prefix)
    with SyncApp.from_app(app) as sync:
        with pytest.raises(lq.UnknownJob):
            sync.enqueue("typo")
        assert sync.enqueue("other", queue="elsewhere").queue == "elsewhere"
    await app.close()


async def test_a_shard_count_that_disagrees_is_refused(url: str, prefix: str) -> None:
    with SyncApp(url, prefix=prefix, queue_shards={"hot": 3}) as three:
        three.enqueue("j", queue="hot", job_id="a")
    with SyncApp(url, prefix=prefix) as one:
        with pytest.raises(lq.ConfigError, match="recorded in Redis with 3 shard"):
            one.enqueue("j", queue="hot", job_id="b")


async def test_scripts_reload_after_a_script_flush(redis_server: RedisProcess,
                                                   prefix: str) -> None:
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        sync.enqueue("j", job_id="before")
        redis_sync.Redis(port=redis_server.port).script_flush()
        assert sync.enqueue("j", job_id="after").created
        assert sync.stats().ready == 2


async def test_durable_mode_without_a_replica_raises_not_durable(redis_server: RedisProcess,
                                                                 prefix: str) -> None:
    with SyncApp(redis_server.url, prefix=prefix, durable=True, durable_timeout=0.05) as sync:
        with pytest.raises(lq.NotDurable) as exc:
            sync.enqueue("j", job_id="d1")
        assert (exc.value.acked, exc.value.wanted) == (0, 1)
        # the job is on the master: a retry with the same id is deduplicated
        assert sync.get_job("d1").state == "queued"


async def test_durable_mode_reloads_its_script_after_a_script_flush(
        redis_server: RedisProcess, prefix: str) -> None:
    """The durable path's own connection (script, then WAIT on it) loads the
    script again on NOSCRIPT, as the lane does."""
    with SyncApp(redis_server.url, prefix=prefix, durable=True, durable_timeout=0.05) as sync:
        with pytest.raises(lq.NotDurable):
            sync.enqueue("j", job_id="d1")
        redis_sync.Redis(port=redis_server.port).script_flush()
        with pytest.raises(lq.NotDurable) as exc:  # reloaded, run, then its WAIT
            sync.enqueue("j", job_id="d2")
        assert exc.value.acked == 0
        assert sync.get_job("d2").state == "queued"


async def test_an_unreachable_redis_is_a_typed_error() -> None:
    with SyncApp("redis://127.0.0.1:1/0", prefix="x") as sync:
        with pytest.raises(lq.RedisUnavailable, match=r"127\.0\.0\.1:1"):
            sync.enqueue("j")


async def test_stats_of_a_queue_nothing_uses_is_unknown_queue(sync: SyncApp) -> None:
    assert sync.stats().ready == 0  # the default queue: zeros are true
    with pytest.raises(lq.UnknownQueue):
        sync.stats("emials")
    sync.enqueue("j", queue="emails")
    assert sync.stats("emails").ready == 1


async def test_a_payload_its_limit_keys_cannot_render_is_refused_and_nothing_written(
        url: str, prefix: str) -> None:
    app = App(url, prefix=prefix, queue_rates={"mail": lq.Rate(10, key="domain:{domain}")})

    @app.job(queue="api", rate=lq.Rate(100, key="tenant:{tenant}"))
    async def call(ctx: Context, tenant: str) -> None: ...

    @app.job(queue="api", max_concurrent=1, concurrency_key="order:{order_id}")
    async def pack(ctx: Context, order_id: str) -> None: ...

    @app.job(queue="mail")
    async def send(ctx: Context, **payload: str) -> None: ...

    with SyncApp.from_app(app) as sync:
        with pytest.raises(lq.LimitKeyError, match=r"tenant:\{tenant\}"):
            sync.enqueue("call", {"other": "x"}, job_id="c1")
        with pytest.raises(lq.LimitKeyError, match=r"order:\{order_id\}"):
            sync.enqueue("pack", {"order_id": "x" * 200}, job_id="p1")
        with pytest.raises(lq.LimitKeyError, match=r"domain:\{domain\}"):  # the queue's rate
            sync.enqueue("send", {"to": "a@x"}, job_id="s1")
        # a batch is checked whole before anything is written
        with pytest.raises(lq.LimitKeyError, match=r"order:\{order_id\}"):
            sync.enqueue_many([JobRequest("call", {"tenant": "t1"}, job_id="ok1"),
                               JobRequest("pack", {"nope": 1}, job_id="p2")])
        for job_id in ("c1", "p1", "s1", "ok1", "p2"):
            with pytest.raises(lq.JobNotFound):
                sync.get_job(job_id)
        assert sync.redis.smembers(queues_key(prefix)) == set()
        # the same payloads with their fields go in
        assert sync.enqueue("pack", {"order_id": "o1"}).queue == "api"
        assert sync.enqueue_many([JobRequest("send", {"domain": "x.org"})])[0].created
    await app.close()
