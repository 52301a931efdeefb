"""Sharded queues on one Redis (both backends) and the durable mode (WAIT for
a replica) against a real master and replica."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
import pytest

from leasequeue import App, Context, JobRequest, Worker
from leasequeue.errors import ConfigError, NotDurable
from tests.harness.redis_proc import RedisProcess
from tests.helpers import START_ALL, new_claim_id, ready_ids

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sharded(backend: str, redis_server: RedisProcess,
                  prefix: str) -> AsyncIterator[App]:
    url = redis_server.url if backend == "redis" else f"memory://{prefix}"
    async with App(url, prefix=prefix, queue_shards={"hot": 3}) as app:
        yield app


Other = Callable[[int | None], App]


@pytest.fixture
async def other(sharded: App) -> AsyncIterator[Other]:
    """Another process's App on the same store, configured with that count for
    'hot' (None: not sharded); closed at teardown."""
    made: list[App] = []

    def make(shards: int | None) -> App:
        made.append(App(sharded.url, prefix=sharded.prefix,
                        queue_shards={"hot": shards} if shards is not None else None))
        return made[-1]

    yield make
    for app in made:
        await app.close()


async def test_job_ids_route_to_one_shard_and_dedup_holds(sharded: App) -> None:
    app = sharded
    jobs = await app.enqueue_many([JobRequest("j", job_id=f"id{i}", queue="hot")
                                   for i in range(60)])
    assert all(j.created and j.queue == "hot" for j in jobs)
    # each answer in its request's place, though the shards' calls interleave
    assert [j.id for j in jobs] == [f"id{i}" for i in range(60)]
    again = await app.enqueue_many([JobRequest("j", job_id=f"id{i}", queue="hot")
                                    for i in range(60)])
    assert not any(j.created for j in again)
    assert [j.id for j in again] == [f"id{i}" for i in range(60)]
    sizes = [len(await ready_ids(app, app.keys(f"hot#{k}"))) for k in range(3)]
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
    app = App(f"memory://{prefix}", prefix=prefix, queue_shards={"hot": 2})
    assert app.keys("hot#1").tag == "{" + prefix + ":hot#1}"
    for bad in ("hot#2", "cold#0", "hot#x"):
        with pytest.raises(ConfigError):
            app.keys(bad)
    for bad_count in (0, 1025, True, 2.0):
        with pytest.raises(ConfigError):
            App(f"memory://{prefix}", prefix=prefix, queue_shards={"hot": bad_count})
    # one shard is no sharding: the queue's own tag, the count recorded for a plain queue
    one = App(f"memory://{prefix}", prefix=prefix, queue_shards={"hot": 1})
    assert one.shards.physical("hot") == ["hot"] and one.shards.count("hot") == 1


# -- the shard count recorded in Redis -------------------------------------------


async def recorded(app: App, queue: str = "hot") -> bytes | None:
    value: bytes | None = await app.redis.hget(app.keys(queue).config, "shards")
    return value


async def snapshot(app: App) -> dict[bytes, object]:
    """Every key under the app's prefix with its type and size (proves nothing was written)."""
    out: dict[bytes, object] = {}
    async for key in app.redis.scan_iter(match="{" + app.prefix + ":*"):
        kind = (await app.redis.type(key)).decode()
        out[key] = (kind, await app.redis.hgetall(key) if kind == "hash"
                    else await app.redis.zrange(key, 0, -1) if kind == "zset" else None)
    return out


async def test_first_use_records_the_count_and_others_must_agree(sharded: App,
                                                                 other: Other) -> None:
    assert await recorded(sharded) is None
    await sharded.enqueue("j", queue="hot", job_id="a")
    assert await recorded(sharded) == b"3"
    before = await snapshot(sharded)
    for shards in (2, 4, None):  # None: not sharded, i.e. one shard
        wrong = other(shards)
        with pytest.raises(ConfigError) as caught:
            await wrong.enqueue("j", queue="hot", job_id="b")
        message = str(caught.value)
        assert "'hot'" in message and "3 shard(s)" in message
        assert f"configured with {shards or 1}" in message and "queues reshard" in message
        with pytest.raises(ConfigError):
            await wrong.enqueue_many([JobRequest("j", queue="hot", job_id="c")])
        with pytest.raises(ConfigError):  # a worker refuses to start
            await Worker(wrong, ["hot"]).run()
    assert await snapshot(sharded) == before
    agreeing = other(3)
    assert (await agreeing.enqueue("j", queue="hot", job_id="d")).created


async def test_a_plain_queue_records_one_shard(app: App) -> None:
    await app.enqueue("j", queue="q", job_id="a")
    assert await recorded(app, "q") == b"1"
    async with App(app.url, prefix=app.prefix, queue_shards={"q": 2}) as wrong:
        with pytest.raises(ConfigError, match="'q' is recorded in Redis with 1 shard"):
            await wrong.enqueue("j", queue="q", job_id="b")


async def test_a_worker_boot_records_the_count(sharded: App, other: Other) -> None:
    worker = Worker(sharded, ["hot"], concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(10):
            await worker.ready.wait()
        worker.stop()
    assert await recorded(sharded) == b"3"
    with pytest.raises(ConfigError):
        await other(2).enqueue("j", queue="hot")


@pytest.mark.parametrize("where", ["ready", "scheduled", "leases", "dead"])
async def test_reshard_refuses_a_queue_that_is_not_drained(
        sharded: App, other: Other, where: str) -> None:
    await sharded.verify_queues(["hot"])
    # one job left in the shard a 3 -> 2 reshard would drop
    await sharded.redis.zadd(getattr(sharded.keys("hot#2"), where), {"left": 1})
    before = await snapshot(sharded)
    with pytest.raises(ConfigError) as caught:
        await sharded.reshard("hot", 2)
    what = "leased" if where == "leases" else where
    assert f"{what} 1" in str(caught.value) and "not drained" in str(caught.value)
    assert await snapshot(sharded) == before  # nothing written: still 3
    # the new layout is checked too: 3 -> 1 meets a job in the plain queue
    await sharded.redis.zrem(getattr(sharded.keys("hot#2"), where), "left")
    await sharded.redis.zadd(getattr(other(None).keys("hot"), where), {"x": 1})
    with pytest.raises(ConfigError, match="not drained"):
        await sharded.reshard("hot", 1)
    assert await recorded(sharded) == b"3"


async def test_reshard_a_drained_queue(sharded: App, other: Other) -> None:
    jobs = await sharded.enqueue_many([JobRequest("j", queue="hot", job_id=f"id{i}")
                                       for i in range(12)])
    for job in jobs:  # canceled jobs are kept for retention in their old shards: allowed
        assert await sharded.cancel(job.id, "hot") == "canceled"
    assert await sharded.reshard("hot", 2) == 3
    assert await recorded(sharded) == b"2"
    # every process configured with the old count is refused now, this App included
    with pytest.raises(ConfigError, match="recorded in Redis with 2 shard"):
        await sharded.enqueue("j", queue="hot", job_id="new")
    with pytest.raises(ConfigError):
        await Worker(other(3), ["hot"]).run()
    resharded = other(2)
    assert (await resharded.enqueue("j", queue="hot", job_id="new")).created
    assert (await resharded.stats("hot")).ready == 1
    # back to one shard once drained again
    assert await resharded.cancel("new", "hot") == "canceled"
    assert await resharded.reshard("hot", 1) == 2
    plain = other(None)
    assert (await plain.enqueue("j", queue="hot", job_id="plain")).queue == "hot"
    assert await ready_ids(plain, plain.keys("hot")) == ["plain"]


async def test_reshard_without_a_recorded_count_takes_the_configured_one(sharded: App) -> None:
    assert await sharded.reshard("hot", 3) == 3  # the same layout: only recorded
    assert await recorded(sharded) == b"3"
    with pytest.raises(ConfigError):
        await sharded.reshard("hot", 0)


def test_cli_reshard(redis_server: RedisProcess, prefix: str,
                     capsys: pytest.CaptureFixture[str]) -> None:
    from leasequeue.cli import main

    async def enqueue_then(cancel: bool) -> None:
        async with App(redis_server.url, prefix=prefix, queue_shards={"hot": 3}) as app:
            await app.enqueue("j", queue="hot", job_id="a")
            if cancel:
                await app.cancel("a", "hot")

    command = ["queues", "reshard", "hot", "2", "--url", redis_server.url, "--prefix", prefix]
    anyio.run(enqueue_then, False)
    assert main(command) == 1
    assert "not drained (ready 1 over its 3 shard(s))" in capsys.readouterr().err
    anyio.run(enqueue_then, True)
    assert main(command) == 0
    assert "hot: 3 -> 2 shard(s)" in capsys.readouterr().out
    assert main(command) == 0  # again: nothing to do


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
