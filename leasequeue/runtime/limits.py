"""The second and third layers of limits for one worker: a queue limit (how
much a downstream resource takes, across every worker) and a job's
max_concurrent (whether it may overlap itself). Both go through a Limiter;
this module decides which slots a run needs, takes them (waiting in a line
per limit) and gives them back. The slots a run holds live on its record in
the run table, which the heartbeater renews; losing one stops the run. It
never settles jobs (the executor applies on_conflict).

A run refused the slot of its ``concurrency_key`` does not poll: the
limiter registers it as a waiter of the key in the same call that refuses
it, the executor sends it back to its queue for a long fallback delay, and
whoever gives a slot of that key back wakes the waiter it pops (lua/wake.lua
on the waiter's own queue, through this App's queue connection: the limiter
may live on another Redis)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio

from ..errors import ConfigError, RedisUnavailable, ScriptError
from ..limiter import Limiter, Waiter
from ..log import get_log
from ..registry import JobDefinition
from ..store.keys import QueueKeys, keyed_limit_name
from ..store.scripts import Scripts
from ..store.shards import logical
from .runs import RunRecord, SlotHold

SLOT_POLL = 0.05  # how often the head of a line asks again (slots other processes free)
RELEASE_DEADLINE = 5.0
# the fallback of a run waiting for its key's slot, with a limiter that has no
# lease (in-process): a RedisLimiter's lease otherwise (30 s by default)
KEYED_FALLBACK = 30.0


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
class Full:
    """Why a run did not get its slots: the ``limit`` that was full, and
    ``waiting_s`` > 0 when the run was registered as a waiter of that limit
    (a keyed one): it goes back for that fallback delay and is woken when a
    slot frees; 0: it goes back after its slot_backoff."""

    limit: str
    waiting_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LimitsParams:
    limiter: Limiter
    queue_limits: Mapping[str, int]
    worker_id: str
    prefix: str  # the queue prefix: a holder says where its job lives
    # the App's queue scripts and keys: waiters are woken through them
    scripts: Scripts | None = None
    keys: Callable[[str], QueueKeys] | None = None


class Limits:
    def __init__(self, params: LimitsParams) -> None:
        self.limiter = params.limiter
        self.queue_limits = dict(params.queue_limits)
        self._worker_id = params.worker_id
        self._prefix = params.prefix
        self._scripts = params.scripts
        self._keys = params.keys
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

    def waiter(self, run: RunRecord, definition: JobDefinition) -> Waiter:
        """A run's entry in the waiters of its key: where its job lives (queue
        prefix, physical queue, id, and the token of this run, which fences
        the wake), kept for its fallback delay."""
        job = run.job
        return Waiter(json.dumps([self._prefix, job.queue, job.id, job.token]),
                      int(self.fallback_s(definition) * 1000))

    def fallback_s(self, definition: JobDefinition) -> float:
        """How long a run waiting for its key's slot stays away if no wake
        comes: the limiter's lease (a holder that died keeps its slot that
        long: an earlier return would be refused again), KEYED_FALLBACK
        without one, never less than the job's slot_backoff."""
        return max(definition.slot_backoff, self.lease_s or KEYED_FALLBACK)

    async def acquire(self, run: RunRecord, definition: JobDefinition,
                      wait: float = 0.0, key: str | None = None) -> Full | None:
        """Take every slot the run needs (recorded on the run): None, or none
        of them and the limit that was full. With ``wait``, wait that long in
        this process's line for the full limit: only the head of the line asks
        the limiter again (at once when a run of this process gives a slot
        back, else every SLOT_POLL seconds), so a crowd of waiting runs costs
        one request. A run refused its key's slot under `enqueue` (``key``
        given) is registered as a waiter of the key (Full.waiting_s)."""
        refused = await self._try(run, definition, key)
        if refused is None or refused.waiting_s > 0:  # taken, or waiting for a wake
            return refused
        full = refused.limit
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
                    return refused
                head = line[0] is me
                with anyio.move_on_after(min(remaining, SLOT_POLL) if head else remaining):
                    await me.event.wait()
                me.event = anyio.Event()
                refused = await self._try(run, definition, key)
                if refused is None or refused.waiting_s > 0:
                    return refused
        finally:
            line.remove(me)
            if line:
                line[0].event.set()  # the next in line takes its turn (a slot may be free)

    async def _try(self, run: RunRecord, definition: JobDefinition,
                   key: str | None) -> Full | None:
        """Take all slots (recorded on the run) and answer None, or take none
        and answer the limit that was full."""
        holder = self.holder(run)
        job_limit = own_limit_name(definition, key)
        lease_s = self.lease_s or float("inf")
        for name, limit in self._needed(definition, run.job.queue, key):
            # `replace` evicts older runs of the same job only; a queue limit is
            # shared with other jobs, which a replace must never stop
            replace = definition.on_conflict == "replace" and name == job_limit
            # a run of a busy key waits for a wake, registered with the refusal
            waiter = (self.waiter(run, definition)
                      if key is not None and name == job_limit
                      and definition.on_conflict == "enqueue" else None)
            sent_at = time.monotonic()
            grant = await self.limiter.acquire(name, limit, holder, replace, waiter)
            if grant.woken:  # slots of lapsed holders this call freed
                await self.wake(grant.woken)
            if not grant.taken:
                await self._roll_back(run)  # quietly: waking a line here would spin
                return Full(name, waiter.wait_ms / 1000
                            if grant.waiting and waiter is not None else 0.0)
            run.slots = (*run.slots, SlotHold(name, holder, lease_s, sent_at))
            if grant.evicted:
                # the evicted run's own worker stops it when its renewal of
                # this slot answers "evicted": no cancel across keyspaces
                run.ctx.log.info("replaced an older run", limit=name, replaced=grant.evicted)
        return None

    async def _roll_back(self, run: RunRecord) -> None:
        held, run.slots = run.slots, ()
        for hold in held:
            await self.wake(await self.limiter.release(hold.name, [hold.holder]))

    async def release(self, run: RunRecord) -> None:
        """Give every slot of a run back and wake the waiters each release
        hands back, shielded and bounded (a limiter that does not answer lets
        the slots lapse on their own; an unsent wake leaves its job to its
        fallback delay)."""
        held, run.slots = run.slots, ()
        if not held:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_DEADLINE):
            for hold in held:
                woken = await self.limiter.release(hold.name, [hold.holder])
                line = self._lines.get(hold.name)
                if line:  # the head of this process's line for that limit tries now
                    line[0].event.set()
                await self.wake(woken)

    async def wake(self, entries: Sequence[str]) -> None:
        """Wake the jobs of waiter entries a limiter handed back, on their own
        queues through this App's queue scripts. An entry of another queue
        prefix (another service sharing the limiter prefix), one that does
        not parse, or a wake that fails is left alone: its job comes back
        after its fallback delay."""
        if not entries or self._scripts is None or self._keys is None:
            return
        by_queue: dict[str, list[tuple[str, int]]] = {}
        for entry in entries:
            try:
                prefix, queue, job_id, token = json.loads(entry)
            except (ValueError, TypeError):
                continue
            if (prefix == self._prefix and isinstance(queue, str) and isinstance(job_id, str)
                    and isinstance(token, int)):
                by_queue.setdefault(queue, []).append((job_id, token))
        for queue, held in by_queue.items():
            try:
                await self._scripts.wake(self._keys(queue), held)
            except (ConfigError, RedisUnavailable, ScriptError) as exc:
                self._log.warning("wake failed; the waiting jobs come back after their "
                                  "fallback delay", queue=queue, jobs=len(held), error=str(exc))
