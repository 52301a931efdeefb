"""What the async App and the sync SyncApp share as producers: checking a
job request and encoding it into a NewJob, routing it to a queue, reading a
job's record and turning an ended job into its result or error.

It never talks to Redis itself: reads are queued on a pipeline the caller
runs (sync or async), so both clients send the very same commands."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any, TypedDict, overload

from . import codec
from .errors import (
    ConfigError,
    JobCanceled,
    JobDead,
    JobNotFound,
    MalformedJob,
    Timeout,
    UnknownJob,
    UnknownQueue,
)
from .gcpause import collection_held
from .hooks import EnqueueInfo, HookSet
from .ids import ID_BYTES, job_ids_of, new_job_id, new_job_ids
from .models import EnqueuedJob, JobRecord, JobState, NewJob
from .rate import Rate
from .registry import JobDefinition, Registry
from .runtime.rates import park_group, rate_uses
from .store.keys import QueueKeys, check_job_name
from .store.record import decode_record, parse_logs, parse_progress
from .store.shards import Shards, logical

_new = tuple.__new__
_EMPTY = codec.EMPTY_ENVELOPE  # encode_envelope(None, "", "", any limit of 1 or more)
_ID, _NAME = itemgetter(0), itemgetter(1)  # a NewJob's id and name
_CREATED, _STATE = itemgetter(0), itemgetter(1)  # an enqueue reply's (created, state)
# Producer.shape(): what a request shares with every request alike, checked:
# (logical queue, its definition when it has limit keys to render from each
# payload, delay_ms, priority, max_attempts, max_infra); a plain tuple, as
# one enqueue call makes one too and unpacks it at once
Shape = tuple[str, "JobDefinition | None", int, int, int, int]
# Producer.one()'s entry for a name whose common call (a name and a payload,
# every other argument at its default) needs nothing from the payload but the
# payload itself: (logical queue, its keys, delay_ms, priority, max_attempts,
# max_infra)
Plain = tuple[str, QueueKeys, int, int, int, int]
# route(): (logical queue, definition or None, whether it has limit keys)
Route = tuple[str, "JobDefinition | None", bool]
MAX_PRIORITY = 32767
# the defaults of one enqueue call's delay and priority (App.enqueue,
# SyncApp.enqueue): a call that leaves them out (enqueue_options fills in
# these very objects) and both budgets has the default shape of its (name,
# queue), cached (Producer.default_shape)
NO_DELAY: float = 0.0
NO_PRIORITY: int = 0
ENQUEUE_CHUNK = 500
MAX_DELAY = 10 * 365 * 24 * 3600.0  # ten years: beyond that it is a bug
UNSET_BUDGET = 0  # in the job record: "the worker's definition decides"
# the most job names (or name and queue pairs) each of Producer's caches by
# name keeps: a cache that reaches it starts again empty, so a producer fed
# ever new names (a name made from a user's input) holds at most this many
# entries a cache, where an App's names are a few dozen. Emptied in place
# (clear), not replaced: a cache replaced since (a registration, new shards)
# is one nobody reads, and a thread that fills it publishes nothing stale
CACHED_NAMES = 4096
# wait blocks in slices under the socket timeout (5 s), re-checking the
# job's state after each one: a missed token (a reconnect) costs one slice
WAIT_SLICE = 2.0


@dataclass(slots=True)
class JobRequest:
    """One job for enqueue_many. ``max_attempts`` / ``max_infra_attempts`` left
    at None let the handler's definition on the worker decide; an int >= 1
    overrides it for this job."""

    name: str
    payload: dict[str, Any] | None = None
    job_id: str | None = None
    queue: str | None = None
    delay: float = 0.0
    priority: int = 0
    correlation_id: str | None = None
    request_id: str | None = None
    max_attempts: int | None = None
    max_infra_attempts: int | None = None


class EnqueueOptions(TypedDict, total=False):
    """What ``App.enqueue`` and ``SyncApp.enqueue`` take by keyword beside a
    job's name and payload (JobRequest's fields); each left out takes its
    default. One mapping, not eight keyword parameters: a call that gives
    none (the common call) is told by one test (``not options``), where
    eight parameters were eight defaults filled and eight checks a call
    (DESIGN-NOTES.md, "An enqueue's options as one mapping")."""

    job_id: str | None  # None: an id drawn here; one that exists returns its job, created=False
    queue: str | None  # None: the job's own queue (its definition's)
    delay: float  # seconds before the job may start (0.0: at once)
    priority: int  # higher starts first, -32767 to 32767 (0: the cheapest)
    correlation_id: str | None  # ties the job to others (None: the job's own id)
    request_id: str | None  # the request that asked for it, kept on the job
    max_attempts: int | None  # None: the handler's definition on the worker decides
    max_infra_attempts: int | None  # None: the handler's definition decides


ENQUEUE_OPTIONS = frozenset(EnqueueOptions.__optional_keys__)
# enqueue_options()'s answer: EnqueueOptions' values, in Producer.one's order
Options = tuple[str | None, str | None, float, int, str | None, str | None, int | None,
                int | None]


def enqueue_options(options: EnqueueOptions) -> Options:
    """The options of one enqueue call with every one left out at its
    default, in Producer.one's order (job_id, queue, delay, priority,
    correlation_id, request_id, max_attempts, max_infra_attempts); the very
    NO_DELAY and NO_PRIORITY objects for a delay and a priority left out, so
    that one() knows them. An option that is none of these raises
    TypeError naming it (App.enqueue's when its coroutine is awaited:
    CPython refused an unknown keyword parameter at the call itself)."""
    if not options.keys() <= ENQUEUE_OPTIONS:
        unknown = ", ".join(sorted(options.keys() - ENQUEUE_OPTIONS))
        raise TypeError(f"enqueue() got unexpected keyword argument(s): {unknown} "
                        f"(it takes {', '.join(sorted(ENQUEUE_OPTIONS))})")
    return (options.get("job_id"), options.get("queue"), options.get("delay", NO_DELAY),
            options.get("priority", NO_PRIORITY), options.get("correlation_id"),
            options.get("request_id"), options.get("max_attempts"),
            options.get("max_infra_attempts"))


class Producer:
    """Request checks, payload encoding and routing for one prefix: the part
    of enqueue that is the same for every client."""

    def __init__(self, registry: Registry, shards: Shards, max_payload_bytes: int,
                 hooks: HookSet | None = None) -> None:
        self.registry = registry
        self._shards = shards
        self.max_payload_bytes = max_payload_bytes
        self.hooks = hooks if hooks is not None else HookSet()
        self._queue_rates: dict[str, Rate] = {}
        self._names_ok: set[str] = set()  # job names already checked
        # default_shape's answers by name, or by (name, queue) when a queue is
        # given, with the registry's version they were made at: one attribute,
        # read once a call and replaced whole, so that no thread can pair one
        # version with another version's answers
        self._shapes: tuple[int, dict[str | tuple[str, str], Shape]] = (registry.version, {})
        # one()'s entries of the common call by name (Plain, None: not plain),
        # made from default_shape's and dropped with them (the same reasons)
        self._plains: tuple[int, dict[str, Plain | None]] = (registry.version, {})
        # common()'s answers of the commonest call, no payload and the id drawn
        # at the send, by name: one job a name, made once (the same reasons).
        # Public: App.enqueue reads it inline, as common() does, before it
        # calls common() (a Python call less a job of its commonest call)
        self.empty_jobs: tuple[int, dict[str, tuple[str, QueueKeys, NewJob]]] = (
            registry.version, {})

    @property
    def shards(self) -> Shards:
        """The routing of sharded queues; setting it (the dashboard, from the
        counts recorded in Redis) drops the cached shapes."""
        return self._shards

    @shards.setter
    def shards(self, shards: Shards) -> None:
        self._shards = shards
        self._drop_cached()

    @property
    def queue_rates(self) -> dict[str, Rate]:
        """A rate per logical queue (App(queue_rates=...)): its key is checked
        too. Set once by the App; setting it drops the cached shapes."""
        return self._queue_rates

    @queue_rates.setter
    def queue_rates(self, rates: dict[str, Rate]) -> None:
        self._queue_rates = rates
        self._drop_cached()

    def _drop_cached(self) -> None:
        """Drop default_shape's and one()'s cached answers: what they were
        made from changed (the shards, the queues' rates)."""
        self._shapes = (self.registry.version, {})
        self._plains = (self.registry.version, {})
        self.empty_jobs = (self.registry.version, {})

    def route(self, name: str, queue: str | None) -> Route:
        """Where a job of ``name`` goes (``queue`` when given): (logical queue,
        its definition or None, whether it has limit keys to render from
        each payload). UnknownJob as queue_for; ConfigError for a name that
        is not a str (checked first: one that cannot be hashed, a list, would
        raise TypeError from the registry's lookup)."""
        if name.__class__ is not str:
            check_job_name(name)
        definition = self.registry.find(name)
        logical_queue = self.queue_for(name, queue, definition.queue if definition else None)
        limited = definition is not None and has_limit_keys(definition, self.queue_rates)
        return logical_queue, definition, limited

    def default_shape(self, name: str, queue: str | None) -> Shape:
        """shape() of a request that leaves delay, priority and both budgets
        at their defaults, cached per (name, queue): the checks (0.61 us)
        become a dict lookup. The cache is replaced by an empty one when the
        registry gains a job (a name's route can change: a producer-only
        App's default queue, a definition's limit keys), or when shards or
        queue_rates are set; a thread that computed a shape before the change
        stores it in the cache it started with, which nobody reads again. A
        name or queue that is not a plain str is never cached (shape()
        decides, as for any other call)."""
        version, shapes = self._shapes
        if version != self.registry.version:
            version, shapes = self._shapes = (self.registry.version, {})
        if name.__class__ is not str or not (queue is None or queue.__class__ is str):
            return self.shape(JobRequest(name, None, None, queue))
        key = name if queue is None else (name, queue)
        known = shapes.get(key)
        if known is None:
            known = self.shape(JobRequest(name, None, None, queue))
            if len(shapes) >= CACHED_NAMES:  # ever new names: start again
                shapes.clear()
            shapes[key] = known
        return known

    def one(self, name: str, payload: dict[str, Any] | None, job_id: str | None,
            queue: str | None, delay: float, priority: int, correlation_id: str | None,
            request_id: str | None, max_attempts: int | None, max_infra: int | None,
            infos: list[EnqueueInfo] | None,
            id_at_send: bool = False) -> tuple[str, QueueKeys, NewJob]:
        """prepare() and keys_for() of one enqueue call's arguments
        (App.enqueue, SyncApp.enqueue) without a JobRequest: (logical queue,
        the keys of the queue that takes the job, the job). A call that leaves
        delay, priority (the very NO_DELAY, NO_PRIORITY objects) and both
        budgets at their defaults takes its shape from default_shape's cache;
        the common call, which gives a name and a payload and leaves every
        other argument at its default (no hook asks for it either), takes
        its queue, keys and shape from one entry by name (_plain), where the
        name's jobs need nothing more (no limit keys rendered from the
        payload, no shard chosen by the job's id): one lookup for what
        default_shape, make and keys_for find in three layers.

        ``id_at_send`` (App.enqueue, whose coalescer draws a batch's ids in
        one read as it sends them): that common call's job has no id yet
        (``""``, which no caller may give: make() refuses it), and the
        sender must give it one. Every other call's job has its id."""
        if (delay is NO_DELAY and priority is NO_PRIORITY and max_attempts is None
                and max_infra is None):
            if (job_id is None and queue is None and correlation_id is None
                    and request_id is None and infos is None):
                common = self.common(name, payload, id_at_send)
                if common is not None:
                    return common
            shape = self.default_shape(name, queue)
        else:
            shape = self.shape(JobRequest(name, None, None, queue, delay, priority, None, None,
                                          max_attempts, max_infra))
        logical_queue, job = self.make(name, payload, job_id, correlation_id, request_id, shape,
                                       infos, "", delay)
        return logical_queue, self._shards.keys_for(logical_queue, job.id), job

    def common(self, name: str, payload: dict[str, Any] | None,
               id_at_send: bool) -> tuple[str, QueueKeys, NewJob] | None:
        """one()'s common call (a name and a payload, every other argument
        at its default, no hook asking for it) where the name's jobs need
        nothing more (_plain): (logical queue, keys, job), the job with no
        id (``""``) when ``id_at_send`` (its sender must draw one: the
        coalescer); None: the call takes one()'s longer way. App.enqueue
        calls it first, before its own arguments are gathered for one(): no
        payload is the stored envelope of every such job
        (codec.EMPTY_ENVELOPE, the bytes encode_envelope gives it under any
        size limit of a byte or more; under a limit below that, which App
        refuses, encode_envelope raises), so only a payload is encoded.

        The commonest call, no payload and its id drawn at the send (App's
        common call with no payload), is answered from a cache by name: its
        job has nothing of its own (no id, no payload, a tuple nobody can
        change), so one made once serves every call, dropped with _plain's
        entries (the same reasons)."""
        if payload is None and id_at_send and name.__class__ is str:
            version, empties = self.empty_jobs
            if version == self.registry.version:
                answer = empties.get(name)
                if answer is not None:
                    return answer
        known = self._plain(name)
        if known is None:
            return None
        logical_queue, keys, delay_ms, prio, attempts, infra = known
        if payload is None and self.max_payload_bytes > 0:
            if id_at_send:
                return self._empty(name, known)
            envelope = _EMPTY
        else:
            envelope = codec.encode_envelope(payload, "", "", self.max_payload_bytes)
        return logical_queue, keys, _new(NewJob, (
            "" if id_at_send else new_job_id(), name, envelope, delay_ms, prio, attempts,
            infra, ""))

    def _empty(self, name: str, known: Plain) -> tuple[str, QueueKeys, NewJob]:
        """common()'s answer for ``name``'s call with no payload and its id
        drawn at the send, made and cached under the registry's version (a
        thread that made it before a change stores it in the cache it
        started with, which nobody reads again)."""
        version, empties = self.empty_jobs
        if version != self.registry.version:
            version, empties = self.empty_jobs = (self.registry.version, {})
        logical_queue, keys, delay_ms, prio, attempts, infra = known
        if len(empties) >= CACHED_NAMES:  # ever new names: start again
            empties.clear()
        answer = empties[name] = (logical_queue, keys, _new(NewJob, (
            "", name, _EMPTY, delay_ms, prio, attempts, infra, "")))
        return answer

    def _plain(self, name: str) -> Plain | None:
        """one()'s entry for ``name`` (None: its calls take the longer way):
        made once from default_shape's, so a name that cannot be enqueued
        raises its typed error here as there, and is never cached."""
        version, plains = self._plains
        if version != self.registry.version:
            version, plains = self._plains = (self.registry.version, {})
        if name.__class__ is not str:  # (never cached: default_shape decides, as for any call)
            return None
        known = plains.get(name)
        if known is None and name not in plains:
            queue, keyed, delay_ms, priority, attempts, infra = self.default_shape(name, None)
            if keyed is None and self._shards.count(queue) == 1:
                known = (queue, self._shards.keys(queue), delay_ms, priority, attempts, infra)
            if len(plains) >= CACHED_NAMES:  # ever new names: start again
                plains.clear()
            plains[name] = known
        return known

    def shape(self, r: JobRequest,
              routes: dict[tuple[str, str | None], Route] | None = None) -> Shape:
        """What a request shares with every request alike (name, queue,
        priority, delay, budgets), checked: a typed error (ConfigError,
        UnknownJob) before anything is written. ``routes``: route()'s answers
        of a batch so far, by (name, queue), filled as it goes (a name or
        queue that is not a plain str never: route() raises its typed error,
        where one that cannot be hashed would raise TypeError here)."""
        if routes is None or r.name.__class__ is not str or not (
                r.queue is None or r.queue.__class__ is str):
            queue, definition, limited = self.route(r.name, r.queue)
        else:
            key = (r.name, r.queue)
            known = routes.get(key)
            if known is None:
                known = routes[key] = self.route(r.name, r.queue)
            queue, definition, limited = known
        if not (isinstance(r.priority, int) and not isinstance(r.priority, bool)
                and -MAX_PRIORITY <= r.priority <= MAX_PRIORITY):
            raise ConfigError(f"priority must be an int within ±{MAX_PRIORITY}, "
                              f"got {r.priority!r}")
        if not (isinstance(r.delay, (int, float)) and 0 <= r.delay < MAX_DELAY):
            raise ConfigError(f"delay must be a number of seconds in [0, {MAX_DELAY}), "
                              f"got {r.delay!r}")
        # the handler's definition decides the budgets (on the worker that runs
        # it): the record holds only what the caller asked for, 0 = unset
        max_attempts = (UNSET_BUDGET if r.max_attempts is None
                        else budget("max_attempts", r.max_attempts))
        max_infra = (UNSET_BUDGET if r.max_infra_attempts is None
                     else budget("max_infra_attempts", r.max_infra_attempts))
        if r.name not in self._names_ok:
            checked = check_job_name(r.name)
            if len(self._names_ok) >= CACHED_NAMES:
                self._names_ok.clear()
            self._names_ok.add(checked)
        # plain ints (an IntEnum's value): every path sends the number alike
        priority = r.priority if r.priority.__class__ is int else int(r.priority)
        return (queue, definition if limited else None, int(r.delay * 1000), priority,
                max_attempts, max_infra)

    def prepare(self, r: JobRequest, infos: list[EnqueueInfo] | None = None,
                fresh_id: str = "", shape: Shape | None = None) -> tuple[str, NewJob]:
        """(logical queue, the job ready for the enqueue script); raises a
        typed error (ConfigError, UnknownJob, PayloadError) before anything
        is written. With ``infos`` (the hooks want enqueues), each job's
        EnqueueInfo is appended after before_enqueue saw it. A payload
        whose limit keys cannot be rendered is refused here (LimitKeyError)
        when the job is known, for App, SyncApp and enqueue_many alike.
        ``fresh_id``: the id of a job the request gives none (new_job_id()
        when ''). ``shape``: shape(r), when the caller has it already."""
        return self.make(r.name, r.payload, r.job_id, r.correlation_id, r.request_id,
                         self.shape(r) if shape is None else shape, infos, fresh_id, r.delay)

    def make(self, name: str, payload: dict[str, Any] | None, job_id: str | None,
             correlation_id: str | None, request_id: str | None, shape: Shape,
             infos: list[EnqueueInfo] | None, fresh_id: str = "",
             delay: float = 0.0) -> tuple[str, NewJob]:
        """prepare()'s work once the request's shape is checked: its limit
        keys, its id, the hooks and its envelope (``delay``, in seconds, is
        for the hooks' EnqueueInfo)."""
        queue, keyed, delay_ms, priority, max_attempts, max_infra = shape
        grp = (check_limit_keys(keyed, queue, self._queue_rates, payload or {})
               if keyed is not None else "")
        if job_id is None:
            job_id = fresh_id or new_job_id()
        elif not isinstance(job_id, str) or not job_id or len(job_id) > 512:
            raise ConfigError("job_id must be a str of 1-512 characters")
        headers = None
        if infos is not None:  # hooks see the job and may add headers (a trace context)
            info = EnqueueInfo(name, queue, job_id, correlation_id or job_id,
                               request_id or "", delay)
            self.hooks.before_enqueue(info)
            infos.append(info)
            headers = {str(k): str(v) for k, v in info.headers.items()} or None
        # the job's own id as its correlation id is stored as '' (codec.encode_envelope)
        corr = correlation_id or ""
        envelope = codec.encode_envelope(payload, "" if corr == job_id else corr,
                                         request_id or "", self.max_payload_bytes,
                                         headers=headers)
        # tuple.__new__ directly, in NewJob's field order (id, name, payload,
        # delay_ms, priority, max_attempts, max_infra, grp): the named tuple's
        # own __new__ is a Python function around it, a frame per job
        return queue, _new(NewJob, (job_id, name, envelope, delay_ms, priority,
                                    max_attempts, max_infra, grp))

    def prepare_many(self, requests: Iterable[JobRequest],
                     infos: list[EnqueueInfo] | None = None) -> list[tuple[str, NewJob]]:
        """prepare() for each request of a batch, with automatic garbage
        collection held off meanwhile (gcpause: the batch's jobs all stay
        alive, and collecting while they pile up walked the whole process).
        A request whose shape fields are the very objects of the request
        before it (a batch built in a loop: the same name, the same defaults)
        shares that request's checked Shape instead of checking them again:
        the same objects pass or fail the same checks."""
        batch = list(requests)
        # the fresh ids from one read of os.urandom: a read per job cost 0.34 us
        # of a job's ~3.6 us of client CPU in a bulk enqueue, one read 0.09
        fresh = new_job_ids(len(batch))
        prepare, shape_of = self.prepare, self.shape
        routes: dict[tuple[str, str | None], Route] = {}
        out: list[tuple[str, NewJob]] = []
        add = out.append
        last: JobRequest | None = None
        # a request of the plain kind (no payload, id, correlation or request
        # id; no limit keys, no hooks) is what prepare() would make of it,
        # built here without the call: its run's shape, a fresh id and the
        # empty envelope (whose kwargs, {}, fit any payload limit)
        plain, empty = False, codec.EMPTY_ENVELOPE
        shape: Shape = ("", None, 0, 0, 0, 0)
        queue, _, delay_ms, priority, max_attempts, max_infra = shape
        with collection_held():
            for r, job_id in zip(batch, fresh, strict=True):
                if (last is None or r.name is not last.name or r.queue is not last.queue
                        or r.priority is not last.priority or r.delay is not last.delay
                        or r.max_attempts is not last.max_attempts
                        or r.max_infra_attempts is not last.max_infra_attempts):
                    shape = shape_of(r, routes)
                    queue, keyed, delay_ms, priority, max_attempts, max_infra = shape
                    plain = keyed is None and infos is None
                last = r
                if (plain and r.payload is None and r.job_id is None
                        and not r.correlation_id and not r.request_id):
                    add((queue, _new(NewJob, (job_id, r.name, empty, delay_ms, priority,
                                              max_attempts, max_infra, ""))))
                else:
                    add(prepare(r, infos, job_id, shape))
        return out

    def plain_batch(self, batch: list[JobRequest],
                    infos: list[EnqueueInfo] | None) -> PlainBatch | None:
        """A batch whose every request is of the plain kind prepare_many
        builds without a call (no payload, id, correlation or request id;
        no limit keys, no hooks) with the very shape objects of the first
        request, for one queue that is not sharded: its jobs as a
        PlainBatch, made a call's worth at a time when the call is sent.
        None for any other batch (prepare_many takes it). The first
        request's shape is checked here (a typed error, as prepare_many's);
        the others are its objects, so they pass the same checks."""
        if infos is not None or not batch:
            return None
        first = batch[0]
        shape = self.shape(first)
        queue, keyed = shape[0], shape[1]
        if keyed is not None or self.shards.count(queue) != 1:
            return None
        name, target, priority, delay = first.name, first.queue, first.priority, first.delay
        attempts, infra = first.max_attempts, first.max_infra_attempts
        for r in batch:  # a pass of identity checks: 0.07 us a request, building 0.43
            if not (r.name is name and r.queue is target and r.priority is priority
                    and r.delay is delay and r.max_attempts is attempts
                    and r.max_infra_attempts is infra and r.payload is None
                    and r.job_id is None and not r.correlation_id and not r.request_id):
                return None
        return PlainBatch(len(batch), name, shape)

    def queue_for(self, name: str, queue: str | None, defined: str | None) -> str:
        """The logical queue of a job: ``queue`` when given, else its
        definition's (``defined``), else the default queue of a producer-only
        App; UnknownJob for a name an App with handlers does not know."""
        if queue is not None:
            return self.shards.keys(queue).queue
        if defined is not None:
            return defined
        if self.registry.empty:
            # a producer-only App: every job goes to the default queue
            return self.registry.defaults.queue
        raise UnknownJob(
            f"no job is registered under the name {name!r}; register it, or pass queue= "
            "to enqueue a job that another service handles"
        )

    def keys_for(self, queue: str, job_id: str) -> QueueKeys:
        """The keys of the shard of ``queue`` that holds ``job_id``."""
        return self._shards.keys_for(queue, job_id)

    def group(self, prepared: list[tuple[str, NewJob]]) -> dict[str, list[int]]:
        """Indexes of a prepared batch by physical queue (chunks() cuts
        each list into script calls)."""
        queues = {queue for queue, _ in prepared}
        if len(queues) == 1:
            (queue,) = queues
            if self.shards.count(queue) == 1:  # one queue, not sharded: all of it, in order
                return {queue: list(range(len(prepared)))}
        by_queue: dict[str, list[int]] = {}
        for index, (queue, job) in enumerate(prepared):
            by_queue.setdefault(self.shards.route(queue, job.id), []).append(index)
        return by_queue

    def answer(self, answers: list[EnqueuedJob | None], jobs: Sequence[NewJob], physical: str,
               chunk: Sequence[int], replies: list[tuple[bool, str]],
               requests: Sequence[JobRequest] | None) -> None:
        """Fill ``answers`` at ``chunk`` (a prepared batch's indexes, in
        order) for one enqueue call's ``jobs`` and their replies.
        ``requests``: the batch's, by the same indexes, whose job ids say
        which ids were drawn here (None: every one, a plain batch); a job
        whose id was drawn here and answers 'existed' was created
        (drawn_created)."""
        if not len(jobs) == len(replies) == len(chunk):
            raise RuntimeError(f"enqueue answered {len(replies)} replies for {len(jobs)} jobs")
        if not all(map(_CREATED, replies)):  # (a C loop: the common batch is all created)
            replies = [(drawn_created(created, None if requests is None else requests[i].job_id),
                        state) for i, (created, state) in zip(chunk, replies, strict=True)]
        queue = logical(physical)
        # made by C loops (map, zip) and tuple.__new__: the named tuple's own
        # __new__ is a Python function around it, and a Python turn per job
        # was a fifth of a bulk enqueue's client work (benchmarks/bulk_stages.py)
        made = map(_new, repeat(EnqueuedJob), zip(
            map(_ID, jobs), repeat(queue), map(_NAME, jobs), map(_CREATED, replies),
            map(_STATE, replies)))
        if chunk and chunk[-1] - chunk[0] + 1 == len(chunk):  # one span (one queue, unsharded)
            answers[chunk[0]:chunk[-1] + 1] = made
        else:
            for i, answer in zip(chunk, made, strict=True):
                answers[i] = answer

    def queues_to_search(self, queue: str | None) -> list[str]:
        """The logical queues a job id is looked for in."""
        if queue is not None:
            return [queue]
        return sorted({self.registry.defaults.queue, *self.registry.queues()})


def drawn_created(created: bool, job_id: str | None) -> bool:
    """An enqueue's ``created`` as its caller is told it: a job whose id was
    drawn here (the call gave none) and answers 'existed' was created, by
    this call's own first run, whose reply was lost: the lane sent the call
    again, and the second run found the id (a drawn id exists nowhere else:
    112 random bits, ids.new_job_id). A given id that exists answers
    ``created=False``, as ever."""
    return created or job_id is None


class PlainBatch(Sequence[list[NewJob]]):
    """The jobs of a plain batch (Producer.plain_batch) as the lists of its
    enqueue calls (ENQUEUE_CHUNK jobs each), each list made when it is
    first read: Lane.run_many reads the next call's while Redis runs the
    one before, so making the jobs rides behind Redis's work instead of
    coming before the first write, as prepare_many's must (0.43 us a job
    of its 0.64). The jobs are what prepare_many makes of such requests:
    a fresh id each (one os.urandom read for the batch), the name, the
    empty envelope and the shape's numbers."""

    def __init__(self, size: int, name: str, shape: Shape) -> None:
        self.size = size
        self.queue = shape[0]
        self._name = name
        _, _, self._delay_ms, self._priority, self._attempts, self._infra = shape
        self._raw = os.urandom(ID_BYTES * size)  # the batch's ids' bytes
        self._calls: dict[int, list[NewJob]] = {}

    def __len__(self) -> int:
        return (self.size + ENQUEUE_CHUNK - 1) // ENQUEUE_CHUNK

    def forget(self, k: int) -> None:
        """Drop call ``k``'s jobs once it is answered: freed then, they are
        not promoted to the collector's oldest generation, where every
        object promoted counts towards a full collection (read again, they
        are made again, the same: ids come from the batch's bytes by index)."""
        self._calls.pop(k, None)

    def span(self, k: int) -> range:
        """The batch's indexes of call ``k``."""
        return range(k * ENQUEUE_CHUNK, min(self.size, (k + 1) * ENQUEUE_CHUNK))

    @overload
    def __getitem__(self, k: int) -> list[NewJob]: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[list[NewJob]]: ...

    def __getitem__(self, k: int | slice) -> list[NewJob] | Sequence[list[NewJob]]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        jobs = self._calls.get(k)
        if jobs is None:
            span = self.span(k)
            ids = job_ids_of(self._raw[span.start * ID_BYTES:span.stop * ID_BYTES])
            # C loops (map, zip, repeat): a Python turn per job was most of it
            jobs = self._calls[k] = list(map(_new, repeat(NewJob), zip(
                ids, repeat(self._name), repeat(codec.EMPTY_ENVELOPE), repeat(self._delay_ms),
                repeat(self._priority), repeat(self._attempts), repeat(self._infra),
                repeat(""))))
        return jobs


def check_limit_keys(d: JobDefinition, queue: str, queue_rates: dict[str, Rate],
                     payload: dict[str, Any]) -> str:
    """A payload its limit keys cannot be rendered from is refused at enqueue
    (LimitKeyError naming the template, nothing written), when the producer
    knows the job; a worker dead-letters it (bad-limit-key) otherwise.
    Returns the job's park group (its rate key a claim may park it by, see
    lua/claim.lua; "" when it has no rate)."""
    if not has_limit_keys(d, queue_rates):
        return ""  # the common case: no limit key to render
    if d.concurrency_key is not None:
        d.concurrency_key.render(payload)
    return park_group(rate_uses(d, queue, queue_rates, payload))


def has_limit_keys(d: JobDefinition, queue_rates: dict[str, Rate]) -> bool:
    """Whether a job of ``d`` has limit keys to render from its payload (a
    rate, a concurrency key, or rates on queues)."""
    return bool(d.rate or d.concurrency_key is not None or queue_rates)


def budget(what: str, given: int | None) -> int:
    """An explicit budget of an enqueue call, or UNSET_BUDGET."""
    if given is None:
        return UNSET_BUDGET
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ConfigError(f"{what} must be an int >= 1, got {given!r}")
    return int(given)  # a plain int (an IntEnum's value)


def chunks(indexes: list[int]) -> list[list[int]]:
    return [indexes[i:i + ENQUEUE_CHUNK] for i in range(0, len(indexes), ENQUEUE_CHUNK)]


def queue_job_reads(pipe: Any, qk: QueueKeys, job_id: str) -> None:
    """Queue the seven reads of one job on a pipeline (sync or async alike);
    decode_job decodes their replies."""
    pipe.hget(qk.jobs, job_id)
    pipe.zscore(qk.leases, job_id)
    pipe.hget(qk.payloads, job_id)
    pipe.hget(qk.errors, job_id)
    pipe.hget(qk.results, job_id)
    pipe.hget(qk.logs, job_id)
    pipe.hmget(qk.runstate, [f"c:{job_id}", f"s:{job_id}", f"p:{job_id}"])


def decode_job(job_id: str, queue: str, replies: list[Any]) -> JobRecord | None:
    """The JobRecord from the replies of queue_job_reads (None: no such job)."""
    raw, lease, envelope, error, result, logs, state = replies
    record = decode_record(job_id, queue, raw, lease, envelope, error)
    if record is not None:
        record.result = codec.decode_result(result, job_id)
        record.logs = parse_logs(logs)
        checkpoints = codec.decode_state(state[0], job_id)
        record.checkpoints = checkpoints if isinstance(checkpoints, dict) else {}
        saga = codec.decode_state(state[1], job_id)
        record.saga = saga if isinstance(saga, dict) else None
        record.progress = parse_progress(state[2])
    return record


def not_found(job_id: str, queues: list[str]) -> JobNotFound:
    return JobNotFound(f"no job {job_id!r} in queue(s) {', '.join(queues)}")


class WaitClock:
    """The timing of one wait (App.wait, SyncApp.wait): blocks of at most
    WAIT_SLICE up to the deadline, each registered for a second longer, and
    the pause after a lost connection (doubling from 50 ms to 1 s)."""

    def __init__(self, job_id: str, timeout: float | None) -> None:
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise ConfigError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        self.job_id, self.timeout = job_id, timeout
        self.deadline = float("inf") if timeout is None else time.monotonic() + timeout
        self.remaining = 0.0
        self.backoff = 0.05

    def block(self) -> float:
        """The next block's length (0 once the time is up)."""
        self.remaining = self.deadline - time.monotonic()
        return min(WAIT_SLICE, max(0.0, self.remaining))

    @staticmethod
    def ttl_ms(block: float) -> int:
        """How long the watch registration of a block holds."""
        return int((block + 1.0) * 1000)

    def check_expired(self) -> None:
        """Timeout once the job has not ended by the deadline."""
        if self.remaining <= 0:
            raise Timeout(self.job_id, self.timeout or 0.0)
        self.backoff = 0.05  # a round went through

    def pause(self) -> float | None:
        """After a lost connection: how long to wait before the next round,
        or None when the time is up (the caller re-raises)."""
        if time.monotonic() >= self.deadline:
            return None
        pause = min(self.backoff, max(0.0, self.deadline - time.monotonic()))
        self.backoff = min(self.backoff * 2, 1.0)
        return pause


def watched_ended(state: str, job_id: str, queue: str) -> bool:
    """The watch script's answer: True once the job has ended; raises
    JobNotFound / MalformedJob for a job that is gone or unreadable."""
    if state == "missing":
        raise JobNotFound(f"job {job_id!r} of queue {queue} is gone (its retention ran "
                          "out, or it kept no record)")
    if state == "malformed":
        raise MalformedJob(f"job {job_id} in queue {queue}: record is malformed")
    return JobState(state).terminal


def result_of(record: JobRecord) -> Any:
    """An ended job's result, or JobDead / JobCanceled."""
    if record.state == JobState.DEAD:
        raise JobDead(record.id, record.state, record.reason, record.error)
    if record.state == JobState.CANCELED:
        raise JobCanceled(record.id, record.state, record.reason, record.error)
    return record.result


def shard_mismatch(queue: str, recorded: int, configured: int, prefix: str) -> ConfigError:
    """The error of a process whose shard count disagrees with Redis's."""
    return ConfigError(
        f"queue {queue!r} is recorded in Redis with {recorded} shard(s), but this "
        f"process is configured with {configured} (App(queue_shards=...)): its "
        f"jobs would be stranded. Configure {recorded}, or drain the queue and "
        f"change the count with `leasequeue queues reshard {queue} {configured} "
        f"--url ... --prefix {prefix}` (App.reshard)."
    )


def unknown_queue(queue: str, prefix: str) -> UnknownQueue:
    return UnknownQueue(
        f"queue {queue!r} does not exist under prefix {prefix!r}: no handler uses it and "
        "Redis holds nothing for it (check the name and the prefix; `leasequeue stats` "
        "lists the queues that exist)")
