"""Group commit of concurrent enqueues (App.enqueue).

Many tasks of one process calling ``app.enqueue`` at once (a web service
under load) would each send their own enqueue script call. Per physical
queue, this sends them together instead:

- a call that finds its queue idle (no enqueue call of this App in flight
  for it) is sent at once, alone, by its own task: no timer, no added
  latency, the same single script call as before;
- calls that arrive while one is in flight wait, and go together as ONE
  script call (lua/enqueue.lua takes a batch) as soon as it returns, sent
  before the callers it answered resume: at most ``max_jobs`` jobs, about
  ``max_bytes`` of payloads and half of the queue's callers (those just
  answered and those waiting) per call, so that under a steady load one
  half is in Redis while the client prepares the other; the next waiting
  ones go in the call after.

Each caller gets its own reply (created, state): the script answers per job
in order, and a job id repeated within a batch is "existed" for the later
caller, as two calls one after the other would answer. A job-level problem
(a bad payload, an unknown job, a bad option) is raised by the caller's own
checks before its job joins a batch, so it never reaches the others. A
failed call (Redis unreachable, NotDurable, OOM...) raises its typed error
in every caller of that batch: the script runs whole or not at all, so a
batch is never half-written.

Cancellation: a caller cancelled while it waits is taken out (its job is
never sent). A caller cancelled once its batch was sent sees the
cancellation, and its job may exist (as for a single enqueue cancelled
mid-call); the others of the batch still get their replies, as the call is
sent by a task of its own, which no caller's cancellation stops.

Works on the running asyncio loop (redis-py's asyncio client needs one)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from operator import itemgetter

from ..models import NewJob
from .keys import QueueKeys

Reply = tuple[bool, str]
Send = Callable[[QueueKeys, Sequence[NewJob]], Awaitable[list[Reply]]]

MAX_BATCH_BYTES = 1 << 20  # payload bytes per call, beyond the first job


class _Lane:
    """One physical queue: is a call in flight, and who waits for the next
    (their jobs and their callers' futures, side by side, in arrival order)."""

    __slots__ = ("busy", "futures", "jobs", "loop")

    def __init__(self) -> None:
        self.busy = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.jobs: list[NewJob] = []
        self.futures: list[asyncio.Future[Reply]] = []


_DONE = asyncio.Future.done
_PAYLOAD = itemgetter(2)  # NewJob.payload (a tuple's item: no Python frame)


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
        self._tasks: set[asyncio.Task[None]] = set()  # batch calls in flight

    def enqueue(self, qk: QueueKeys, job: NewJob) -> Awaitable[Reply]:
        """What to await, at once, for the script's reply for ``job`` in
        queue ``qk``: while a call is in flight for the queue, the caller's
        own future, parked in the lane (a plain function, so that a waiting
        caller, the common one under load, makes no coroutine of its own);
        else the lone call (_alone)."""
        lane = self._lanes.get(qk.queue)
        if lane is not None and lane.busy:
            loop = asyncio.get_running_loop()
            if lane.loop is loop:
                future: asyncio.Future[Reply] = loop.create_future()
                lane.jobs.append(job)
                lane.futures.append(future)
                # cancelled while awaited: the future is cancelled too; _take
                # skips it if its job was not sent yet, a batch in flight leaves it
                return future
        return self._alone(qk, job, lane)

    async def _alone(self, qk: QueueKeys, job: NewJob, lane: _Lane | None) -> Reply:
        """The reply of a job whose queue was idle when it came: sent at
        once, alone, from the caller's task (or parked after all, if another
        caller's call started in between). ``lane``: the queue's, as
        enqueue() found it (None: the queue's first call)."""
        if lane is None:  # (another first call may have made it since: never two lanes)
            lane = self._lanes.setdefault(qk.queue, _Lane())
        loop = asyncio.get_running_loop()
        if lane.busy and lane.loop is not loop:
            # left busy by an event loop that is gone (closed mid-call)
            lane.busy = False
            lane.jobs.clear()
            lane.futures.clear()
        if not lane.busy:  # idle: send at once, alone, from this task
            lane.busy, lane.loop = True, loop
            try:
                (reply,) = await self._send(qk, (job,))
            finally:
                if lane.jobs:
                    self._next(qk, lane, 1)
                else:
                    lane.busy = False
            return reply
        future: asyncio.Future[Reply] = loop.create_future()
        lane.jobs.append(job)
        lane.futures.append(future)
        return await future

    def _next(self, qk: QueueKeys, lane: _Lane, answered: int) -> None:
        """After the lone call returned with callers waiting: a task of its
        own sends them (no caller's cancellation can stop it)."""
        jobs, futures = self._take(lane, answered)
        if jobs:
            task = asyncio.get_running_loop().create_task(self._flush(qk, lane, jobs, futures))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self, lane: _Lane,
              answered: int) -> tuple[list[NewJob], list[asyncio.Future[Reply]]]:
        """After a call for ``answered`` jobs returned: the waiting jobs
        (skipping cancelled callers) of the next call, and their callers'
        futures; when none, the queue is idle again.

        A call takes at most half of the queue's callers (those just answered,
        who may come back at once, and those waiting): under a steady load two
        halves alternate, one in Redis while the client prepares the other,
        instead of the client and Redis taking turns. Beyond its first job, a
        call takes jobs while their payloads add up to ``max_bytes`` at most."""
        jobs, futures = lane.jobs, lane.futures
        limit = min(self.max_jobs, (answered + len(jobs) + 1) // 2)
        n = min(limit, len(jobs))
        if n:
            # the common call: the first n callers, none cancelled, within the
            # bytes; taken by slices and C loops, not a Python turn per job
            taken = futures[:n]
            if not any(map(_DONE, taken)):
                batch = jobs[:n]
                if n == 1 or sum(map(len, map(_PAYLOAD, batch))) <= self.max_bytes:
                    del jobs[:n], futures[:n]
                    return batch, taken
        batch, taken = self._take_one_by_one(lane, limit)
        if not batch:
            lane.busy = False
        return batch, taken

    def _take_one_by_one(self, lane: _Lane,
                         limit: int) -> tuple[list[NewJob], list[asyncio.Future[Reply]]]:
        """_take's call when a caller was cancelled or the bytes cut it short."""
        jobs, futures = lane.jobs, lane.futures
        batch: list[NewJob] = []
        taken: list[asyncio.Future[Reply]] = []
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
                     futures: list[asyncio.Future[Reply]]) -> None:
        """Batch calls, one after the other, while callers wait: every caller
        of a batch gets its reply or the call's error. The next call is sent
        before the answered callers resume, so it is in Redis while they run."""
        while batch:
            try:
                replies = await self._send(qk, batch)
                if len(replies) != len(batch):
                    raise RuntimeError(f"enqueue answered {len(replies)} replies for "
                                       f"{len(batch)} jobs")
            except asyncio.CancelledError:
                # only the loop's shutdown cancels this task: nothing more is sent
                for future in [*futures, *lane.futures]:
                    future.cancel()
                lane.jobs.clear()
                lane.futures.clear()
                lane.busy = False
                raise
            except BaseException as exc:  # every caller of the batch gets it
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    lane.busy = False  # KeyboardInterrupt & co: the waiting ones stay
                    raise
            else:
                for future, reply in zip(futures, replies, strict=True):
                    if not future.done():  # a caller cancelled after it was sent
                        future.set_result(reply)
            batch, futures = self._take(lane, len(batch))
