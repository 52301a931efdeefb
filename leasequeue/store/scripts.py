"""Typed calls of the Lua scripts for one Redis client: the only place that
knows each script's ARGV order and decodes its reply. Scripts load once per
client and run with EVALSHA (reloaded on NOSCRIPT)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import eq, itemgetter
from typing import Any

import hiredis
from redis.asyncio import Redis

from ..errors import ConfigError, NotDurable
from ..log import get_log
from ..models import (
    ClaimBatch,
    ClaimedJob,
    FailOutcome,
    NewJob,
    QueueStats,
    ReapOutcome,
)
from .connection import is_cluster
from .direct import Lane, run_and_wait, run_once
from .keys import (
    CACHED_QUEUES,
    BreakerKeys,
    LimiterKeys,
    QueueKeys,
    RateKeys,
    ResourceKeys,
    SchedulesKeys,
)
from .loader import READ_ONLY, script_source
from .record import error_text, record_text, text
from .settings import StoreSettings
from .specs import (
    SPECS,
    AckReply,
    BreakerCheckReply,
    BreakerForceReply,
    BreakerRecordReply,
    CancelStatus,
    EnqueueReply,
    FailReply,
    LimiterAcquireReply,
    LimiterRenewReply,
    RateReply,
    ReleaseReply,
    RenewReply,
    ReplayReply,
    ResourceClaimReply,
    ResourceClearReply,
    ResourceOpenReply,
    RunStateReply,
    ScheduleDoneReply,
    ScheduleFireReply,
    SchedulePauseReply,
    ScheduleTriggerReply,
    ScheduleUpsertReply,
    StartReply,
    WakeReply,
    replies,
)
from .translate import reraise, translate_errors

# an ack item: (id, token, result, note) or (id, token, result, note, logs)
AckItem = tuple[str, int, bytes, str] | tuple[str, int, bytes, str, str]
AnyKeys = QueueKeys | LimiterKeys | SchedulesKeys | BreakerKeys | ResourceKeys | RateKeys

@dataclass(frozen=True, slots=True)
class Park:
    """What a release over a rate tells the claims (lua/release.lua): the
    rate key's park group ("" = the key is not the jobs' group: only clear
    theirs), when its next start is expected from now, and its interval."""

    grp: str
    in_us: int
    interval_us: int


@dataclass(frozen=True, slots=True)
class LimiterAnswer:
    """lua/limiter_acquire.lua's reply: the code, the holder a `replace`
    evicted ('' = none) and the waiter entries to wake (slots it found
    held by lapsed holders)."""

    code: LimiterAcquireReply
    evicted: str
    woken: list[str]


@dataclass(frozen=True, slots=True)
class RateAnswer:
    """lua/rate.lua's reply: per holder (code, wait in us), then the starts
    allowed now and the reservations the key holds."""

    answers: list[tuple[RateReply, int]]
    tokens: int
    reserved: int
    ahead: int = 0  # starts granted ahead, with no holder (take | try with ahead > 0)


# a claim id goes into the claim key's text: no newline, nothing odd
_CLAIM_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")


class Scripts:
    """Registered scripts for one Redis client, with typed calls."""

    def __init__(self, redis: Redis, url: str, settings: StoreSettings) -> None:
        self._url = url
        self._redis = redis
        self.settings = settings
        shebang = not url.startswith("memory://")
        # the direct path needs a plain connection pool: one Redis or Sentinel
        self._lane = (Lane(redis, settings.reply_spin_us)
                      if shebang and not is_cluster(redis) else None)
        self._scripts = {name: redis.register_script(script_source(name, shebang))
                         for name in SPECS}
        self._key_cache: dict[AnyKeys, dict[str, list[bytes]]] = {}  # by queue, then script
        self._one_job = OneJobCalls(self._scripts["enqueue"].sha,
                                    self._scripts["enqueue_one"].sha)
        self._claim_keys: dict[tuple[QueueKeys, str], str] = {}
        # queue -> until when its claims go to claim.lua (claim_line.lua sent one there)
        self._general_until: dict[QueueKeys, float] = {}

    def _keys_of(self, name: str, qk: AnyKeys) -> list[bytes]:
        # built and encoded once per (script, queue), kept by queue (at most
        # CACHED_QUEUES of them, each with the scripts it was called with):
        # redis-py would otherwise encode every key name on every call, a
        # good part of a small call's cost
        if isinstance(qk, ResourceKeys):  # one per resource: not cached (unbounded)
            return [getattr(qk, key).encode() for key in SPECS[name].keys]
        if isinstance(qk, RateKeys):  # one per tenant: not cached (the cache would grow)
            return [qk.state.encode(), qk.reserved.encode()]
        if isinstance(qk, LimiterKeys):  # one per concurrency key: not cached either
            return [getattr(qk, key).encode() for key in SPECS[name].keys]
        by_script = self._key_cache.get(qk)
        if by_script is not None:
            cached = by_script.get(name)
            if cached is not None:
                return cached
        spec = SPECS[name]
        cached = [getattr(qk, key).encode() for key in spec.keys if key not in spec.worker_keys]
        if by_script is None:
            if len(self._key_cache) >= CACHED_QUEUES:  # ever new queues: start again
                self._key_cache.clear()
            by_script = self._key_cache[qk] = {}
        by_script[name] = cached
        return cached

    def _call_keys(self, name: str, qk: AnyKeys, worker_keys: Sequence[str] = ()) -> list[bytes]:
        """A call's KEYS: the script's keys of ``qk``, then its per-worker keys."""
        keys = self._keys_of(name, qk)
        if worker_keys:
            keys = [*keys, *(k.encode() for k in worker_keys)]
        return keys

    @property
    def lane(self) -> Lane | None:
        """The connections the scripts use on one Redis (None on a cluster
        and in memory://): the claimer's wake-up BLPOP uses them too."""
        return self._lane

    async def run(self, name: str, qk: AnyKeys, args: Sequence[Any],
                  worker_keys: Sequence[str] = (), retry: bool = True) -> Any:
        """Run a script; ``worker_keys``: the per-worker keys its spec lists
        last. ``retry``: a call whose connection dropped is sent again once
        (a call that may have run counts twice if sent again, and must not
        be: a rate refund's or try's, ONCE_RATE_MODES)."""
        keys = self._call_keys(name, qk, worker_keys)
        if self._lane is not None:
            # a dropped connection is retried once: every script is fenced or
            # idempotent, the claim too (by its claim id), or counts on the
            # safe side if run twice (a rate take: a start spent, never one
            # more granted), but a rate refund or try, which go once; a
            # read-only script goes as EVALSHA_RO, which a read-only ACL
            # user may send
            call = self._lane.run(self._scripts[name], keys, args, retry,
                                  read_only=name in READ_ONLY)
        elif not retry and is_cluster(self._redis):
            # redis-py's cluster client would send it again itself
            call = run_once(self._redis, self._scripts[name], keys, args)
        else:
            call = self._scripts[name](keys=keys, args=list(args))
        return await translate_errors(self._url, name, call, keys)

    async def run_durable(self, name: str, qk: QueueKeys, args: Sequence[Any],
                          retry: bool = True) -> Any:
        """run(), then WAIT for the configured replicas; NotDurable when fewer
        acknowledged in time (the writes are on the master, maybe not beyond).
        ``retry``: run()'s; the WAIT path sends its call once anyway."""
        s = self.settings
        if s.durable_replicas <= 0:
            return await self.run(name, qk, args, retry=retry)
        keys = self._keys_of(name, qk)
        reply, acked = await translate_errors(self._url, name, run_and_wait(
            self._redis, self._scripts[name], keys, list(args),
            s.durable_replicas, s.durable_timeout_ms), keys)
        if acked < s.durable_replicas:
            raise NotDurable(name, acked, s.durable_replicas, reply)
        return reply

    # -- one method per script ------------------------------------------------

    async def enqueue(self, qk: QueueKeys, jobs: Sequence[NewJob],
                      ids: Sequence[str] | None = None,
                      retry: bool = True) -> list[tuple[bool, str]]:
        """Enqueue ``jobs`` in one call; (created, state) for each, in order.
        ``ids``: the jobs' ids, in order, drawn by the sender as it sends
        them (the coalescer: App.enqueue's common call makes its job with no
        id, ``""``); None: each job's own. A job left with no id raises
        ValueError before anything is sent. ``retry``: run()'s (a call sent
        again after its reply was lost answers "existed" for the jobs its
        first run created: App.rerun sends its call once)."""
        s = self.settings
        if len(jobs) == 1 and self._lane is not None and s.durable_replicas <= 0:
            # one job a call (the coalescer's lone call, a one-job chunk, a
            # rerun): formatted onto a head
            check_ids(jobs, ids)
            job = jobs[0] if ids is None else jobs[0]._replace(id=ids[0])
            call = self._one_job.call(s, qk, job, self._keys_of)
            while call is not None:
                packed, keys, name = call
                try:
                    reply = await self._lane.run(self._scripts[name], keys, (), retry,
                                                 packed=packed, spin=True)
                except Exception as exc:  # redis_errors' rule, free when nothing fails
                    reraise(self._url, name, exc, keys)
                if reply.__class__ is not int or name != "enqueue_one":  # (ends the loop)
                    return enqueue_replies(reply, 1)
                # enqueue_one.lua found the id: enqueue.lua answers its state
                call = self._one_job.call(s, qk, job, self._keys_of, line=False)
        reply = await self.run_durable("enqueue", qk, enqueue_args(s, jobs, ids), retry)
        return enqueue_replies(reply, len(jobs))

    async def enqueue_in_order(self, qk: QueueKeys, batches: Sequence[Sequence[NewJob]],
                               handle: Callable[[int, list[tuple[bool, str]]], None]) -> None:
        """enqueue() for each batch, in order, each batch's replies given to
        ``handle(index, replies)`` as they come: pipelined on one connection
        on one Redis (Lane.run_many: the client builds the next call while
        Redis runs this one), one call after the other elsewhere (a cluster,
        memory://, the durable mode, which WAITs after each call)."""
        if self._lane is None or self.settings.durable_replicas > 0 or len(batches) < 2:
            for index, batch in enumerate(batches):
                handle(index, await self.enqueue(qk, batch))
            return
        keys = self._keys_of("enqueue", qk)
        s = self.settings
        answered = 0

        def one(reply: Any) -> None:
            nonlocal answered
            replies = enqueue_replies(reply, len(batches[answered]))
            if len(replies) != len(batches[answered]):
                raise RuntimeError(f"enqueue answered {len(replies)} replies for "
                                   f"{len(batches[answered])} jobs")
            handle(answered, replies)
            answered += 1

        await translate_errors(self._url, "enqueue", self._lane.run_many(
            self._scripts["enqueue"], ((keys, enqueue_args(s, b)) for b in batches), one),
            keys)

    async def claim(self, qk: QueueKeys, count: int, lease_ms: int, worker_id: str,
                    start_now: int, claim_id: str) -> ClaimBatch:
        """Lease up to ``count`` jobs; the first ``start_now`` start at once (their
        attempt counted), the rest wait for start(). A call repeated with the same
        ``claim_id`` (a lost reply) returns the same jobs and leases nothing new:
        use a fresh id per claim. claim_line.lua takes the claim when it can
        (see _line_first), else claim.lua."""
        args, claim_key = self._claim_args(qk, count, lease_ms, worker_id, start_now, claim_id)
        if self._line_first(qk, count):
            reply = await self.run("claim_line", qk, _line_args(args), worker_keys=(claim_key,))
            if reply.__class__ is not int:
                return claim_batch(qk, reply)
            self._general_until[qk] = _clock() + LINE_PAUSE
        reply = await self.run("claim", qk, args, worker_keys=(claim_key,))
        return claim_batch(qk, reply)

    async def wait_then_claim(self, qk: QueueKeys, wake_keys: Sequence[str], block_for: float,
                              count: int, lease_ms: int, worker_id: str, start_now: int,
                              claim_id: str) -> ClaimBatch:
        """An idle worker's wait and its next claim in one round trip: BLPOP on
        ``wake_keys`` with the claim pipelined behind it on the same connection
        (Lane.blpop_then), so Redis runs the claim as soon as the BLPOP ends (a
        token, or ``block_for`` passed) instead of when the worker, woken,
        sends it. The claim is claim()'s, with its idempotent ``claim_id``
        (claim_line.lua when it can; when it answers that claim.lua must take
        the claim, claim() sends it after the wait). Needs the lane (one Redis)."""
        if self._lane is None:
            raise RuntimeError("wait_then_claim needs the lane (one Redis, not a cluster)")
        args, claim_key = self._claim_args(qk, count, lease_ms, worker_id, start_now, claim_id)
        name = "claim_line" if self._line_first(qk, count) else "claim"
        keys = self._call_keys(name, qk, (claim_key,))
        _, reply = await translate_errors(
            self._url, name, self._lane.blpop_then(
                wake_keys, block_for, self._scripts[name], keys,
                _line_args(args) if name == "claim_line" else args),
            keys)
        if reply.__class__ is int:  # claim_line.lua: claim.lua must take it (nothing written)
            self._general_until[qk] = _clock() + LINE_PAUSE
            return await self.claim(qk, count, lease_ms, worker_id, start_now, claim_id)
        return claim_batch(qk, reply)

    def _line_first(self, qk: QueueKeys, count: int) -> bool:
        """Whether a claim goes to claim_line.lua first: no audit trail asked
        for (claim.lua writes the `claimed` events), at most CLAIM_LINE_MAX
        jobs, and the queue's last claim_line.lua did not send its claim to
        claim.lua within LINE_PAUSE (a queue of priorities, delays, park groups
        or retries would otherwise pay two calls a claim)."""
        if count > CLAIM_LINE_MAX or self.settings.audit_all:
            return False
        until = self._general_until.get(qk)
        if until is None:
            return True
        if _clock() < until:
            return False
        del self._general_until[qk]
        return True

    def _claim_args(self, qk: QueueKeys, count: int, lease_ms: int, worker_id: str,
                    start_now: int, claim_id: str) -> tuple[list[Any], str]:
        s = self.settings
        claim_key = self._claim_keys.get((qk, worker_id))
        if claim_key is None:  # built and checked once per (queue, worker)
            claim_key = qk.claim(worker_id)
            if len(self._claim_keys) >= CACHED_QUEUES:  # ever new workers: start again
                self._claim_keys.clear()
            self._claim_keys[(qk, worker_id)] = claim_key
        if not _CLAIM_ID.fullmatch(claim_id):
            raise ValueError(f"invalid claim id {claim_id!r}: use 1-100 of A-Z a-z 0-9 _ . : -")
        return ([count, lease_ms, worker_id, s.promote_batch, s.events_maxlen, s.audit_flag,
                 s.letters_maxlen, start_now, claim_id], claim_key)

    async def start(self, qk: QueueKeys, held: Sequence[tuple[str, int]]) -> list[StartReply]:
        """Mark leased runs started (their attempt counted once); held: (id, token)."""
        args: list[Any] = []
        for job_id, token in held:
            args += [job_id, token]
        return replies(StartReply, await self.run("start", qk, args))

    async def renew(self, qk: QueueKeys, held: Sequence[tuple[str, int]],
                    lease_ms: int) -> list[RenewReply]:
        args: list[Any] = [lease_ms, self.settings.events_maxlen]
        for job_id, token in held:
            args += [job_id, token]
        return replies(RenewReply, await self.run("renew", qk, args))

    async def ack(self, qk: QueueKeys, outcome: str, retention_ms: int,
                  items: Sequence[AckItem]) -> list[AckReply]:
        """Finish a batch with one outcome and retention; items: (id, token,
        result, note, logs), a note ('' = none) is kept in the job's error
        history, logs ('' = none, may be left out) as the run's captured lines.
        Also deletes up to ``expire_on_ack`` (at least twice the batch) expired
        finished records, so retention keeps pace with the rate work finishes."""
        s = self.settings
        args: list[Any] = [s.events_maxlen, s.audit_flag, outcome, retention_ms,
                           max(s.expire_on_ack, 2 * len(items))]
        for item in items:
            note = item[3]
            args += (item[0], item[1], item[2], error_text(note) if note else "",
                     item[4] if len(item) > 4 else "")
        try:
            reply = await self.run_durable("ack", qk, args)
        except NotDurable as exc:
            reply = exc.reply  # the acks are written; a failover now may undo them
            get_log("scripts").warning("acks not confirmed by a replica in time",
                                       acked=exc.acked, wanted=exc.wanted, jobs=len(items))
        return replies(AckReply, reply)

    async def fail(self, qk: QueueKeys, job_id: str, token: int, kind: str, reason: str,
                   error: str, delay_ms: int, max_attempts: int, max_infra: int,
                   logs: str = "") -> FailOutcome:
        """A run failed (kind work | infra | dead); ``max_attempts`` / ``max_infra``:
        the worker's effective budgets for this job (the record's own when set,
        else its definition's), both > 0; ``logs``: the run's captured lines
        ('' = none)."""
        if max_attempts <= 0 or max_infra <= 0:
            raise ValueError("fail needs the job's budgets, both > 0")
        s = self.settings
        r = await self.run(
            "fail", qk,
            [job_id, token, kind, record_text(reason), error_text(error), delay_ms, s.events_maxlen,
             s.letters_maxlen, s.retention_ms, max_attempts, max_infra, s.dead_max,
             s.dead_retention_ms, logs],
        )
        return FailOutcome(FailReply(int(r[0])), text(r[1]), int(r[2]), int(r[3]), int(r[4]))

    async def release(self, qk: QueueKeys, held: Sequence[tuple[str, int]], delay_ms: int,
                      why: str, park: Park | None = None) -> list[ReleaseReply]:
        """Hand leased jobs back (see lua/release.lua); ``park``: they wait for
        a rate reservation (their park group is cleared), and the group of
        the key they wait for is parked (park.grp, if any)."""
        s = self.settings
        args: list[Any] = [delay_ms, s.retention_ms, s.events_maxlen, why]
        args += ([1, park.grp, park.in_us, park.interval_us] if park is not None
                 else [0, "", 0, 0])
        for job_id, token in held:
            args += [job_id, token]
        return replies(ReleaseReply, await self.run("release", qk, args))

    async def reap(self, qk: QueueKeys, batch: int, backoff_base_ms: int, backoff_cap_ms: int,
                   budgets: Mapping[str, tuple[int, int]],
                   default_budget: tuple[int, int]) -> ReapOutcome:
        """Hand expired leases back. ``budgets``: job name -> (max_attempts,
        max_infra) of the reaping worker's definitions; ``default_budget`` for the
        other names; a record's own budget (when set) wins over both."""
        if min(default_budget) <= 0 or any(min(b) <= 0 for b in budgets.values()):
            raise ValueError("reap budgets must be > 0")
        s = self.settings
        args: list[Any] = [batch, backoff_base_ms, backoff_cap_ms, s.retention_ms,
                           s.events_maxlen, s.letters_maxlen, s.dead_max, s.dead_retention_ms,
                           *default_budget]
        for name, (max_attempts, max_infra) in budgets.items():
            args += [name, max_attempts, max_infra]
        r = await self.run("reap", qk, args)
        return ReapOutcome(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]))

    async def expire(self, qk: QueueKeys, batch: int) -> int:
        return int(await self.run("expire", qk, [batch]))

    async def cancel(self, qk: QueueKeys, job_id: str, token: int = 0) -> tuple[CancelStatus, str]:
        """Cancel a job; with ``token``, only request the cancel of that run.
        Returns (status, state)."""
        s = self.settings
        r = await self.run("cancel", qk, [job_id, s.retention_ms, s.events_maxlen, token])
        return CancelStatus(text(r[0])), text(r[1])

    async def wake(self, qk: QueueKeys, held: Sequence[tuple[str, int]]) -> list[WakeReply]:
        """Wake jobs waiting for a keyed slot (held: the (id, token) of the
        run the slot refused): scheduled with that token -> ready now; still
        leased with it -> its release puts it in line at once; else nothing."""
        s = self.settings
        args: list[Any] = [s.events_maxlen, s.wake_cap]
        for job_id, token in held:
            args += [job_id, token]
        return replies(WakeReply, await self.run("wake", qk, args))

    async def replay(self, qk: QueueKeys, job_ids: Sequence[str]) -> list[ReplayReply]:
        return [ReplayReply(int(x)) for x in await self.run(
            "replay", qk, [self.settings.events_maxlen, *job_ids])]

    async def purge(self, qk: QueueKeys, batch: int) -> int:
        return int(await self.run("purge", qk, [batch]))

    async def stats(self, qk: QueueKeys, max_classes: int = 32) -> QueueStats:
        return stats_reply(qk, await self.run("stats", qk, [max_classes]))

    async def queue_config(self, qk: QueueKeys, shards: int, expected: int = 0) -> int:
        """Record a logical queue's shard count; returns the recorded count (0:
        none). ``expected`` 0 records only when none is recorded yet; > 0
        replaces the count only while it is ``expected`` (a reshard); -1 only
        reads it."""
        return queue_config_reply(qk, await self.run("queue_config", qk, [shards, expected]))

    async def watch(self, qk: QueueKeys, job_id: str, ttl_ms: int) -> str:
        """The job's state ('missing' | 'malformed' too); while it has not
        ended, a waiter is registered for ``ttl_ms`` so its end pushes a token
        on ``qk.notify(job_id)``."""
        return text(await self.run("watch", qk, [job_id, ttl_ms]))

    # -- what a run leaves for the next one (checkpoints, saga, progress) -----

    async def runstate(self, qk: QueueKeys, job_id: str, token: int, kind: str, value: bytes,
                       max_bytes: int, detail: str = "") -> RunStateReply:
        """Write a run's checkpoints (kind 'c'), saga record ('s') or progress
        ('p', ``fraction US note``), fenced by ``token``; ``detail``: the events
        stream entry's detail ('' = none)."""
        return RunStateReply(int(await self.run(
            "runstate", qk,
            [job_id, token, kind, value, max_bytes, self.settings.events_maxlen, detail])))

    async def read_runstate(self, qk: QueueKeys,
                            job_id: str) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(checkpoints, saga, progress) of a job as stored (None = none)."""
        with_fields = [f"{kind}:{job_id}" for kind in ("c", "s", "p")]
        raw = await translate_errors(self._url, "read_runstate",
                                     self._redis.hmget(qk.runstate, with_fields))
        c, s, p = (x.encode() if isinstance(x, str) else x for x in raw)
        return c, s, p

    # -- the cluster-wide limiter ---------------------------------------------

    async def limiter_acquire(self, lk: LimiterKeys, holder: str, limit: int, lease_ms: int,
                              replace: bool) -> tuple[LimiterAcquireReply, str]:
        """(code, evicted holder): limiter_admit without a waiter."""
        answer = await self.limiter_admit(lk, holder, limit, lease_ms, replace)
        return answer.code, answer.evicted

    async def limiter_admit(self, lk: LimiterKeys, holder: str, limit: int, lease_ms: int,
                            replace: bool, waiter: str = "", waiter_ms: int = 0,
                            waiters_cap: int = 0) -> LimiterAnswer:
        """Take a slot; refused with a ``waiter`` entry (and room under
        ``waiters_cap``), that entry is registered for ``waiter_ms`` in the
        same call (code WAITING)."""
        r = await self.run("limiter_acquire", lk,
                           [holder, limit, lease_ms, "replace" if replace else "take",
                            waiter, waiter_ms, waiters_cap])
        return LimiterAnswer(LimiterAcquireReply(int(r[0])), text(r[1]),
                             [text(x) for x in r[2:]])

    async def limiter_renew(self, lk: LimiterKeys, holders: Sequence[str],
                            lease_ms: int) -> list[LimiterRenewReply]:
        return [LimiterRenewReply(int(x))
                for x in await self.run("limiter_renew", lk, [lease_ms, *holders])]

    async def limiter_release(self, lk: LimiterKeys, holders: Sequence[str]) -> int:
        """How many of the holders were removed (limiter_free without the waiters)."""
        return (await self.limiter_free(lk, holders))[0]

    async def limiter_free(self, lk: LimiterKeys,
                           holders: Sequence[str]) -> tuple[int, list[str]]:
        """Give slots back: (holders removed, the waiter entries popped, one
        per slot freed, for the caller to wake on their queues)."""
        r = await self.run("limiter_release", lk, list(holders))
        return int(r[0]), [text(x) for x in r[1:]]

    async def rate(self, rk: RateKeys, holders: Sequence[str], interval_us: int,
                   tolerance_us: int, mode: str, push_us: int = 0,
                   stale_us: int = 0, ahead: int = 0) -> RateAnswer:
        """One call of lua/rate.lua for a batch of holders of one key; mode
        take | try | refund | push | peek (no holders: one answer); ``ahead``:
        take | try may also grant up to this many starts with no holder."""
        # a refund sent again after its reply was lost would give back each
        # start twice, and the key would let one more start in than its rate;
        # a try sent again would find the start it took spent, answer DENIED,
        # and its job would be skipped within its rate. Not sent again, each
        # leaves the start spent (the safe side: the worker counts a failed
        # refund so, and a failed try as the limiter unavailable, rates.py)
        r = await self.run("rate", rk, [interval_us, tolerance_us, mode, push_us, stale_us,
                                        ahead, *holders], retry=mode not in ONCE_RATE_MODES)
        return RateAnswer([(RateReply(int(r[i])), int(r[i + 1])) for i in range(0, len(r) - 3, 2)],
                          int(r[-3]), int(r[-2]), int(r[-1]))

    # -- schedules --------------------------------------------------------------

    async def schedule_upsert(self, sk: SchedulesKeys, name: str, spec: str, next_ms: int,
                              paused: bool) -> ScheduleUpsertReply:
        return ScheduleUpsertReply(int(await self.run(
            "schedule_upsert", sk, [name, spec, next_ms, 1 if paused else 0])))

    async def schedule_list(self, sk: SchedulesKeys, max_schedules: int = 1000
                            ) -> tuple[int, list[tuple[str, str, str | None]]]:
        """(server now ms, [(name, spec JSON, state text or None)]), by name."""
        r = await self.run("schedule_list", sk, [max_schedules])
        rows = [(text(r[i]), text(r[i + 1]), None if r[i + 2] is None else text(r[i + 2]))
                for i in range(2, 2 + 3 * int(r[1]), 3)]
        return int(r[0]), rows

    async def schedule_fire(self, sk: SchedulesKeys, name: str, expected_ms: int, next_ms: int,
                            fire_ms: int, lease_ms: int,
                            taker: str) -> tuple[ScheduleFireReply, int, int]:
        """Take a fire for the scheduler ``taker`` (Scheduler.taker): (code,
        fire ms, server now ms); see schedule_fire.lua."""
        r = await self.run("schedule_fire", sk,
                           [name, expected_ms, next_ms, fire_ms, lease_ms, taker])
        return ScheduleFireReply(int(r[0])), int(r[1]), int(r[2])

    async def schedule_done(self, sk: SchedulesKeys, name: str,
                            fire_ms: int) -> ScheduleDoneReply:
        return ScheduleDoneReply(int(await self.run("schedule_done", sk, [name, fire_ms])))

    async def schedule_pause(self, sk: SchedulesKeys, name: str, paused: bool,
                             next_ms: int = 0) -> SchedulePauseReply:
        return SchedulePauseReply(int(await self.run(
            "schedule_pause", sk, [name, 1 if paused else 0, next_ms])))

    async def schedule_trigger(self, sk: SchedulesKeys,
                               name: str) -> tuple[ScheduleTriggerReply, int, str | None]:
        """(code, server now ms, the recorded spec JSON or None)."""
        r = await self.run("schedule_trigger", sk, [name])
        return ScheduleTriggerReply(int(r[0])), int(r[1]), None if r[2] is None else text(r[2])

    # -- circuit breakers ---------------------------------------------------------

    async def breaker_check(self, bk: BreakerKeys, holder: str, probe_lease_ms: int,
                            cooldown_ms: int) -> tuple[BreakerCheckReply, int]:
        """(code, wait ms): may ``holder`` pass the breaker now?"""
        r = await self.run("breaker_check", bk, [bk.name, holder, probe_lease_ms, cooldown_ms,
                                                 self.settings.events_maxlen])
        return BreakerCheckReply(int(r[0])), int(r[1])

    async def breaker_record(self, bk: BreakerKeys, holder: str, outcome: str, failures: int,
                             window_ms: int, cooldown_ms: int,
                             max_cooldown_ms: int) -> tuple[BreakerRecordReply, str]:
        """Report a passed call's outcome: failure | success | release."""
        r = await self.run("breaker_record", bk, [
            bk.name, holder, outcome, failures, window_ms, cooldown_ms, max_cooldown_ms,
            self.settings.events_maxlen])
        return BreakerRecordReply(int(r[0])), text(r[1])

    async def breaker_force(self, bk: BreakerKeys, mode: str, cooldown_ms: int,
                            who: str) -> BreakerForceReply:
        return BreakerForceReply(int(await self.run(
            "breaker_force", bk, [bk.name, mode, cooldown_ms, who,
                                  self.settings.events_maxlen])))

    async def breaker_state(self, bk: BreakerKeys,
                            window_ms: int) -> tuple[int, int, dict[str, str]]:
        """(server now ms, failures in the window, the state hash)."""
        r = await self.run("breaker_state", bk, [window_ms])
        flat = r[2]
        return int(r[0]), int(r[1]), {text(flat[i]): text(flat[i + 1])
                                      for i in range(0, len(flat), 2)}

    # -- the resource ledger ------------------------------------------------------

    async def resource_open(self, rk: ResourceKeys, owner: tuple[str, str, int], worker_id: str,
                            life: str, ttl_ms: int) -> tuple[ResourceOpenReply, list[str]]:
        """(code, details): details are the holder (queue, job, token, worker,
        life) for HELD, [wait ms] for CLOSING."""
        queue, job, token = owner
        r = await self.run("resource_open", rk, [rk.member, rk.kind, rk.key, queue, job, token,
                                                  worker_id, life, ttl_ms])
        return ResourceOpenReply(int(r[0])), [text(x) for x in r[1:]]

    async def resource_claim(self, rk: ResourceKeys, owner: tuple[str, str, int], closer: str,
                             lease_ms: int) -> tuple[ResourceClaimReply, int]:
        queue, job, token = owner
        r = await self.run("resource_claim", rk, [queue, job, token, closer, lease_ms])
        return ResourceClaimReply(int(r[0])), int(r[1])

    async def resource_clear(self, rk: ResourceKeys,
                             owner: tuple[str, str, int]) -> ResourceClearReply:
        """Drop an entry of that owner; ``rk.worker_id`` is the owner's worker."""
        queue, job, token = owner
        return ResourceClearReply(int(await self.run(
            "resource_clear", rk, [rk.member, queue, job, token])))

# -- shared with the sync client (sync_scripts.py): arguments and replies --

# claim_line.lua leases at most this many jobs a call (its HMGET takes them in
# one unpack); the claimer asks for at most claimer.MAX_BATCH, the same 100
CLAIM_LINE_MAX = 100
# after claim_line.lua sent a queue's claim to claim.lua, that queue's claims
# go to claim.lua first for this long (seconds): at most one call in vain a second
LINE_PAUSE = 1.0
_clock = time.monotonic  # LINE_PAUSE's clock (a test sets its own, not the event loop's)


def _line_args(args: list[Any]) -> list[Any]:
    """claim_line.lua's ARGV from claim.lua's (count, lease_ms, worker_id,
    promote_batch, events_maxlen, audit_all, letters_maxlen, start_now,
    claim_id): count, lease_ms, worker_id, start_now, claim_id."""
    return [args[0], args[1], args[2], args[7], args[8]]


def claim_batch(qk: QueueKeys, reply: Any) -> ClaimBatch:
    """claim.lua's reply: now, next due, count, then 11 values per job."""
    jobs = []
    queue = qk.queue
    now = int(reply[0])
    for i in range(3, 3 + 11 * int(reply[2]), 11):
        r = reply[i:i + 11]
        jobs.append(ClaimedJob(
            r[0].decode(), queue, int(r[1]), int(r[2]), r[3].decode(), r[4], int(r[5]),
            int(r[6]), int(r[7]), int(r[8]), int(r[9]), int(r[10]) == 1, now,
        ))
    return ClaimBatch(now, int(reply[1]), jobs)


# enqueue.lua's run head: count, name, delay_ms, priority, budgets, grp, payload
RUN_HEAD = len(SPECS["enqueue"].run_head)
# a NewJob's run shape (name, delay_ms, priority, max_attempts, max_infra,
# grp: what the jobs of one run share), its payload and its id
_RUN_SHAPE = itemgetter(1, 3, 4, 5, 6, 7)
_PAYLOAD, _ID = itemgetter(2), itemgetter(0)


def enqueue_args(s: StoreSettings, jobs: Sequence[NewJob],
                 ids: Sequence[str] | None = None) -> list[Any]:
    """enqueue.lua's arguments: the settings, then the jobs in runs of jobs
    alike (same name, delay, priority, budgets and park group), each run a
    head (count, those six, and the run's payload) and then, when every job
    of the run has the same payload (no payload at all: the common case), one
    id per job; else the head's payload is empty and an (id, payload) pair
    follows per job. ``ids``: the jobs' ids in order, where the sender drew
    them (Scripts.enqueue); None: each job's own. ValueError when a job
    would go with no id (``""``): no job is ever written under an empty id."""
    check_ids(jobs, ids)
    if len(jobs) > 1:
        # a batch of one run with one payload (a bulk enqueue of one kind of
        # job: the common batch) is checked and read by C loops (map, set)
        # instead of the loop below, a Python turn per job; the same values
        first = jobs[0]
        payload = first.payload
        # (a batch whose ids were drawn at the send and whose jobs are all
        # alike, the coalescer's batch of one job name with no payload, is
        # one run: one C comparison a job instead of a shape made and hashed)
        if payload and ((ids is not None and jobs.count(first) == len(jobs))
                        or (len(set(map(_RUN_SHAPE, jobs))) == 1
                            and all(map(eq, map(_PAYLOAD, jobs), repeat(payload))))):
            return [s.events_maxlen, s.audit_flag, s.wake_cap, len(jobs), *_RUN_SHAPE(first),
                    payload, *(map(_ID, jobs) if ids is None else ids)]
    return runs_args(s, jobs, ids)


def check_ids(jobs: Sequence[NewJob], ids: Sequence[str] | None) -> None:
    """ValueError unless every job goes with an id: its own (``ids`` None)
    or the one ``ids`` gives it, one per job. A job with no id (``""``)
    comes only from Producer.one(id_at_send=True), for a sender that draws
    its id: one that forgot must fail here, never write a job under an
    empty id."""
    if ids is None:
        if not all(map(_ID, jobs)):
            raise ValueError("a job with no id: its sender gives it one (ids)")
    elif len(ids) != len(jobs) or not all(ids):
        raise ValueError(f"{len(ids)} ids for {len(jobs)} jobs, or an empty one")


def runs_args(s: StoreSettings, jobs: Sequence[NewJob],
              ids: Sequence[str] | None = None) -> list[Any]:
    """enqueue_args for any batch, a run at a time (tests/test_scripts.py
    holds enqueue_args's one-run path to it); ``ids`` as there."""
    args: list[Any] = [s.events_maxlen, s.audit_flag, s.wake_cap]
    shape: tuple[str, int, int, int, int, str] | None = None
    head = 0  # where the current run's count is
    payload: bytes | None = None  # the run's payload while every job so far has it
    for j, job_id in zip(jobs, map(_ID, jobs) if ids is None else ids, strict=True):
        this = (j.name, j.delay_ms, j.priority, j.max_attempts, j.max_infra, j.grp)
        if this != shape:
            if payload:
                _share_payload(args, head, payload)
            shape, head, payload = this, len(args), j.payload
            args += [0, *this, b""]
        elif payload is not None and j.payload is not payload and j.payload != payload:
            payload = None
        args[head] += 1
        args += [job_id, j.payload]
    if payload:
        _share_payload(args, head, payload)
    return args


# a one-job call's values after its head: delay_ms, priority, max_attempts,
# max_infra, grp, payload, id (the head's count is 1 and its payload the
# job's: enqueue_args sends one job's payload in the head)
ONE_JOB_TAIL = 7
# enqueue_one.lua's after its head (wake_cap, name): max_attempts, max_infra,
# grp, payload, id
LINE_TAIL = 5
# _lib.lua's INLINE_MAX: the largest payload kept inside its job's record
# (tests/test_one_job_calls.py reads it there)
INLINE_MAX = 1024
# heads kept per client, at most, by (queue, job name, script): two for each
# of CACHED_QUEUES queues of one job name, as the other caches by queue hold
# (at 1,024, a producer with more queues than that in turn, one per tenant,
# packed a head again for nearly every call)
ONE_JOB_HEADS = 2 * CACHED_QUEUES
# the RESP bulk strings of the small ints a job's numbers mostly are
_SMALL_INTS = {v: b"$%d\r\n%d\r\n" % (len(b"%d" % v), v) for v in range(-1, 256)}
_pack: Callable[[tuple[Any, ...]], bytes] = hiredis.pack_command  # (its stub types a 1-tuple)


HeadKey = tuple[str, str, str, bool]  # (prefix, queue, job name, for enqueue_one)
Head = tuple[bytes, list[bytes]]  # (the head's bytes, the call's KEYS)
# (the call's bytes, its KEYS, the script it calls: enqueue_one or enqueue)
OneJobCall = tuple[bytes, list[bytes], str]


def _bulk_int(value: int) -> bytes:
    text = b"%d" % value
    return b"$%d\r\n%b\r\n" % (len(text), text)


class OneJobCalls:
    """A one-job enqueue's call as the bytes a lane writes: EVALSHA, the
    sha, KEYS and ARGV in RESP. The part every job of one (queue, job name)
    shares, up to the name, is packed once and kept with the call's KEYS
    (its element count already the whole call's); a call formats the job's
    own values onto it.

    A job queued now at priority 0 with a payload its record holds, and no
    audit trail (what most enqueues are), calls enqueue_one.lua: four KEYS
    and seven ARGV where enqueue.lua takes eight and twelve, and no helper
    but one (Redis's instructions a call: benchmarks/results/enqueue_one.txt).
    Any other job calls enqueue.lua, with the same bytes as hiredis packing
    ``enqueue_args(settings, [job])`` whole (tests/test_one_job_calls.py).
    With the lanes writing these bytes as they are, a one-job enqueue costs
    the client 0.52x the instructions from SyncApp and 0.71x from App
    (callgrind, benchmarks/results/one_job_calls.txt)."""

    def __init__(self, sha: str, line_sha: str) -> None:
        self._sha = sha  # enqueue.lua's
        self._line_sha = line_sha  # enqueue_one.lua's
        # (settings, the heads packed with them): replaced whole when the
        # settings change, so a thread still on the old ones fills their dict
        self._current: tuple[StoreSettings | None, dict[HeadKey, Head]] = (None, {})

    def call(self, settings: StoreSettings, qk: QueueKeys, job: NewJob,
             keys_of: Callable[[str, QueueKeys], list[bytes]],
             line: bool = True) -> OneJobCall | None:
        """(the call's bytes, its KEYS, the script it calls); None for a job
        this would not pack alike (an empty payload, which enqueue_args sends
        per job, or text UTF-8 cannot encode): the general path takes it, and
        says what is wrong. ``keys_of(script, qk)``: the call's KEYS, asked
        for when a head is packed. A NewJob's numbers are plain ints
        (Producer.prepare checks them and makes an IntEnum's value a plain
        int: a float or a bool would be formatted as an int here, where
        hiredis would refuse it). enqueue_one.lua answers CODE_EXISTED (an
        int) for an id that exists: the caller then asks enqueue.lua for the
        job's state, with ``line`` False."""
        job_id, name, payload, delay_ms, priority, attempts, infra, grp = job
        if not payload:
            return None
        heads = self._current[1]
        if self._current[0] is not settings:  # other settings (a test's): other heads
            heads = {}
            self._current = (settings, heads)
        small = _SMALL_INTS
        try:
            line = (line and delay_ms <= 0 and priority == 0 and len(payload) <= INLINE_MAX
                    and not settings.audit_all)
            kept = heads.get((qk.prefix, qk.queue, name, line))
            if kept is None:
                kept = self._head(settings, heads, qk, keys_of, name, line)
            group, ident = grp.encode(), job_id.encode()
            if line:
                packed = b"%b%b%b$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
                    kept[0], small.get(attempts) or _bulk_int(attempts),
                    small.get(infra) or _bulk_int(infra),
                    len(group), group, len(payload), payload, len(ident), ident)
                return packed, kept[1], "enqueue_one"
            return b"%b%b%b%b%b$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
                kept[0], small.get(delay_ms) or _bulk_int(delay_ms),
                small.get(priority) or _bulk_int(priority),
                small.get(attempts) or _bulk_int(attempts), small.get(infra) or _bulk_int(infra),
                len(group), group, len(payload), payload, len(ident), ident), kept[1], "enqueue"
        except (TypeError, UnicodeError, AttributeError):  # not a NewJob prepare() made
            return None

    def _head(self, s: StoreSettings, heads: dict[HeadKey, Head], qk: QueueKeys,
              keys_of: Callable[[str, QueueKeys], list[bytes]], name: str, line: bool) -> Head:
        if line:
            keys = keys_of("enqueue_one", qk)
            values: tuple[Any, ...] = ("EVALSHA", self._line_sha, len(keys), *keys,
                                       s.wake_cap, name)
            tail = LINE_TAIL
        else:
            keys = keys_of("enqueue", qk)
            values = ("EVALSHA", self._sha, len(keys), *keys,
                      s.events_maxlen, s.audit_flag, s.wake_cap, 1, name)
            tail = ONE_JOB_TAIL
        packed = _pack(values)
        # the element count of the whole call, for the header hiredis wrote
        head = b"*%d%b" % (len(values) + tail, packed[packed.index(b"\r\n"):])
        if len(heads) >= ONE_JOB_HEADS:
            heads.clear()  # a producer of ever new names: bounded, rebuilt on use
        kept = heads[(qk.prefix, qk.queue, name, line)] = (head, keys)
        return kept


def _share_payload(args: list[Any], head: int, payload: bytes) -> None:
    """The run whose head is at ``head``, the last one so far, sends its one
    payload in its head and its jobs' ids alone (never for an empty payload:
    the script reads an empty head payload as "one per job")."""
    args[head + RUN_HEAD - 1] = payload
    first = head + RUN_HEAD
    args[first:] = args[first::2]


ONCE_RATE_MODES = frozenset({"refund", "try"})  # rate.lua's modes never sent twice


def enqueue_replies(reply: Any, jobs: int) -> list[tuple[bool, str]]:
    """(created, state) for each of the call's ``jobs``; ValueError on a code
    the script does not send. A call that created every job, all in one
    state, answers that state alone."""
    if reply.__class__ is bytes:  # the common answer, decoded here (text() is a call more)
        return [(True, reply.decode())] * jobs
    if isinstance(reply, (bytes, str)):
        return [(True, text(reply))] * jobs
    out = []
    for i in range(0, len(reply), 2):
        code = int(reply[i])
        if code not in _ENQUEUE_CODES:
            EnqueueReply(code)  # raises ValueError, naming the code
        out.append((code == EnqueueReply.CREATED, text(reply[i + 1])))
    return out


_ENQUEUE_CODES = frozenset(EnqueueReply)


def queue_config_reply(qk: QueueKeys, raw: Any) -> int:
    if raw is None:
        return 0
    recorded = text(raw)
    if not recorded.isdigit() or int(recorded) < 1:
        raise ConfigError(f"{qk.config} holds shards={recorded!r}, not a shard count")
    return int(recorded)


def stats_reply(qk: QueueKeys, r: Any) -> QueueStats:
    now = int(r[0])
    oldest = int(r[6])
    next_due = int(float(r[7]))
    flat = r[8]
    counters = {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
    return QueueStats(
        queue=qk.queue, now_ms=now, ready=int(r[1]), scheduled=int(r[2]), leased=int(r[3]),
        dead=int(r[4]), retained=int(r[5]),
        oldest_ready_age_ms=None if oldest < 0 else max(0, now - oldest),
        next_due_in_ms=None if next_due < 0 else max(0, next_due - now),
        counters=counters, paused=int(r[9]) == 1,
    )

