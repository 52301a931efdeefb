"""Sharded queues on one Redis (both backends) and the durable mode (WAIT for
a replica) against a real master and replica."""

from __future__ import annotations

import anyio
import pytest

from leasequeue import App, Context, JobRequest, Worker
from leasequeue.errors import NotDurable
from tests.harness.redis_proc import RedisProcess
from tests.helpers import START_ALL, new_claim_id

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sharded(backend: str, redis_server: RedisProcess, prefix: str) -> App:
    url = redis_server.url if backend == "redis" else f"memory://{prefix}"
    return App(url, prefix=prefix, queue_shards={"hot": 3})


async def test_job_ids_route_to_one_shard_and_dedup_holds(sharded: App) -> None:
    app = sharded
    jobs = await app.enqueue_many([JobRequest("j", job_id=f"id{i}", queue="hot")
                                   for i in range(60)])
    assert all(j.created and j.queue == "hot" for j in jobs)
    again = await app.enqueue_many([JobRequest("j", job_id=f"id{i}", queue="hot")
                                    for i in range(60)])
    assert not any(j.created for j in again)
    sizes = [await app.redis.zcard(app.keys(f"hot#{k}").ready) for k in range(3)]
    assert sum(sizes) == 60 and all(n > 0 for n in sizes)  # spread over every shard
    assert (await app.stats("hot")).ready == 60
    rec = await app.get_job("id7", "hot")
    assert rec.queue == "hot" and rec.state == "queued"
    assert await app.cancel("id7", "hot") == "canceled"


async def test_a_worker_drains_every_shard(sharded: App) -> None:
    app = sharded
    seen: list[str] = []

    @app.job(queue="hot")
    async def work(ctx: Context, i: int) -> None:
        assert ctx.queue == "hot"
        seen.append(ctx.job_id)

    await app.enqueue_many([JobRequest("work", {"i": i}, job_id=f"w{i}") for i in range(90)])
    worker = Worker(app, concurrency=8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(20):
            while True:
                if (await app.stats("hot")).counters.get("succeeded", 0) == 90:
                    break
                await anyio.sleep(0.02)
        worker.stop()
    assert sorted(seen) == sorted(f"w{i}" for i in range(90))
    st = await app.stats("hot")
    assert (st.ready, st.leased) == (0, 0)


def test_shard_names_are_checked(prefix: str) -> None:
    from leasequeue.errors import ConfigError

    app = App(f"memory://{prefix}", prefix=prefix, queue_shards={"hot": 2})
    assert app.keys("hot#1").tag == "{" + prefix + ":hot#1}"
    for bad in ("hot#2", "cold#0", "hot#x"):
        with pytest.raises(ConfigError):
            app.keys(bad)
    with pytest.raises(ConfigError):
        App(f"memory://{prefix}", prefix=prefix, queue_shards={"hot": 0})


async def test_durable_mode_waits_for_a_replica(prefix: str) -> None:
    master = RedisProcess()
    master.start()
    replica = RedisProcess(extra=["--replicaof", "127.0.0.1", str(master.port)])
    try:
        app = App(master.url, prefix=prefix, durable=True, durable_timeout=1.0)
        # no replica yet: the write lands on the master but is not confirmed
        with pytest.raises(NotDurable) as caught:
            await app.enqueue("j", queue="default", job_id="a")
        assert (caught.value.acked, caught.value.wanted) == (0, 1)
        replica.start()
        with anyio.fail_after(15):  # until the replica has synced and streams writes
            while True:
                info = await app.redis.info("replication")
                if info.get("slave0", {}).get("state") == "online":
                    break
                await anyio.sleep(0.05)
        job = await app.enqueue("j", queue="default", job_id="b")
        assert job.created
        again = await app.enqueue("j", queue="default", job_id="a")  # the retry is deduped
        assert not again.created
        batch = await app.scripts.claim(app.keys("default"), 2, 10_000, "w",
                                        START_ALL, new_claim_id())
        answers = await app.scripts.ack(app.keys("default"), "succeeded", 60_000,
                                        [(j.id, j.token, b"", "") for j in batch.jobs])
        assert answers == [1, 1]
        await app.close()
    finally:
        replica.cleanup()
        master.cleanup()
