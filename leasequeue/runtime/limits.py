"""The second and third layers of limits for one worker: a queue limit (how
much a downstream resource takes, across every worker) and a job's
max_concurrent (whether it may overlap itself). Both go through a Limiter;
this module decides which slots a run needs, takes them (waiting in a line
per limit) and gives them back. The slots a run holds live on its record in
the run table, which the heartbeater renews; losing one stops the run. It
never settles jobs (the executor applies on_conflict)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from ..limiter import Limiter
from ..log import get_log
from ..registry import JobDefinition
from ..store.keys import keyed_limit_name
from ..store.shards import logical
from .runs import RunRecord, SlotHold

SLOT_POLL = 0.05  # how often the head of a line asks again (slots other processes free)
RELEASE_DEADLINE = 5.0


class _Waiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = anyio.Event()


def queue_limit_name(queue: str) -> str:
    return f"queue.{queue}"


def job_limit_name(job: str) -> str:
    return f"job.{job}"


def own_limit_name(definition: JobDefinition, key: str | None) -> str:
    """The job's max_concurrent limit: per rendered concurrency_key (shared
    by every job type whose key renders the same), else per job name."""
    return keyed_limit_name(key) if key is not None else job_limit_name(definition.name)


@dataclass(frozen=True, slots=True)
class LimitsParams:
    limiter: Limiter
    queue_limits: Mapping[str, int]
    worker_id: str
    prefix: str  # the queue prefix: a holder says where its job lives


class Limits:
    def __init__(self, params: LimitsParams) -> None:
        self.limiter = params.limiter
        self.queue_limits = dict(params.queue_limits)
        self._worker_id = params.worker_id
        self._prefix = params.prefix
        self._lines: dict[str, deque[_Waiter]] = {}  # limit name -> runs waiting for it
        self._log = get_log("limits", worker_id=params.worker_id)

    @property
    def lease_s(self) -> float | None:
        """The limiter's lease, when its slots lapse unless renewed."""
        lease = getattr(self.limiter, "lease_ms", None)
        return int(lease) / 1000 if lease is not None else None

    def applies(self, definition: JobDefinition, queue: str) -> bool:
        return definition.max_concurrent is not None or (
            bool(self.queue_limits) and logical(queue) in self.queue_limits)

    def limited_queue(self, queue: str, definitions: list[JobDefinition]) -> bool:
        """Whether a run of this physical queue may need a slot before it starts."""
        return logical(queue) in self.queue_limits or any(
            d.max_concurrent is not None for d in definitions if d.queue == logical(queue))

    def _needed(self, definition: JobDefinition, queue: str,
                key: str | None) -> list[tuple[str, int]]:
        needed = []
        queue = logical(queue)  # the logical queue: a limit covers all its shards
        if queue in self.queue_limits:
            needed.append((queue_limit_name(queue), self.queue_limits[queue]))
        if definition.max_concurrent is not None:
            needed.append((own_limit_name(definition, key), definition.max_concurrent))
        return needed

    def holder(self, run: RunRecord) -> str:
        """Who holds a slot: where the job lives (queue prefix and physical
        queue), the run (id and token) and this worker."""
        job = run.job
        return json.dumps([self._prefix, job.queue, job.id, job.token, self._worker_id])

    async def acquire(self, run: RunRecord, definition: JobDefinition,
                      wait: float = 0.0, key: str | None = None) -> bool:
        """Take every slot the run needs (recorded on the run), or none (False)
        when one is not free. With ``wait``, wait that long in this process's
        line for the full limit: only the head of the line asks the limiter
        again (at once when a run of this process gives a slot back, else every
        SLOT_POLL seconds), so a crowd of waiting runs costs one request."""
        full = await self._try(run, definition, key)
        if not full:
            return True
        deadline = time.monotonic() + wait
        line = self._lines.setdefault(full, deque())
        me = _Waiter()
        line.append(me)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or run.stop_reason is not None:
                    run.ctx.log.info("no slot free", limit=full,
                                     on_conflict=definition.on_conflict, waited_s=wait)
                    return False
                head = line[0] is me
                with anyio.move_on_after(min(remaining, SLOT_POLL) if head else remaining):
                    await me.event.wait()
                me.event = anyio.Event()
                if not await self._try(run, definition, key):
                    return True
        finally:
            line.remove(me)
            if line:
                line[0].event.set()  # the next in line takes its turn (a slot may be free)

    async def _try(self, run: RunRecord, definition: JobDefinition, key: str | None) -> str:
        """Take all slots (recorded on the run) and answer '', or take none and
        answer the name of the limit that was full."""
        holder = self.holder(run)
        job_limit = own_limit_name(definition, key)
        lease_s = self.lease_s or float("inf")
        for name, limit in self._needed(definition, run.job.queue, key):
            # `replace` evicts older runs of the same job only; a queue limit is
            # shared with other jobs, which a replace must never stop
            replace = definition.on_conflict == "replace" and name == job_limit
            sent_at = time.monotonic()
            grant = await self.limiter.acquire(name, limit, holder, replace)
            if not grant.taken:
                await self._roll_back(run)  # quietly: waking a line here would spin
                return name
            run.slots = (*run.slots, SlotHold(name, holder, lease_s, sent_at))
            if grant.evicted:
                # the evicted run's own worker stops it when its renewal of
                # this slot answers "evicted": no cancel across keyspaces
                run.ctx.log.info("replaced an older run", limit=name, replaced=grant.evicted)
        return ""

    async def _roll_back(self, run: RunRecord) -> None:
        held, run.slots = run.slots, ()
        for hold in held:
            await self.limiter.release(hold.name, [hold.holder])

    async def release(self, run: RunRecord) -> None:
        """Give every slot of a run back, shielded and bounded (a limiter that
        does not answer lets the slots lapse on their own)."""
        held, run.slots = run.slots, ()
        if not held:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_DEADLINE):
            for hold in held:
                await self.limiter.release(hold.name, [hold.holder])
                line = self._lines.get(hold.name)
                if line:  # the head of this process's line for that limit tries now
                    line[0].event.set()
