"""The second and third layers of limits for one worker: a queue limit (how
much a downstream resource takes, across every worker) and a job's
max_concurrent (whether it may overlap itself). Both go through a Limiter;
this module decides which slots a run needs and takes, renews and gives them
back. It never settles jobs (the executor applies on_conflict)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Mapping

import anyio

from ..errors import LeaseQueueError
from ..limiter import Limiter
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from ..store.specs import LimiterRenewReply
from .handler import Run

SLOT_POLL = 0.05  # how often the head of a line asks again (slots other processes free)


class _Waiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = anyio.Event()


def queue_limit_name(queue: str) -> str:
    return f"queue.{queue}"


def job_limit_name(job: str) -> str:
    return f"job.{job}"


class Limits:
    def __init__(self, limiter: Limiter, queue_limits: Mapping[str, int], worker_id: str,
                 scripts: Scripts, keys: Callable[[str], QueueKeys]) -> None:
        self.limiter = limiter
        self.queue_limits = dict(queue_limits)
        self._worker_id = worker_id
        self._scripts = scripts
        self._keys = keys
        self._held: dict[str, set[str]] = {}  # limit name -> holders of this worker
        self._lines: dict[str, deque[_Waiter]] = {}  # limit name -> runs waiting for it
        self._log = get_log("limits", worker_id=worker_id)

    @property
    def lease_ms(self) -> int | None:
        """The limiter's lease, when its slots lapse unless renewed."""
        lease = getattr(self.limiter, "lease_ms", None)
        return int(lease) if lease is not None else None

    def applies(self, run: Run) -> bool:
        return run.definition.max_concurrent is not None or run.ctx.queue in self.queue_limits

    def _needed(self, run: Run) -> list[tuple[str, int]]:
        needed = []
        queue = run.ctx.queue  # the logical queue: a limit covers all its shards
        if queue in self.queue_limits:
            needed.append((queue_limit_name(queue), self.queue_limits[queue]))
        if run.definition.max_concurrent is not None:
            needed.append((job_limit_name(run.definition.name), run.definition.max_concurrent))
        return needed

    def holder(self, run: Run) -> str:
        job = run.job
        return json.dumps([job.queue, job.id, job.token, self._worker_id])

    async def acquire(self, run: Run, wait: float = 0.0) -> list[str] | None:
        """Take every slot the run needs, or none (None) when one is not free.
        With ``wait``, wait that long in this process's line for the full limit:
        only the head of the line asks Redis again (at once when a run of this
        process gives a slot back, else every SLOT_POLL seconds), so a crowd of
        waiting runs costs one request, not one each."""
        taken, full = await self._try(run)
        if taken is not None:
            return taken
        deadline = time.monotonic() + wait
        line = self._lines.setdefault(full, deque())
        me = _Waiter()
        line.append(me)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or run.ctx.is_stopping():
                    run.ctx.log.info("no slot free", limit=full,
                                     on_conflict=run.definition.on_conflict, waited_s=wait)
                    return None
                head = line[0] is me
                with anyio.move_on_after(min(remaining, SLOT_POLL) if head else remaining):
                    await me.event.wait()
                me.event = anyio.Event()
                taken, _ = await self._try(run)
                if taken is not None:
                    return taken
        finally:
            line.remove(me)
            if line:
                line[0].event.set()  # the next in line takes its turn (a slot may be free)

    async def _try(self, run: Run) -> tuple[list[str] | None, str]:
        holder = self.holder(run)
        job_limit = job_limit_name(run.definition.name)
        taken: list[str] = []
        for name, limit in self._needed(run):
            # `replace` evicts older runs of the same job only; a queue limit is
            # shared with other jobs, which a replace must never cancel
            replace = run.definition.on_conflict == "replace" and name == job_limit
            grant = await self.limiter.acquire(name, limit, holder, replace)
            if not grant.taken:
                for held in taken:  # roll back quietly: waking a line here would spin
                    self._held.get(held, set()).discard(holder)
                    await self.limiter.release(held, [holder])
                return None, name
            taken.append(name)
            self._held.setdefault(name, set()).add(holder)
            if grant.evicted:
                await self._cancel_evicted(grant.evicted, run)
        return taken, ""

    async def release(self, run: Run, names: list[str]) -> None:
        holder = self.holder(run)
        for name in names:
            self._held.get(name, set()).discard(holder)
            await self.limiter.release(name, [holder])
            line = self._lines.get(name)
            if line:  # the head of this process's line for that limit tries now
                line[0].event.set()

    async def renew(self) -> None:
        for name, holders in list(self._held.items()):
            if not holders:
                continue
            listed = sorted(holders)
            try:
                answers = await self.limiter.renew(name, listed)
            except LeaseQueueError as exc:
                self._log.warning("limiter renewal failed", limit=name, error=str(exc))
                continue
            for holder, kept in zip(listed, answers, strict=True):
                if kept != LimiterRenewReply.RENEWED:
                    # evicted by a `replace`, whose cancel request stops the run
                    self._log.warning("limiter slot lost", limit=name, holder=holder)

    async def _cancel_evicted(self, evicted: str, by: Run) -> None:
        """`replace`: the older run is cancelled through the cancel request its
        worker's heartbeater sees."""
        try:
            queue, job_id, token, worker = json.loads(evicted)
            # fenced by the evicted run's token: a holder whose job has moved on
            # (finished, requeued, claimed again) is left alone
            status, _ = await self._scripts.cancel(self._keys(str(queue)), str(job_id),
                                                   int(token))
        except (ValueError, TypeError, LeaseQueueError) as exc:
            self._log.warning("could not cancel the replaced run", holder=evicted,
                              error=str(exc))
            return
        by.ctx.log.info("replaced an older run", replaced_job=job_id, replaced_token=token,
                        replaced_worker=worker, cancel=status)
