"""A client given ever new queue names (queue=f"tenant-{id}", say) keeps
what it holds per queue bounded: the keys it built and encoded, the shard
counts it checked, its enqueue lanes, each for at most CACHED_QUEUES
queues (store/keys.py), dropped and built again on use; a worker's claim
keys per (queue, worker) alike. Every call is still answered right, a queue whose
state was dropped is checked again, and a lane with a call in flight is
never dropped (it counts its queue's calls in flight)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest
import redis as redis_sync

from leasequeue import App, SyncApp
from leasequeue.models import NewJob
from leasequeue.store.coalesce import CALLS_IN_FLIGHT, Answer, EnqueueCoalescer, _Lane
from leasequeue.store.keys import CACHED_QUEUES, QueueKeys, queue_keys, queues_key
from tests.harness.redis_proc import RedisProcess

EXTRA = 10  # queues beyond the bound


def _queues() -> list[str]:
    return [f"q{i}" for i in range(CACHED_QUEUES + EXTRA)]


@pytest.mark.anyio
async def test_ever_new_queues_keep_each_cache_by_queue_of_app_within_its_bound(
        real_app: App, redis_server: RedisProcess, prefix: str) -> None:
    """CACHED_QUEUES + 10 queues, one job each, through App.enqueue: the
    queues checked, the keys built, the keys encoded (by queue) and the
    enqueue lanes each hold at most CACHED_QUEUES, every job is stored in
    its own queue, and the first queue, dropped, is checked again (one
    script call more) and its next job stored. The keys encoded are kept
    by queue, each with every script it was called with."""
    app = real_app
    queues = _queues()
    answers = [await app.enqueue("j", {"i": i}, queue=q) for i, q in enumerate(queues)]
    assert [(a.queue, a.created) for a in answers] == [(q, True) for q in queues]
    caches = {"queues checked": app._verified, "keys built": app.shards._keys,
              "keys encoded": app.scripts._key_cache, "lanes": app.coalescer._lanes}
    for cache, entries in caches.items():
        assert 0 < len(entries) <= CACHED_QUEUES, (cache, len(entries))
    assert "q0" not in app._verified and queues[-1] in app._verified
    # kept by queue: the last queue's entry holds both scripts it was called with
    assert set(app.scripts._key_cache[app.keys(queues[-1])]) == {"queue_config", "enqueue_one"}
    first = await app.get_job(answers[0].id, "q0")
    last = await app.get_job(answers[-1].id, queues[-1])
    assert (first.queue, first.payload, last.queue, last.payload) == (
        "q0", {"i": 0}, queues[-1], {"i": len(queues) - 1})
    sync = redis_sync.Redis.from_url(redis_server.url)
    try:
        assert sync.scard(queues_key(prefix)) == len(queues)  # each recorded once
        calls = sync.info("commandstats")["cmdstat_evalsha"]["calls"]
        again = await app.enqueue("j", {"i": 0}, queue="q0")  # checked again, then sent
        assert sync.info("commandstats")["cmdstat_evalsha"]["calls"] == calls + 2
    finally:
        sync.close()
    assert "q0" in app._verified and (await app.stats("q0")).ready == 2
    assert (await app.get_job(again.id, "q0")).payload == {"i": 0}


def test_ever_new_queues_keep_each_cache_by_queue_of_sync_app_within_its_bound(
        redis_server: RedisProcess, prefix: str) -> None:
    """The same through SyncApp.enqueue: the queues checked, the keys built
    and the keys encoded (by queue) each hold at most CACHED_QUEUES, and
    every job is stored in its own queue."""
    queues = _queues()
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        answers = [sync.enqueue("j", {"i": i}, queue=q) for i, q in enumerate(queues)]
        assert [(a.queue, a.created) for a in answers] == [(q, True) for q in queues]
        caches = {"queues checked": sync._verified, "keys built": sync.shards._keys,
                  "keys encoded": sync.scripts._key_cache}
        for cache, entries in caches.items():
            assert 0 < len(entries) <= CACHED_QUEUES, (cache, len(entries))
        again = sync.enqueue("j", {"i": 0}, queue="q0")
        assert (again.queue, again.created) == ("q0", True)
        assert sync.get_job(answers[-1].id, queues[-1]).payload == {"i": len(queues) - 1}
        assert sync.stats("q0").ready == 2


@pytest.mark.anyio
async def test_ever_new_workers_keep_the_claim_keys_within_their_bound(real_app: App) -> None:
    """A process that makes ever new workers (each its own id) on one App:
    the claim keys built per (queue, worker) hold at most CACHED_QUEUES,
    and each claim's key is its worker's."""
    qk = real_app.keys("default")
    for i in range(CACHED_QUEUES + EXTRA):
        _, claim_key = real_app.scripts._claim_args(qk, 1, 1000, f"w{i}", 0, "c")
        assert claim_key == qk.claim(f"w{i}")
    assert 0 < len(real_app.scripts._claim_keys) <= CACHED_QUEUES


class _HeldSend:
    """A coalescer's send that holds every call to ``held`` queues until
    released, answers the others at once (every job created), and keeps
    how many calls each queue has in flight, and the most it had."""

    def __init__(self) -> None:
        self.held: set[str] = set()
        self.release = asyncio.Event()
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    async def __call__(self, qk: QueueKeys, jobs: Sequence[NewJob],
                       ids: Sequence[str] | None) -> list[tuple[bool, str]]:
        self.in_flight[qk.queue] += 1
        self.most[qk.queue] = max(self.most[qk.queue], self.in_flight[qk.queue])
        try:
            if qk.queue in self.held:
                await self.release.wait()
            return [(True, "queued")] * len(jobs)
        finally:
            self.in_flight[qk.queue] -= 1


def _job() -> NewJob:
    return NewJob("", "noop", b"", 0, 0, 1, 1)


async def _turns(n: int = 3) -> None:
    for _ in range(n):  # the end of a turn, then a batch call's task
        await asyncio.sleep(0)


def test_a_sweep_of_lanes_keeps_the_busy_one_and_its_count() -> None:
    """With CACHED_QUEUES lanes, a new queue's lane drops the idle ones; a
    queue with calls in flight keeps its lane, so a caller after the sweep
    parks behind its calls (never a third call in flight beside the two
    its lane counts), and every caller is answered once released."""
    send = _HeldSend()
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    busy = queue_keys("sweep", "busy")
    send.held.add("busy")

    async def run() -> None:
        calls = [asyncio.ensure_future(coalescer.enqueue(busy, _job()))]
        await _turns(1)  # the first, alone, held
        calls += [asyncio.ensure_future(coalescer.enqueue(busy, _job())) for _ in range(3)]
        await _turns()  # a batch call beside it, held too
        lane = coalescer._lanes["busy"]
        assert (lane.calls, send.in_flight["busy"]) == (CALLS_IN_FLIGHT, CALLS_IN_FLIGHT)
        for i in range(CACHED_QUEUES + EXTRA):  # ever new queues, each answered at once
            (job_id, reply) = await coalescer.enqueue(queue_keys("sweep", f"q{i}"), _job())
            assert job_id and reply == (True, "queued")
        assert len(coalescer._lanes) <= CACHED_QUEUES and coalescer._lanes["busy"] is lane
        calls.append(asyncio.ensure_future(coalescer.enqueue(busy, _job())))
        await _turns()
        assert send.most["busy"] <= CALLS_IN_FLIGHT and not any(c.done() for c in calls)
        send.release.set()
        answers = await asyncio.wait_for(asyncio.gather(*calls), 5)
        assert len({job_id for job_id, _ in answers}) == len(calls) == 5
        assert send.most["busy"] <= CALLS_IN_FLIGHT and lane.calls == 0

    asyncio.run(run())


def test_a_lone_call_whose_lane_was_swept_before_it_ran_takes_the_queue_s_lane() -> None:
    """enqueue() found a queue's lane idle and returned the lone call's
    coroutine, run later (gathered as a task); meanwhile a sweep dropped
    that lane and another caller made the queue a new one, a call in
    flight: the late call goes by the queue's lane now (parks behind it),
    so the lane counts every call of its queue in flight."""
    send = _HeldSend()
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    late = queue_keys("swept", "late")

    async def run() -> None:
        await coalescer.enqueue(late, _job())  # its lane made, idle
        pending = coalescer.enqueue(late, _job())  # found idle: the lone call, not run yet
        for i in range(CACHED_QUEUES + EXTRA):
            await coalescer.enqueue(queue_keys("swept", f"q{i}"), _job())
        assert "late" not in coalescer._lanes  # swept
        send.held.add("late")
        first = asyncio.ensure_future(coalescer.enqueue(late, _job()))  # a new lane, held
        await _turns(1)
        later = asyncio.ensure_future(pending)
        await _turns()
        lane = coalescer._lanes["late"]
        assert lane.calls == send.in_flight["late"] == 2  # the held call and the late one's
        send.release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, later), 5)
        assert [reply for _, reply in answers] == [(True, "queued")] * 2 and lane.calls == 0

    asyncio.run(run())


def test_a_sweep_drops_a_lane_left_busy_by_a_closed_loop() -> None:
    """A lane left by an event loop closed mid-call, with two calls in
    flight and two callers parked, counts for nothing (its loop will never
    run it): a sweep drops it, and its queue's next call, on the loop
    running now, is sent and answered. The dropped lane is reset: when the
    old loop's lone call is closed later (as the collector closes it), its
    return counts for nothing and asks the closed loop for no send."""
    send = _HeldSend()
    coalescer = EnqueueCoalescer(send, max_jobs=50)
    stranded_qk = queue_keys("closed", "stranded")
    send.held.add("stranded")
    old_loop = asyncio.new_event_loop()

    async def strand() -> asyncio.Task[Answer]:
        first = asyncio.ensure_future(coalescer.enqueue(stranded_qk, _job()))
        await _turns(1)  # the first, alone, held
        for _ in range(2):
            coalescer.enqueue(stranded_qk, _job())
        await _turns()  # a batch call beside it, held too
        for _ in range(2):
            coalescer.enqueue(stranded_qk, _job())  # parked: two calls in flight
        await _turns()
        return first

    stranded = old_loop.run_until_complete(strand())
    lane = coalescer._lanes["stranded"]
    assert (lane.calls, len(lane.jobs), stranded.done()) == (2, 2, False)
    old_loop.close()
    send.held.clear()

    async def run() -> Answer:
        for i in range(CACHED_QUEUES + EXTRA):
            await coalescer.enqueue(queue_keys("closed", f"q{i}"), _job())
        assert "stranded" not in coalescer._lanes
        return await asyncio.wait_for(coalescer.enqueue(stranded_qk, _job()), 5)

    new_loop = asyncio.new_event_loop()
    try:
        job_id, reply = new_loop.run_until_complete(run())
    finally:
        new_loop.close()
    assert job_id and reply == (True, "queued") and coalescer._lanes["stranded"].calls == 0
    assert (lane.calls, lane.jobs, lane.due) == (0, [], False)  # reset as it was dropped
    for task in (stranded, *(t for t in coalescer._tasks if t.get_loop() is old_loop)):
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        task.get_coro().close()  # raises if its return asks the closed loop to send
    assert (lane.calls, lane.jobs, lane.due) == (0, [], False)


def test_a_sweep_keeps_each_lane_with_work_on_a_live_loop_and_comes_again_at_twice_them(
        ) -> None:
    """The sweep's rule, lane by lane: a call in flight, callers waiting,
    or a send due (each alone: between two calls' returns and the end of
    the loop's turn a lane has callers waiting and a send due, no call)
    keeps a lane on a live loop; an idle lane goes, and a busy one whose
    loop is closed goes too, reset. The next sweep comes at twice the
    lanes kept, so that many busy queues do not make every new queue's
    first call scan them all."""
    coalescer = EnqueueCoalescer(_HeldSend(), max_jobs=50)
    live, closed = asyncio.new_event_loop(), asyncio.new_event_loop()
    closed.close()

    def lane(loop: asyncio.AbstractEventLoop, calls: int = 0, waiting: int = 0,
             due: bool = False) -> _Lane:
        made = _Lane()
        made.loop, made.calls, made.due = loop, calls, due
        made.jobs = [_job() for _ in range(waiting)]
        made.futures = [loop.create_future() for _ in range(waiting)]
        return made

    try:
        busy = {f"b{i}": lane(live, calls=1) for i in range(CACHED_QUEUES)}
        shown = {"calls": lane(live, calls=2), "waiting": lane(live, waiting=3),
                 "due": lane(live, due=True), "idle": lane(live),
                 "closed": lane(closed, calls=2, waiting=2, due=True)}
        coalescer._lanes = {**busy, **shown}
        coalescer._sweep()
        kept = {*busy, "calls", "waiting", "due"}
        assert set(coalescer._lanes) == kept
        assert coalescer._sweep_at == 2 * len(kept)
        dropped = shown["closed"]
        assert (dropped.epoch, dropped.calls, dropped.jobs, dropped.due) == (1, 0, [], False)
    finally:
        live.close()
