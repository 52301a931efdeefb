"""leasequeue on Redis Cluster (3 masters, 3 replicas) and behind Sentinel.

- the core script tests of tests/test_scripts.py, imported and run against an
  App on the cluster, with the queue on each of the three masters in turn;
- the keys of a queue live in one slot; queues on different masters work in
  one App and one Worker;
- a worker process SIGKILLed mid-job on the cluster loses nothing;
- a sharded queue spreads over masters, dedups by job id, drains fairly;
- a master failover while a worker process runs jobs loses no job, and no
  enqueue acknowledged in durable mode;
- durable mode raises NotDurable when no replica acknowledges;
- a worker keeps going across a Sentinel failover;
- the Redis limiter counts across Apps on the cluster.

Every test is marked ``cluster``; the servers are session fixtures
(tests/conftest_cluster.py)."""

from __future__ import annotations

import gc
import itertools
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
import redis.cluster
import redis.exceptions
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot

from leasequeue import App, ConfigError, Context, JobRequest, RedisLimiter, Worker, fixed
from leasequeue.errors import NotDurable, RedisUnavailable
from leasequeue.limiter import Waiter
from leasequeue.store.keys import QueueKeys, rate_keys
from leasequeue.store.record import text
from leasequeue.store.specs import RateReply
from tests.harness.cluster_proc import (
    RedisCluster,
    prefix_on_master,
    queues_on_distinct_masters,
    tag_slot,
)
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import free_port
from tests.harness.sentinel_proc import SentinelSetup
from tests.helpers import (
    START_ALL,
    eventually,
    forked_mid_step,
    new_claim_id,
    ready_ids,
    used_on_one_loop,
    used_on_two_loops,
    worker_running,
)

# The core script tests, run here against an App on the cluster (the `app`
# fixture below overrides the one of tests/conftest.py for this module).
from tests.test_scripts import (  # noqa: F401
    test_ack_stores_result_and_refuses_stale,
    test_ack_with_zero_retention_deletes_record,
    test_cancel_each_state_and_idempotent,
    test_claim_is_bounded_by_count,
    test_claim_leases_on_server_clock,
    test_delay_goes_to_scheduled_and_promotes_when_due,
    test_enqueue_dedup_returns_existing,
    test_enqueue_then_get_job,
    test_expire_trims_finished_in_bounded_batches,
    test_fail_infra_has_its_own_budget_and_refunds_attempt,
    test_fail_permanent_goes_dead_at_once_and_stale_refused,
    test_fail_work_retries_with_delay_then_dies,
    test_garbage_in_ready_is_skipped_and_counted,
    test_malformed_record_is_a_typed_error_and_buried_on_claim,
    test_noscript_recovery_after_script_flush,
    test_poison_job_dies_lease_expired,
    test_priority_then_exact_fifo,
    test_reap_is_bounded,
    test_reap_requeues_expired_and_is_idempotent,
    test_reap_with_backoff_schedules,
    test_release_refunds_attempt_keeps_place_and_is_idempotent,
    test_renew_fenced_by_token,
    test_replay_gives_fresh_counters_and_purge,
    test_stats_counts_and_oldest_age,
)

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

Q = "default"  # the queue of tests/test_scripts.py and of tests/harness/apps/worker_app.py
_stems = itertools.count()


def fresh_stem(kind: str) -> str:
    """A prefix stem no other test of the session uses."""
    return f"{kind}{next(_stems)}x"


def sync_cluster(cluster: RedisCluster) -> redis.cluster.RedisCluster:
    """A fresh sync cluster client (it learns the current slot map)."""
    node = cluster.any_alive()
    return redis.cluster.RedisCluster(host="127.0.0.1", port=node.port,
                                      socket_connect_timeout=1.0, socket_timeout=5.0)


# -- fixtures -------------------------------------------------------------------


@pytest.fixture(params=[0, 1, 2], ids=["master0", "master1", "master2"])
async def app(request: pytest.FixtureRequest, redis_cluster: RedisCluster) -> AsyncIterator[App]:
    """An App on the cluster whose queue ``default`` lives on master 0, 1 or 2."""
    master = redis_cluster.master_ports()[request.param]
    prefix = prefix_on_master(redis_cluster, master, Q, stem=fresh_stem("cs"))
    a = App(redis_cluster.url, prefix=prefix)
    yield a
    await a.close()


@pytest.fixture
def sync_client(redis_cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    client = sync_cluster(redis_cluster)
    yield client
    client.close()


# -- the cluster itself -----------------------------------------------------------


def test_cluster_fixture_is_three_masters_with_one_replica_each(
        redis_cluster: RedisCluster, sync_client: redis.cluster.RedisCluster) -> None:
    assert redis_cluster.is_ok()
    masters = redis_cluster.master_ports()
    assert len(masters) == 3
    assert all(len(redis_cluster.replicas_of(m)) == 1 for m in masters)
    owners = redis_cluster.slot_masters()
    assert len(owners) == 16384
    for i in range(50):  # keys in many slots, through the cluster client
        sync_client.set(f"fixture:{i}", i)
        assert sync_client.get(f"fixture:{i}") == str(i).encode()


async def test_every_key_of_a_queue_is_in_one_slot(redis_cluster: RedisCluster) -> None:
    prefix = fresh_stem("slot")
    queues = queues_on_distinct_masters(redis_cluster, prefix, 3)
    async with App(redis_cluster.url, prefix=prefix) as a:
        for queue in queues:
            qk = a.keys(queue)
            slot = tag_slot(prefix, queue)
            assert {key_slot(k.encode()) for k in qk.all()} == {slot}
            # the server agrees, and after some traffic every key the queue
            # wrote is in that slot on the master that owns it
            node = redis_cluster.node(redis_cluster.master_of_slot(slot))
            assert {node.command("CLUSTER", "KEYSLOT", k) for k in qk.all()} == {slot}
            await a.enqueue("j", queue=queue, job_id="a")
            await a.enqueue("j", queue=queue, job_id="b", delay=60)
            # over 1,024 bytes: a payload kept in the payloads hash, not in its record
            await a.enqueue("j", {"s": "x" * 2000}, queue=queue, job_id="c", delay=60)
            job = (await a.scripts.claim(qk, 1, 30_000, "w1", START_ALL, new_claim_id())).jobs[0]
            assert await a.scripts.ack(qk, "succeeded", 60_000,
                                       [(job.id, job.token, b"", "")]) == [1]
            in_slot = {k.decode() for k in node.command("CLUSTER", "GETKEYSINSLOT", slot, 1000)}
            ours = {k for k in in_slot if k.startswith(qk.tag)}
            assert {qk.jobs, qk.payloads, qk.done, qk.scheduled, qk.stats} <= ours


async def test_queues_on_different_masters_in_one_app_and_worker(
        redis_cluster: RedisCluster) -> None:
    prefix = fresh_stem("mq")
    queues = queues_on_distinct_masters(redis_cluster, prefix, 3)
    assert len({redis_cluster.master_of_slot(tag_slot(prefix, q)) for q in queues}) == 3
    app_ = App(redis_cluster.url, prefix=prefix)
    ran: list[tuple[str, str]] = []

    def handler_for(queue: str) -> None:
        @app_.job(name=f"job-{queue}", queue=queue)
        async def handler(ctx: Context) -> None:
            ran.append((ctx.queue, ctx.job_id))

    for queue in queues:
        handler_for(queue)
    expected = {(q, f"{q}-{i}") for q in queues for i in range(40)}
    await app_.enqueue_many([JobRequest(f"job-{q}", job_id=job_id)
                             for q, job_id in sorted(expected)])
    async with worker_running(app_, queues=queues, concurrency=8):
        await eventually(lambda: len(ran) >= len(expected), 20, "every job of 3 queues")
    assert set(ran) == expected and len(ran) == len(expected)
    for queue in queues:
        stats = await app_.stats(queue)
        assert (stats.ready, stats.leased, stats.counters["succeeded"]) == (0, 0, 40)
    await app_.close()


# -- boot checks on the cluster -----------------------------------------------------------


async def refuses_to_boot(app: App) -> bool:
    """Whether a Worker on ``app`` stops at its boot checks with ConfigError
    (False: it passed them and was ready to claim)."""
    worker = Worker(app, queues=[Q])
    settled = anyio.Event()
    refused = False

    async def run() -> None:
        nonlocal refused
        try:
            await worker.run()
        except ConfigError:
            refused = True
            settled.set()

    async def booted() -> None:
        await worker.ready.wait()
        settled.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        tg.start_soon(booted)
        with anyio.fail_after(10):
            await settled.wait()
        tg.cancel_scope.cancel()  # it holds nothing yet: no graceful stop needed
    return refused


async def test_worker_refuses_an_evicting_policy_on_any_master(
        redis_cluster: RedisCluster) -> None:
    async with App(redis_cluster.url, prefix=fresh_stem("ev")) as app_:
        refused = {}
        for master in redis_cluster.master_ports():
            node = redis_cluster.node(master)
            node.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            try:
                refused[master] = await refuses_to_boot(app_)
            finally:
                node.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    assert all(refused.values()), f"booted despite allkeys-lru on: {refused}"


# -- a worker process SIGKILLed on the cluster ------------------------------------------


def executions(client: redis.cluster.RedisCluster,
               prefix: str) -> list[tuple[str, str, int, str]]:
    """The start/end rows tests/harness/apps/worker_app.py records for every run."""
    rows = [text(x).split() for x in client.lrange(f"{prefix}:test:executions", 0, -1)]
    return [(kind, job, int(token), worker) for kind, job, token, worker in rows]


async def test_sigkill_mid_job_on_the_cluster_loses_nothing(
        redis_cluster: RedisCluster, sync_client: redis.cluster.RedisCluster,
        tmp_path: Path) -> None:
    master = redis_cluster.master_ports()[1]
    prefix = prefix_on_master(redis_cluster, master, Q, stem=fresh_stem("kill"))
    async with App(redis_cluster.url, prefix=prefix) as producer:
        await producer.enqueue_many([JobRequest("slow", {"seconds": 0.4}, job_id=f"j{i}")
                                     for i in range(32)])
    workers = WorkerProcs(redis_cluster.url, prefix, tmp_path)
    try:
        workers.start("victim", "--concurrency", "4", "--lease", "2")
        await eventually(lambda: any(w == "victim" and k == "start"
                                     for k, _, _, w in executions(sync_client, prefix)),
                         20, "the victim to start a job")
        workers.kill("victim")
        # read after the kill: the victim may start more jobs until it dies
        held = {(job, tok) for k, job, tok, w in executions(sync_client, prefix)
                if w == "victim" and k == "start"}
        workers.start("survivor", "--concurrency", "8", "--lease", "2")
        done = "{" + f"{prefix}:{Q}" + "}:done"
        await eventually(lambda: sync_client.zcard(done) == 32, 40, "all 32 jobs to succeed")
    finally:
        workers.terminate_all()
    rows = executions(sync_client, prefix)
    assert {job for k, job, _, _ in rows if k == "end"} == {f"j{i}" for i in range(32)}
    interrupted = {job for job, tok in held if ("end", job, tok, "victim") not in set(rows)}
    assert interrupted, "the victim was killed while holding jobs"
    started = Counter(job for k, job, _, _ in rows if k == "start")
    for job, count in started.items():
        assert count == (2 if job in interrupted else 1), (job, count)
    for job in interrupted:  # the rerun holds a newer token: the victim is fenced off
        assert min(tok for k, j, tok, w in rows if j == job and w == "survivor") >= 2
    assert sync_client.zcard("{" + f"{prefix}:{Q}" + "}:leases") == 0


# -- a sharded queue --------------------------------------------------------------------


def prefix_with_shards_on_distinct_masters(cluster: RedisCluster, queue: str,
                                           shards: int) -> str:
    owners = cluster.slot_masters()
    stem = fresh_stem("sh")
    for i in range(100_000):
        prefix = f"{stem}{i}"
        if len({owners[tag_slot(prefix, f"{queue}#{s}")] for s in range(shards)}) == shards:
            return prefix
    raise AssertionError(f"no prefix puts {shards} shards of {queue} on distinct masters")


async def test_sharded_queue_spreads_dedups_and_drains_fairly(
        redis_cluster: RedisCluster) -> None:
    prefix = prefix_with_shards_on_distinct_masters(redis_cluster, "hot", 3)
    app_ = App(redis_cluster.url, prefix=prefix, queue_shards={"hot": 3})
    shard_keys = [app_.keys(f"hot#{s}") for s in range(3)]
    assert [qk.tag for qk in shard_keys] == ["{" + f"{prefix}:hot#{s}" + "}" for s in range(3)]
    assert len({redis_cluster.master_of_slot(key_slot(qk.tag.encode()))
                for qk in shard_keys}) == 3
    ran: list[tuple[str, str]] = []

    @app_.job(queue="hot")
    async def heat(ctx: Context) -> None:
        ran.append((ctx.queue, ctx.job_id))
        await anyio.sleep(0.001)

    ids = [f"h{i}" for i in range(300)]
    first = await app_.enqueue_many([JobRequest("heat", job_id=i, queue="hot") for i in ids])
    assert all(j.created for j in first)
    # every id went to exactly one shard, and the shards are all used
    by_shard = [set(await ready_ids(app_, qk)) for qk in shard_keys]
    assert sorted(set().union(*by_shard)) == sorted(ids)
    assert sum(len(s) for s in by_shard) == 300
    assert all(len(s) >= 50 for s in by_shard), [len(s) for s in by_shard]
    # enqueue again, one by one and as a batch: routed to the same shard, nothing new
    for i in ids:
        again = await app_.enqueue("heat", queue="hot", job_id=i)
        assert not again.created and again.state == "queued", i
    assert not any(j.created for j in await app_.enqueue_many(
        [JobRequest("heat", job_id=i, queue="hot") for i in ids]))
    stats = await app_.stats("hot")
    assert (stats.ready, stats.counters["enqueued"]) == (300, 300)
    # the operator calls work on the logical name
    assert (await app_.get_job("h7", "hot")).state == "queued"
    assert await app_.cancel("h7", "hot") == "canceled"

    async with worker_running(app_, queues=["hot"], concurrency=10):
        await eventually(lambda: len(ran) >= 299, 20, "the sharded queue to drain")
    await app_.close()
    assert sorted(j for _, j in ran) == sorted(set(ids) - {"h7"})
    assert {q for q, _ in ran} == {"hot"}  # ctx.queue is the logical name
    # fairness: every shard is served from the start, not one after another
    shard_of = {i: s for s, members_ in enumerate(by_shard) for i in members_}
    early = Counter(shard_of[j] for _, j in ran[:150])
    assert all(early[s] >= 35 for s in range(3)), early  # a fair share is 50
    app2 = App(redis_cluster.url, prefix=prefix, queue_shards={"hot": 3})  # a fresh client
    stats = await app2.stats("hot")
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 0, 0)
    assert stats.counters["succeeded"] == 299 and stats.counters["canceled"] == 1
    for s, qk in enumerate(shard_keys):  # each shard's own jobs completed, in that shard
        done = {text(x) for x in await app2.redis.zrange(qk.done, 0, -1)}
        assert done == by_shard[s]  # the canceled h7 is in its shard's done set too
    await app2.close()


# -- durable mode ---------------------------------------------------------------------


async def test_durable_enqueue_waits_for_a_replica_or_raises_not_durable(
        redis_cluster: RedisCluster) -> None:
    master = redis_cluster.master_ports()[2]
    replica = redis_cluster.replicas_of(master)[0]
    prefix = prefix_on_master(redis_cluster, master, Q, stem=fresh_stem("dur"))
    app_ = App(redis_cluster.url, prefix=prefix, durable=True, durable_timeout=0.3)
    qk = app_.keys(Q)
    # with the replica up: the record is on the replica when enqueue returns
    assert (await app_.enqueue("j", job_id="a")).created
    with redis.Redis(host="127.0.0.1", port=replica) as r:
        r.execute_command("READONLY")
        assert r.hget(qk.jobs, "a") is not None
    # with the replica gone: enqueue writes, waits durable_timeout, then raises
    redis_cluster.node(replica).server.kill()
    try:
        started = time.monotonic()
        with pytest.raises(NotDurable):
            await app_.enqueue("j", job_id="b")
        assert time.monotonic() - started >= 0.25
        assert (await app_.get_job("b")).state == "queued"  # written, only not replicated
        # an ack that no replica confirms is logged, not raised
        warnings: list[logging.LogRecord] = []
        handler = _ListHandler(warnings, logging.WARNING)
        logging.getLogger("leasequeue").addHandler(handler)
        try:
            batch = await app_.scripts.claim(qk, 2, 30_000, "w1", START_ALL, new_claim_id())
            assert {j.id for j in batch.jobs} == {"a", "b"}
            acked = await app_.scripts.ack(qk, "succeeded", 60_000,
                                           [(j.id, j.token, b"", "") for j in batch.jobs])
            assert acked == [1, 1]
        finally:
            logging.getLogger("leasequeue").removeHandler(handler)
        assert warnings, "an ack without a replica's acknowledgement logs a warning"
    finally:
        redis_cluster.restart(replica)
    # the caller's retry with the same id, once a replica is back: no duplicate, no error
    again = await app_.enqueue("j", job_id="b")
    assert not again.created
    await app_.close()


class _ListHandler(logging.Handler):
    def __init__(self, into: list[logging.LogRecord], level: int) -> None:
        super().__init__(level)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


# -- failover ---------------------------------------------------------------------------


class DurableProducer:
    """Enqueues ``slow`` jobs p0, p1, ... one after another until stopped,
    retrying an id until its enqueue is acknowledged (returns without
    NotDurable or any error). Remembers which ids were acknowledged and when."""

    def __init__(self, app: App, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        self.acked: dict[str, float] = {}  # id -> monotonic time of the acknowledgement
        self.refusals: Counter[str] = Counter()  # exception type -> count
        self.stopping = False

    async def run(self) -> None:
        for i in itertools.count():
            job_id = f"p{i}"
            while not self.stopping:
                try:
                    await self.app.enqueue("slow", {"seconds": self.seconds}, job_id=job_id)
                except Exception as exc:  # NotDurable, unreachable, cluster down, ...
                    self.refusals[type(exc).__name__] += 1
                    await anyio.sleep(0.05)
                    continue
                self.acked[job_id] = time.monotonic()
                await anyio.sleep(0.01)
                break
            if self.stopping:
                return


def done_ids(cluster: RedisCluster, done_key: str, ids: list[str]) -> set[str]:
    client = sync_cluster(cluster)
    try:
        scores = client.zmscore(done_key, ids) if ids else []
    except redis.exceptions.RedisError:
        return set()
    finally:
        client.close()
    return {i for i, score in zip(ids, scores, strict=True) if score is not None}


async def test_master_failover_loses_no_durably_acknowledged_job(
        redis_cluster: RedisCluster, tmp_path: Path) -> None:
    """A worker process runs 20 ms jobs; a durable producer enqueues one job
    after another. The master of the queue is SIGKILLed: its replica takes
    over, alone, so durable enqueues are refused (NotDurable) until the old
    master is restarted and rejoins as its replica; then they are
    acknowledged again. Every job acknowledged before, during and after the
    failover succeeds."""
    master = redis_cluster.master_ports()[0]
    stem = fresh_stem("fo")
    prefix = next(p for p in (f"{stem}{i}" for i in range(100_000))
                  if redis_cluster.master_of_slot(tag_slot(p, Q)) == master
                  # the handler's execution log lives elsewhere: no infra failures
                  and redis_cluster.master_of_key(f"{p}:test:executions") != master)
    qk = QueueKeys(prefix, Q)
    producer_app = App(redis_cluster.url, prefix=prefix, durable=True, durable_timeout=1.0)
    before = [f"b{i}" for i in range(200)]  # about a second of work for the worker
    # acknowledged, so the replica has them all
    await producer_app.enqueue_many([JobRequest("slow", {"seconds": 0.02}, job_id=job_id)
                                     for job_id in before])
    producer = DurableProducer(producer_app, 0.02)
    workers = WorkerProcs(redis_cluster.url, prefix, tmp_path)
    killed = False
    try:
        workers.start("w1", "--concurrency", "4", "--lease", "2")
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer.run)
            await eventually(lambda: len(done_ids(redis_cluster, qk.done, before)) >= 20, 20,
                             "the worker to be in the middle of the work")
            killed = True
            new_master = await anyio.to_thread.run_sync(redis_cluster.kill_master, master)
            # the new master has no replica: durable enqueues are refused
            await eventually(lambda: producer.refusals["NotDurable"] > 0, 40,
                             f"NotDurable with no replica left ({producer.refusals})")
            await anyio.to_thread.run_sync(redis_cluster.restart, master)
            killed = False
            rejoined_at = time.monotonic()
            await eventually(lambda: any(t > rejoined_at for t in producer.acked.values()), 40,
                             f"an acknowledged enqueue once a replica is back "
                             f"({producer.refusals})")
            await anyio.sleep(0.5)
            producer.stopping = True
        assert redis_cluster.master_of_slot(tag_slot(prefix, Q)) == new_master
        expected = before + list(producer.acked)

        def missing() -> list[str]:
            return sorted(set(expected) - done_ids(redis_cluster, qk.done, expected))

        try:
            await eventually(lambda: not missing(), 60, "every acknowledged job to succeed")
        except AssertionError:
            client = sync_cluster(redis_cluster)
            lost = [i for i in missing() if not client.hexists(qk.jobs, i)]
            client.close()
            raise AssertionError(f"not succeeded: {missing()}; no record at all (lost): "
                                 f"{lost}; refusals: {dict(producer.refusals)}") from None
        assert workers.exited() == {}, "the worker process rode out the failover"
    finally:
        workers.terminate_all()
        await producer_app.close()
        if killed:
            redis_cluster.restart(master)
    assert len(producer.acked) >= 5, (len(producer.acked), dict(producer.refusals))


# -- Sentinel ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_app_on_the_cluster_used_again_on_a_new_loop_takes_no_connection_of_the_old_one(
        redis_cluster: RedisCluster) -> None:
    """The cluster client's node connections are loop-aware too
    (connection._loop_aware_nodes): on a new loop every call, the scripts'
    included (no lane on a cluster), and the close failed with a bare
    ``RuntimeError: Event loop is closed``."""
    assert used_on_two_loops(redis_cluster.url, fresh_stem("cnl")) == (
        ["default"], "queued", False, True)


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_app_on_sentinel_used_again_on_a_new_loop_takes_no_connection_of_the_old_one(
        redis_sentinel: SentinelSetup) -> None:
    """Sentinel's connections are loop-aware too, the master's and those
    asking the sentinels for it (connection._sentinel_client): the plain
    commands first on the new loop were each handed an idle connection of
    the closed loop, and failed with a bare RuntimeError."""
    assert used_on_two_loops(redis_sentinel.url, fresh_stem("snl")) == (
        ["default"], "queued", False, True)


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sentinel_connection_of_an_old_loop_asks_the_sentinels_again(
        redis_sentinel: SentinelSetup) -> None:
    """Each master connection of the old loop is given an address nothing
    listens on (the master moved between the two loops): on the new loop
    each asks the sentinels for the master again. Sentinel's connect saw
    the old stream and returned at once, redis-py reconnected to the old
    address, and the calls failed (found by a review, 2026-12-07)."""
    import asyncio

    app_ = used_on_one_loop(redis_sentinel.url, fresh_stem("sna"))

    async def again() -> tuple[list[str], str]:
        try:
            queues, job = await asyncio.wait_for(asyncio.gather(
                app_.queues(), app_.get_job("a")), 10)
            return queues, job.state
        finally:
            await app_.close()

    pool = app_.redis.connection_pool
    conns = [*pool._available_connections, *pool._in_use_connections]
    assert conns
    for conn in conns:
        conn.port = free_port()  # (nothing listens there)
    assert asyncio.run(again()) == (["default"], "queued")
    gc.collect()


def test_a_child_forked_mid_step_asks_the_sentinels_on_connections_of_its_own(
        redis_sentinel: SentinelSetup) -> None:
    """A process forks from a task's step, its Sentinel App holding
    connections to the sentinels: the child asks them for the master on
    connections of its own, and the parent's still answer (its next
    question, for a new master connection, within 2 s: a finalizer in the
    child would take the parent's socket out of the epoll set they share,
    and the parent would wait out its timeout)."""
    import asyncio

    app_ = App(redis_sentinel.url, prefix=fresh_stem("sfk"))
    app_.job(lambda ctx: None, name="j")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app_.enqueue("j", job_id="parent-1"))
        pool = app_.redis.connection_pool
        asked = [s.connection_pool for s in pool.sentinel_manager.sentinels]
        assert any(p._available_connections for p in asked)  # the sentinels were asked

        def child() -> str:
            async def main() -> str:
                job = await asyncio.wait_for(app_.enqueue("j", job_id="child-1"), 10)
                stats = await asyncio.wait_for(app_.stats(), 10)
                gc.collect()  # (the parent's, kept from the collector)
                return f"{job.created} {stats.ready}"
            return asyncio.run(main())

        assert forked_mid_step(loop, child).split() == ["True", "2"]

        async def anew() -> int:
            await pool.disconnect()  # the next call connects anew: it asks the sentinels
            return (await app_.stats()).ready

        assert loop.run_until_complete(asyncio.wait_for(anew(), 2)) == 2
        loop.run_until_complete(app_.close())
    finally:
        loop.close()


async def test_worker_keeps_going_across_a_sentinel_failover(
        redis_sentinel: SentinelSetup) -> None:
    app_ = App(redis_sentinel.url, prefix=fresh_stem("sen"))
    ran: set[str] = set()

    @app_.job(backoff=fixed(0))
    async def tick(ctx: Context) -> None:
        await anyio.sleep(0.02)
        ran.add(ctx.job_id)

    before = [f"b{i}" for i in range(200)]  # about a second of work: the failover hits it
    after = [f"a{i}" for i in range(30)]
    await app_.enqueue_many([JobRequest("tick", job_id=i) for i in before])
    async with worker_running(app_, concurrency=4, lease=2.0):
        await eventually(lambda: len(ran) >= 10, 10, "the worker to be running jobs")
        await anyio.to_thread.run_sync(redis_sentinel.wait_replicated)
        old = redis_sentinel.current_master_port()
        new = await anyio.to_thread.run_sync(redis_sentinel.kill_master)
        assert new != old
        for job_id in after:  # the App finds the new master through the sentinel
            await _enqueue_within(app_, "tick", job_id, limit=20)
        await eventually(lambda: ran >= set(before) | set(after), 30,
                         "every job enqueued before and after the failover")
    stats = await app_.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 0, 0)
    await app_.close()


async def _enqueue_within(app: App, name: str, job_id: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            await app.enqueue(name, job_id=job_id)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.1)


# -- the Redis limiter --------------------------------------------------------------------


async def test_redis_limiter_counts_across_apps_on_the_cluster(
        redis_cluster: RedisCluster) -> None:
    shared = fresh_stem("lim")
    a1 = App(redis_cluster.url, prefix=fresh_stem("la"))
    a2 = App(redis_cluster.url, prefix=fresh_stem("lb"))
    l1 = RedisLimiter(prefix=shared)
    l1.bind(a1.redis, a1.url, a1.prefix)  # through the App's cluster client
    l2 = RedisLimiter(redis_cluster.url, prefix=shared)  # its own cluster connection
    l2.bind(a2.redis, a2.url, a2.prefix)
    try:
        first = await l1.acquire("job.sync", 1, "holder-1", False)
        second = await l2.acquire("job.sync", 1, "holder-2", False)
        assert first.taken and not second.taken
        assert await l2.renew("job.sync", ["holder-1", "holder-2"]) == [True, False]
        await l1.release("job.sync", ["holder-1"])
        assert (await l2.acquire("job.sync", 1, "holder-2", False)).taken
        key = "{" + f"{shared}:job.sync" + "}"
        owner = redis_cluster.node(redis_cluster.master_of_key(key))
        assert owner.command("ZRANGE", key, 0, -1) == [b"holder-2"]
        # a keyed limit's waiter, registered with its refusal, is handed back
        # by the release (its keys share the limit's slot)
        assert (await l1.acquire("key.o:1", 1, "h1", False)).taken
        assert (await l2.acquire("key.o:1", 1, "h2", False, Waiter("entry", 30_000))).waiting
        assert await l1.release("key.o:1", ["h1"]) == ["entry"]
    finally:
        # the limiters are bound by hand, not the Apps' own: close them too
        await l1.close()
        await l2.close()
        await a1.close()
        await a2.close()


def test_a_child_forked_mid_step_calls_on_node_connections_of_its_own(
        redis_cluster: RedisCluster) -> None:
    """A process forks (a pre-forking server) from a task's step, its App on
    a cluster holding node connections: the child calls on connections of
    its own, and the parent's stay in step. The child's copy of the loop
    named the task as current, so the parent's connections looked of the
    loop running there, and the two processes read each other's replies."""
    import asyncio

    app_ = App(redis_cluster.url, prefix=fresh_stem("cfk"))
    app_.job(lambda ctx: None, name="j")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app_.enqueue("j", job_id="parent-1"))
        loop.run_until_complete(app_.get_job("parent-1"))

        def child() -> str:
            async def main() -> str:
                job = await asyncio.wait_for(app_.enqueue("j", job_id="child-1"), 10)
                stats = await asyncio.wait_for(app_.stats(), 10)
                await asyncio.wait_for(app_.get_job("child-1"), 10)
                gc.collect()  # (the parent's, kept from the collector)
                return f"{job.created} {stats.ready}"
            return asyncio.run(main())

        assert forked_mid_step(loop, child).split() == ["True", "2"]
        # the parent's connections answer in step
        for i in range(5):
            assert loop.run_until_complete(asyncio.wait_for(app_.stats(), 5)).ready == 2 + i
            assert loop.run_until_complete(asyncio.wait_for(
                app_.enqueue("j", job_id=f"parent-{i + 2}"), 5)).created
        assert loop.run_until_complete(app_.get_job("child-1")).state == "queued"
        loop.run_until_complete(app_.close())
    finally:
        loop.close()


# -- calls that go once --------------------------------------------------------

@pytest.mark.parametrize("mode", ["refund", "try"])
async def test_a_once_only_rate_call_whose_reply_was_lost_is_not_sent_again_on_the_cluster(
        redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A rate refund or try goes once (tests/test_retried_calls.py has why);
    on a cluster no lane sends the scripts, and redis-py's cluster client
    sends a call whose connection failed again, up to its retry count: a
    refund gave its start back twice, a try found its own start spent.
    Here the call's reply is read, then its connection drops: the caller is
    told, and the key counts the call once."""
    second, burst = 1_000_000, 2_000_000  # one start a second, three at once
    a = App(redis_cluster.url, prefix=fresh_stem("rr"))
    try:
        rk = rate_keys(f"{a.prefix}:lim", "api")
        taken = await a.scripts.rate(rk, ["job-1", "job-2"], second, burst, "take")
        assert [code for code, _ in taken.answers] == [1, 1] and taken.tokens == 1
        lost: list[Any] = []
        real_read = AbstractConnection.read_response

        async def read_response(self: AbstractConnection, *args: Any, **kwargs: Any) -> Any:
            reply = await real_read(self, *args, **kwargs)
            if not lost:
                lost.append(reply)
                await self.disconnect()
                raise redis.exceptions.ConnectionError("Connection reset by peer")
            return reply

        monkeypatch.setattr(AbstractConnection, "read_response", read_response)
        with pytest.raises(RedisUnavailable):  # not sent again: the caller is told
            await a.scripts.rate(rk, ["job-1" if mode == "refund" else "job-3"],
                                 second, burst, mode)
        monkeypatch.undo()
        assert lost  # it ran, and its reply was lost
        after = await a.scripts.rate(rk, [], second, burst, "peek")
        # the refund gave one start back (2, not 3); the try took the last
        # one (and the caller was not handed a second run's DENIED)
        assert after.tokens == (2 if mode == "refund" else 0)
        assert RateReply(int(lost[0][0])) is (
            RateReply.REFUNDED if mode == "refund" else RateReply.TAKEN)
    finally:
        await a.close()


async def test_a_once_only_rate_call_loads_its_script_where_it_was_flushed(
        redis_cluster: RedisCluster) -> None:
    """run_once sends a call again only where Redis said it did not run it:
    NOSCRIPT, after the scripts were flushed on every master."""
    a = App(redis_cluster.url, prefix=fresh_stem("rf"))
    try:
        rk = rate_keys(f"{a.prefix}:lim", "api")
        assert (await a.scripts.rate(rk, ["job-1"], 1_000_000, 0, "take")).tokens == 0
        for port in redis_cluster.master_ports():
            redis_cluster.node(port).command("SCRIPT", "FLUSH")
        refunded = await a.scripts.rate(rk, ["job-1"], 1_000_000, 0, "refund")
        assert [code for code, _ in refunded.answers] == [RateReply.REFUNDED]
        assert refunded.tokens == 1
    finally:
        await a.close()
