"""Group commit of concurrent enqueues (App.enqueue).

Many tasks of one process calling ``app.enqueue`` at once (a web service
under load) would each send their own enqueue script call. Per physical
queue, this sends them together instead, with up to two calls in flight:

- a call that finds its queue idle (no enqueue call of this App in flight
  for it, none waiting) is sent at once, alone, by its own task: no timer,
  no added latency, the same single script call as before;
- calls that arrive while one is in flight wait for the end of the event
  loop's turn, and go together as ONE script call (lua/enqueue.lua takes a
  batch) beside the one in flight; calls that arrive while two are in
  flight wait for one of them to return, and go together at the end of
  that turn, after the callers it answered have run (those that enqueue
  again join them). A call takes at most ``max_jobs`` jobs, about
  ``max_bytes`` of payloads and half of the queue's callers (those in
  flight and those waiting, rounded up); the rest go in the next.

Under a steady load the callers split in two halves: one half's call is in
Redis (and on its way back) while the client runs the other half's
callers, which make their next jobs; then the two swap. With one call in
flight at a time, the next could leave only once the last reply was read,
so each round waited out a whole round trip whenever that took longer than
the client's turn (100 tasks on the Intel Xeon host: the client busy
90-96% of the run, a call in flight 88-93%).

The jobs of App.enqueue's common call (a name and a payload, nothing else;
no enqueue hook, and a queue of one shard whose jobs need no limit keys)
come with no id (Producer.one's ``id_at_send``): a batch's ids are drawn
here, in one os.urandom read, as the batch is sent (ids_at_send), and each
caller gets its job's id with its reply; a lone call's job gets its id
here too, one read. One read per job was 0.31 us of a job's 3.4-4.3 us of
client CPU there. On the Intel Xeon host the ids alone left the rate where
it was (fewer us a job only lengthened the client's wait for the round
trip); the second call in flight alone moved uvloop's (1.03x unpinned,
1.10x pinned) and not asyncio's (1.00x, 0.97x), whose client CPU a job its
bookkeeping raised; together 1.06-1.07x on asyncio's loop and 1.13-1.14x
on uvloop's (paired geometric means; the commit against the one before,
1.07-1.08x and 1.10-1.17x). One enqueue at a time (the lone call) ran
2-5% slower in the same hour, where an in-process A/B of its id puts
0.3-0.5 us a call on it (benchmarks/results/coalesce_ids_at_send.txt).

A batch's callers are answered in one handle of the loop (answer_all):
each caller's task's wake-up is taken off its future and run there, where
asyncio's own loop would schedule each through its Python call_soon and a
Handle (a quarter of a call's instructions from 100 tasks).

Each caller gets its own reply (created, state) and its job's id: the
script answers per job in order, and a job id repeated within a batch is
"existed" for the later caller, as two calls one after the other would
answer. Two calls in flight may run in Redis in either order (each on a
connection of its own): their callers are concurrent, each waiting for
its own reply, and a caller's next job leaves only once its last one was
answered, so each caller's jobs keep its order. A job-level problem (a
bad payload, an unknown job, a bad option) is raised by the caller's own
checks before its job joins a batch, so it never reaches the others. A
failed call (Redis unreachable, NotDurable, OOM...) raises its typed error
in every caller of that batch: the script runs whole or not at all, so a
batch is never half-written.

Cancellation: a caller cancelled while it waits is taken out (its job is
never sent). A caller cancelled once its batch was sent sees the
cancellation, and its job may exist (as for a single enqueue cancelled
mid-call); the others of the batch still get their replies, as the call is
sent by a task of its own, which no caller's cancellation stops.

Works on the running asyncio loop (redis-py's asyncio client needs one).
A caller parks only on its lane's loop, and a lone call takes the lane's
loop when it is the running one; knowing that is on the hot path, so both
ask the lane's loop for its current task (loops.task_of: a task of that
loop stepped now is this caller's, as one loop runs in a thread at a
time), not for the running loop: on Python 3.11
``asyncio.get_running_loop()`` makes a getpid() system call (its check
for a fork) on each call, one per job here (50,110 of them in 50,000
enqueues from 100 tasks, by ``strace -c``), about 0.3 us each on the AMD
EPYC host. A fork is told apart by a count of forks instead (_FORKS,
bumped in the child): a lane's loop set before a fork is not trusted
after it, and the running loop is asked the long way."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from operator import itemgetter
from typing import Any

from ..ids import new_job_id, new_job_ids
from ..loops import task_of
from ..models import NewJob
from .keys import CACHED_QUEUES, QueueKeys

Reply = tuple[bool, str]  # the script's answer for one job: (created, state)
Answer = tuple[str, Reply]  # what a caller gets: its job's id and the reply
# (queue, jobs, their ids drawn at the send or None: each job's own) -> replies
Send = Callable[[QueueKeys, Sequence[NewJob], Sequence[str] | None], Awaitable[list[Reply]]]

MAX_BATCH_BYTES = 1 << 20  # payload bytes per call, beyond the first job
CALLS_IN_FLIGHT = 2  # per queue: one in Redis while the client runs the other's callers


class _Lane:
    """One physical queue: its calls in flight (how many, and how many jobs
    they carry), who waits for the next (their jobs and their callers'
    futures, side by side, in arrival order), whether a call is due at
    the end of the loop's turn, and its epoch: bumped when a lane left busy
    by a closed event loop is reset, so that the calls of the old loop,
    ending later (a coroutine closed by the collector runs its finally),
    do not count themselves out of the new loop's."""

    __slots__ = ("calls", "due", "epoch", "forks", "future", "futures", "jobs", "loop", "sent")

    def __init__(self) -> None:
        self.epoch = 0
        self.calls = 0
        self.sent = 0  # jobs in the calls in flight
        self.due = False  # _send_due is in the loop's queue
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: Callable[[], asyncio.Future[Answer]] = _no_loop  # loop's create_future
        self.forks = 0  # _FORKS[0] when loop was set: a child's copy is not its loop
        self.jobs: list[NewJob] = []
        self.futures: list[asyncio.Future[Answer]] = []


_DONE = asyncio.Future.done
_new = tuple.__new__  # a named tuple made without its Python-level __new__
_ID, _PAYLOAD = itemgetter(0), itemgetter(2)  # NewJob.id, .payload (no Python frame)
_BASE_CREATE_FUTURE = asyncio.BaseEventLoop.create_future
_FUTURE = asyncio.Future  # (the C class: its _callbacks lists (callback, context) pairs)
_FORKS = [0]  # forks of this process since the import: bumped in each child


def future_maker(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.Future[Any]]:
    """``loop.create_future``, the way that costs least a call: on asyncio's
    own loops (whose create_future is BaseEventLoop's, a Python method
    around ``Future(loop=self)``) a C partial of that, with no Python frame
    (one a job under load: each parked caller's); any other
    loop's own (uvloop's is C already, a loop of its own may give its own
    kind of future)."""
    if type(loop).create_future is _BASE_CREATE_FUTURE:
        return partial(asyncio.Future, loop=loop)
    return loop.create_future


def _no_loop() -> asyncio.Future[Any]:
    raise RuntimeError("a lane parked a caller before its loop was set")


def _forked() -> None:
    _FORKS[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def ids_at_send(batch: Sequence[NewJob]) -> list[str] | None:
    """The ids of a batch about to be sent, where some of its jobs have
    none yet (App.enqueue's common call: Producer.one(id_at_send=True)):
    those drawn here, in one os.urandom read for the batch, the others the
    jobs' own. None when every job has its own."""
    if all(map(_ID, batch)):
        return None
    fresh = new_job_ids(len(batch))
    if any(map(_ID, batch)):  # a batch of both kinds (a job_id given, a hook...)
        return [job.id or new for job, new in zip(batch, fresh, strict=True)]
    return fresh


class EnqueueCoalescer:
    """Sends the enqueues of one App, per physical queue: alone when the
    queue is idle, together when they arrive during a call in flight."""

    def __init__(self, send: Send, max_jobs: int, max_bytes: int = MAX_BATCH_BYTES) -> None:
        self._send = send
        self.max_jobs = max_jobs
        self.max_bytes = max_bytes
        # by physical queue name (one App, one prefix): a str caches its hash,
        # where the frozen QueueKeys dataclass hashes its fields each lookup
        self._lanes: dict[str, _Lane] = {}
        self._sweep_at = CACHED_QUEUES  # lanes at which a new queue's drops the idle ones
        self._tasks: set[asyncio.Task[None]] = set()  # batch calls in flight

    def enqueue(self, qk: QueueKeys, job: NewJob) -> Awaitable[Answer]:
        """What to await, at once, for ``job``'s id and the script's reply
        for it in queue ``qk`` (a job with no id, ``""``, gets one as it is
        sent: ids_at_send): while a call is in flight for the queue (or callers
        wait for one), the caller's own future, parked in the lane (a plain
        function, so that a waiting caller, the common one under load,
        makes no coroutine of its own); else the lone call (_alone)."""
        lane = self._lanes.get(qk.queue)
        if lane is not None and (lane.calls or lane.jobs):
            loop = lane.loop
            # the lane's loop is the one running here when it is stepping a
            # task now (this caller's: one loop runs in a thread at a time),
            # in the process that set it (a forked child's copy of a loop
            # mid-step is not running); else _alone asks the running loop
            if (loop is not None and lane.forks == _FORKS[0]
                    and task_of(loop) is not None):
                # cancelled while awaited: the future is cancelled too; _take
                # skips it if its job was not sent yet, a batch in flight leaves it.
                # _park's lines, inline: a Python call less a parked job (1.5%
                # of the instructions of App.enqueue's call from 100 tasks)
                future = lane.future()
                lane.jobs.append(job)
                lane.futures.append(future)
                if not lane.due and lane.calls < CALLS_IN_FLIGHT:
                    lane.due = True
                    loop.call_soon(self._send_due, qk, lane)
                return future
        return self._alone(qk, job, lane)

    def _park(self, qk: QueueKeys, lane: _Lane, loop: asyncio.AbstractEventLoop,
              job: NewJob) -> asyncio.Future[Answer]:
        """The caller's future, its job waiting for the next call: sent at
        the end of this turn of the loop when a call may go now."""
        future = lane.future()
        lane.jobs.append(job)
        lane.futures.append(future)
        if not lane.due and lane.calls < CALLS_IN_FLIGHT:
            lane.due = True
            loop.call_soon(self._send_due, qk, lane)
        return future

    async def _alone(self, qk: QueueKeys, job: NewJob, lane: _Lane | None) -> Answer:
        """The reply of a job whose queue was idle when it came: sent at
        once, alone, from the caller's task (or parked after all, if another
        caller's call started in between). ``lane``: the queue's, as
        enqueue() found it (None: the queue's first call)."""
        lanes = self._lanes
        if lane is None or lanes.get(qk.queue) is not lane:
            # the queue's first call, or its lane swept since enqueue() found
            # it (this coroutine was not run at once): another first call may
            # have made one meanwhile, never two lanes
            lane = lanes.get(qk.queue) or self._new_lane(qk.queue)
        loop = lane.loop
        if loop is None or lane.forks != _FORKS[0] or task_of(loop) is None:
            loop = asyncio.get_running_loop()  # (the lane's is not running here)
        if (lane.calls or lane.jobs or lane.due) and lane.loop is not loop:
            old = lane.loop
            if old is not None and lane.forks == _FORKS[0] and not old.is_closed():
                # busy on a loop that lives, stopped while this one runs in
                # its thread (run_until_complete returned with calls in
                # flight): its callers are answered when it runs again, so
                # the lane stays its; this call goes alone, beside it
                return await self._beside(qk, job)
            _reset(lane)  # left busy by an event loop that is gone (closed mid-call)
        if lane.calls or lane.jobs:  # (on this loop)
            lane.forks = _FORKS[0]
            return await self._park(qk, lane, loop, job)
        # idle: send at once, alone, from this task (its id drawn before the
        # lane is taken: a failed read fails this caller alone)
        job = _with_id(job)
        if lane.loop is not loop:
            lane.loop, lane.future = loop, future_maker(loop)
        lane.calls, lane.sent, lane.forks = 1, 1, _FORKS[0]
        epoch = lane.epoch
        try:
            (reply,) = await self._send(qk, (job,), None)
        finally:
            self._returned(qk, lane, 1, epoch)
        return job.id, reply

    async def _beside(self, qk: QueueKeys, job: NewJob) -> Answer:
        """_alone's call while the queue's lane is busy on another loop that
        lives: sent alone, in no lane's count (found by a review,
        2026-12-07: the lane was reset, and the other loop's parked callers,
        dropped unanswered, waited for ever once it ran again). A loop left
        so for good, never closed, leaves its queue's calls from other loops
        each sent alone, uncoalesced, until it is closed (then the next
        call resets the lane): slower, never wrong."""
        job = _with_id(job)
        replies = await self._send(qk, (job,), None)
        return job.id, replies[0]

    def _new_lane(self, queue: str) -> _Lane:
        if len(self._lanes) >= self._sweep_at:  # ever new queues
            self._sweep()
        lane = self._lanes[queue] = _Lane()
        return lane

    def _sweep(self) -> None:
        """A new queue's lane, with CACHED_QUEUES lanes or more (an App given
        ever new queues): the idle lanes are dropped, each made again on its
        queue's next call. A lane with a call in flight, callers waiting or
        a send due stays (its count keeps CALLS_IN_FLIGHT), unless its loop
        is closed: that one goes reset (_reset), as _alone would reset it on
        its queue's next call. The next sweep is at twice the lanes that
        stayed, so many busy queues never make every new queue scan them all."""
        lanes = self._lanes
        for name in [name for name, lane in lanes.items()
                     if not (lane.calls or lane.jobs or lane.due)
                     or (lane.loop is not None and lane.loop.is_closed())]:
            _reset(lanes.pop(name))  # (a closed loop's calls, closed later, count for nothing)
        self._sweep_at = max(CACHED_QUEUES, 2 * len(lanes))

    def _returned(self, qk: QueueKeys, lane: _Lane, jobs: int, epoch: int) -> None:
        """A call of ``jobs`` jobs returned (its callers answered): callers
        waiting go at the end of this turn, with those it answered who come
        back in it. A call of an epoch gone (the lane was reset since) counts
        for nothing."""
        if epoch != lane.epoch:
            return
        lane.calls -= 1
        lane.sent -= jobs
        if lane.jobs and not lane.due and lane.loop is not None:
            lane.due = True
            lane.loop.call_soon(self._send_due, qk, lane)

    def _send_due(self, qk: QueueKeys, lane: _Lane) -> None:
        """The end of the turn in which callers parked: their calls go, each
        by a task of its own (no caller's cancellation can stop it), while
        fewer than CALLS_IN_FLIGHT are in flight."""
        lane.due = False
        loop = lane.loop
        while lane.jobs and lane.calls < CALLS_IN_FLIGHT and loop is not None:
            jobs, futures = self._take(lane)
            if not jobs:
                return
            lane.calls += 1
            lane.sent += len(jobs)
            task = loop.create_task(self._flush(qk, lane, jobs, futures, lane.epoch, loop))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self, lane: _Lane) -> tuple[list[NewJob], list[asyncio.Future[Answer]]]:
        """The waiting jobs (skipping cancelled callers) of the next call,
        and their callers' futures.

        A call takes at most half of the queue's callers (those in flight,
        who come back once answered, and those waiting), so that under a
        steady load two halves alternate, one in Redis while the client runs
        the other. Beyond its first job, a call takes jobs while their
        payloads add up to ``max_bytes`` at most."""
        jobs, futures = lane.jobs, lane.futures
        limit = min(self.max_jobs, (lane.sent + len(jobs) + 1) // 2)
        n = min(limit, len(jobs))
        # the common call: the first n callers, none cancelled, within the
        # bytes; taken by slices and C loops, not a Python turn per job
        taken = futures[:n]
        if not any(map(_DONE, taken)):
            batch = jobs[:n]
            if n == 1 or sum(map(len, map(_PAYLOAD, batch))) <= self.max_bytes:
                del jobs[:n], futures[:n]
                return batch, taken
        return self._take_one_by_one(lane, limit)

    def _take_one_by_one(self, lane: _Lane,
                         limit: int) -> tuple[list[NewJob], list[asyncio.Future[Answer]]]:
        """_take's call when a caller was cancelled or the bytes cut it short."""
        jobs, futures = lane.jobs, lane.futures
        batch: list[NewJob] = []
        taken: list[asyncio.Future[Answer]] = []
        size = 0
        i = 0
        while i < len(jobs) and len(batch) < limit:
            job, future = jobs[i], futures[i]
            if future.done():  # its caller was cancelled before it was sent
                i += 1
                continue
            if batch and size + len(job.payload) > self.max_bytes:
                break
            batch.append(job)
            taken.append(future)
            size += len(job.payload)
            i += 1
        del jobs[:i], futures[:i]
        return batch, taken

    async def _flush(self, qk: QueueKeys, lane: _Lane, batch: list[NewJob],
                     futures: list[asyncio.Future[Answer]], epoch: int,
                     loop: asyncio.AbstractEventLoop) -> None:
        """One batch call on ``loop`` (its callers'): every caller of the
        batch gets its job's id and reply (answer_all, at the loop's next
        turn), or the call's error (a failed id draw too)."""
        ids: list[str] | None = None
        try:
            ids = ids_at_send(batch)
            replies = await self._send(qk, batch, ids)
            if len(replies) != len(batch):
                raise RuntimeError(f"enqueue answered {len(replies)} replies for "
                                   f"{len(batch)} jobs")
        except asyncio.CancelledError:
            _cancelled(lane, len(batch), futures, epoch)
            raise
        except BaseException as exc:  # every caller of the batch gets it
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                _count_out(lane, len(batch), epoch)  # KeyboardInterrupt & co: the waiting stay
                raise
        else:
            answers = list(zip(map(_ID, batch) if ids is None else ids, replies, strict=True))
            if loop.get_debug():  # (asyncio's own way: a handle a callback, each timed)
                for future, answer in zip(futures, answers, strict=True):
                    if not future.done():  # (done: its caller was cancelled after it was sent)
                        future.set_result(answer)
            else:
                loop.call_soon(answer_all, loop, futures, answers)
        self._returned(qk, lane, len(batch), epoch)


def answer_all(loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future[Answer]],
               answers: list[Answer]) -> None:
    """A batch's answers given to its callers' futures, in one handle of
    the loop: a future awaited by one callback (its caller's task, waiting)
    is resolved with that callback taken off it, and the callback is run
    here, in its own context, as the loop's handle of it would run it
    (asyncio's Handle._run: an exception reported to the loop's handler,
    SystemExit and KeyboardInterrupt raised, the futures left answered the
    usual way first). Any other future (more callbacks than one, or none:
    nobody awaits it yet; a future of a kind other than asyncio's) is
    resolved the usual way, its callbacks scheduled by the loop; a future
    done already (its caller cancelled after its batch was sent) is left.

    Why: on asyncio's own event loop a resolved future schedules each of
    its callbacks through BaseEventLoop.call_soon, Python code (call_soon,
    _call_soon, Handle.__init__, get_debug, then Handle._run): about 6,000
    of the 24,070 instructions of one App.enqueue call from 100 tasks
    (callgrind, 2026-12-08); one handle a batch leaves 17,892 (0.743x); on
    uvloop, whose call_soon is C, level (benchmarks/results/answer_all.txt).
    The callbacks run where the loop would have run them: in its next turn
    (this handle is scheduled as the futures would have scheduled theirs),
    in their own context, in order. Never called inside a task's step (a
    task's wake-up cannot run there): _flush schedules it as a handle."""
    pairs = zip(futures, answers, strict=True)
    try:
        for future, answer in pairs:
            if future.done():
                continue
            callbacks = future._callbacks if future.__class__ is _FUTURE else None
            if callbacks is None or len(callbacks) != 1:
                future.set_result(answer)
                continue
            callback, context = callbacks[0]
            future.remove_done_callback(callback)
            future.set_result(answer)
            try:
                context.run(callback, future)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as Handle._run reports it
                loop.call_exception_handler({
                    "message": f"Exception in callback {callback!r}",
                    "exception": exc, "future": future})
    finally:
        for future, answer in pairs:  # (left by SystemExit or KeyboardInterrupt)
            if not future.done():
                future.set_result(answer)


def _with_id(job: NewJob) -> NewJob:
    """A job sent alone, with its id: its own, or, for the common call's
    job (no id, ``""``), one drawn now into the job itself (one read)."""
    return job if job.id else _new(NewJob, (new_job_id(), *job[1:]))


def _reset(lane: _Lane) -> None:
    """A lane left busy by an event loop that is gone (closed mid-call): a
    new epoch, so that its calls, when their coroutines are closed later
    (the collector runs their finally), count themselves out of nothing and
    ask no loop to send; nothing in flight, waiting or due."""
    lane.epoch += 1
    lane.calls = lane.sent = 0
    lane.due = False
    lane.jobs.clear()
    lane.futures.clear()


def _count_out(lane: _Lane, jobs: int, epoch: int) -> None:
    """A call of ``jobs`` jobs of ``epoch`` is no longer in flight (a call
    of an epoch gone, the lane reset since, counts for nothing)."""
    if epoch == lane.epoch:
        lane.calls -= 1
        lane.sent -= jobs


def _cancelled(lane: _Lane, jobs: int, futures: list[asyncio.Future[Answer]],
               epoch: int) -> None:
    """A batch call of ``jobs`` jobs cancelled (only the loop's shutdown
    cancels it): nothing more is sent; its callers, and those waiting in
    the lane unless it was reset for another loop since, are cancelled."""
    for future in futures:
        future.cancel()
    if epoch == lane.epoch:
        for future in lane.futures:
            future.cancel()
        lane.jobs.clear()
        lane.futures.clear()
    _count_out(lane, jobs, epoch)
