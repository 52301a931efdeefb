"""Builds every Redis key leasequeue uses; no key string is written anywhere else.

Every key of one queue shares the hash tag ``{prefix:queue}`` so each script
touches one slot and runs unchanged on Redis Cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

# Letters, digits and a few separators. Braces would break the hash tag,
# whitespace and ':' would make key layouts ambiguous.
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
_PREFIX = re.compile(r"[A-Za-z0-9_.\-:]{1,100}")

# job names and worker ids are stored in the '|'-joined job record
_TOKEN = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")

DEFAULT_PREFIX = "lq"

# queues one client keeps state for, at most, per kind of state (their keys
# built and encoded, their shard counts checked, their enqueue lanes): an App
# given ever new queue names (one per tenant, say) drops what it holds and
# builds it again on use, where it would grow without end
CACHED_QUEUES = 4096


MAX_LIMIT_KEY = 128  # most characters of a rendered limit key (rate or concurrency_key)
_LIMIT_KEY = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_LIMIT_KEY}}}")


def check_limit_key(key: str) -> str:
    """A limit key rendered from a payload: 1-MAX_LIMIT_KEY characters from
    A-Z a-z 0-9 _ . : - (it becomes part of a Redis key and its hash tag)."""
    if not isinstance(key, str) or not _LIMIT_KEY.fullmatch(key):
        raise ConfigError(f"invalid limit key {key!r}: use 1-{MAX_LIMIT_KEY} characters "
                          "from A-Z a-z 0-9 _ . : - (map other values with a key function)")
    return key


def check_job_name(name: str) -> str:
    """Return ``name`` or raise ConfigError (job names are stored in the job record)."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise ConfigError(
            f"invalid job name {name!r}: use 1-200 characters from A-Z a-z 0-9 _ . : -"
        )
    return name


def is_worker_id(text: object) -> bool:
    """Whether ``text`` is a worker id: 1-200 of A-Z a-z 0-9 _ . : -"""
    return isinstance(text, str) and _TOKEN.fullmatch(text) is not None


def check_worker_id(worker_id: str) -> str:
    if not is_worker_id(worker_id):
        raise ConfigError(
            f"invalid worker id {worker_id!r}: use 1-200 characters from A-Z a-z 0-9 _ . : -"
        )
    return worker_id


def check_queue_name(name: str) -> str:
    """Return ``name`` or raise ConfigError when it would break the key layout."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid queue name {name!r}: use 1-100 characters from A-Z a-z 0-9 _ . -"
        )
    return name


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` or raise ConfigError when it would break the key layout."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"invalid key prefix {prefix!r}: use 1-100 characters from A-Z a-z 0-9 _ . - :"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue, all under the hash tag ``{prefix:queue}``."""

    prefix: str
    queue: str

    @property
    def tag(self) -> str:
        return "{" + f"{self.prefix}:{self.queue}" + "}"

    def _key(self, part: str) -> str:
        return f"{self.tag}:{part}"

    @property
    def ready(self) -> str:
        """Queued ids of a priority other than 0, and of priority 0 put back at
        their place (ZSET by priority, then sequence number)."""
        return self._key("ready")

    @property
    def line(self) -> str:
        """Queued ids of priority 0, in claim order (LIST; lua/_lib.lua,
        LINE_FLOOR, says how a claim merges it with ``ready``)."""
        return self._key("line")

    @property
    def scheduled(self) -> str:
        return self._key("scheduled")

    @property
    def leases(self) -> str:
        return self._key("leases")

    @property
    def jobs(self) -> str:
        return self._key("jobs")

    @property
    def payloads(self) -> str:
        return self._key("payloads")

    @property
    def errors(self) -> str:
        return self._key("errors")

    @property
    def results(self) -> str:
        return self._key("results")

    @property
    def done(self) -> str:
        return self._key("done")

    @property
    def dead(self) -> str:
        return self._key("dead")

    @property
    def deadletters(self) -> str:
        return self._key("deadletters")

    @property
    def events(self) -> str:
        return self._key("events")

    @property
    def wake(self) -> str:
        return self._key("wake")

    @property
    def stats(self) -> str:
        return self._key("stats")

    @property
    def token(self) -> str:
        """The fencing token counter (STRING)."""
        return self._key("token")

    @property
    def config(self) -> str:
        """Settings recorded for a logical queue (its shard count), read by
        every process that uses the queue."""
        return self._key("config")

    @property
    def paused(self) -> str:
        """Set while the queue is paused (STRING); the claim script leases
        nothing while it exists."""
        return self._key("paused")

    @property
    def logs(self) -> str:
        """id -> the captured logs of a job's last runs (HASH), deleted with
        the record (forget in lua/_lib.lua)."""
        return self._key("logs")

    @property
    def waiting(self) -> str:
        """Job ids someone waits for (ZSET id -> registered until, ms): the
        finishing scripts push a token on ``notify(id)`` for these only."""
        return self._key("waiting")

    @property
    def runstate(self) -> str:
        """What a job's runs leave for its next attempt (HASH, three fields per
        job: ``c:<id>`` checkpoints, ``s:<id>`` saga steps, ``p:<id>``
        progress), written fenced by runstate.lua, deleted with the record
        (forget in lua/_lib.lua)."""
        return self._key("runstate")

    @property
    def woken(self) -> str:
        """Wake-pending marks (ZSET ``<id>:<token>`` -> when marked, ms): a
        run waiting for a keyed slot that was woken (lua/wake.lua) while
        still leased; release.lua consumes its mark and puts the job in line
        at once. Expires a minute after the last mark."""
        return self._key("woken")

    @property
    def parked(self) -> str:
        """Parked rate groups (HASH group -> ``next_us|interval_us``): a rate
        key a worker found over its rate (release.lua), and when its next start
        is expected; lua/claim.lua schedules the group's queued jobs one
        interval apart instead of leasing them. Expires a minute after the
        furthest expected start."""
        return self._key("parked")

    def notify(self, job_id: str) -> str:
        """The LIST a finished job's waiters block on. lua/_lib.lua `signal`
        builds the same name (``waiting .. ':' .. id``): a batched ack cannot
        declare one key per waiter, and both share the queue's hash tag."""
        return f"{self.waiting}:{job_id}"

    def wake_own(self, worker_id: str) -> str:
        """One worker's own wake LIST on this queue: its idle BLPOP spans this
        and ``wake``, so the worker can end its own wait (a stop) without
        waking another worker."""
        return self._key(f"wake:{check_worker_id(worker_id)}")

    def claim(self, worker_id: str) -> str:
        """One worker's last claim on this queue (STRING, expires with the lease):
        its claim id and the (id, token) it leased, so a retried claim is idempotent."""
        return self._key(f"claim:{check_worker_id(worker_id)}")

    def all(self) -> list[str]:
        """Every fixed key of the queue (for tests and for slot checks); the
        per-worker claim keys are not listed."""
        return [
            self.ready, self.line, self.scheduled, self.leases, self.jobs, self.payloads,
            self.errors, self.results, self.done, self.dead, self.deadletters, self.events,
            self.wake, self.stats, self.token, self.config, self.paused, self.logs,
            self.waiting, self.runstate, self.woken, self.parked,
        ]


def queue_keys(prefix: str, queue: str) -> QueueKeys:
    return QueueKeys(check_prefix(prefix), check_queue_name(queue))


def limiter_key(limiter_prefix: str, name: str) -> str:
    """The ZSET of one cluster-wide limit; its own slot, shared by every service
    configured with the same ``limiter_prefix``."""
    check_prefix(limiter_prefix)
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise ConfigError(
            f"invalid limit name {name!r}: use 1-200 characters from A-Z a-z 0-9 _ . : -"
        )
    return "{" + f"{limiter_prefix}:{name}" + "}"


@dataclass(frozen=True, slots=True)
class LimiterKeys:
    """The keys of a limit, under one hash tag: ``limit`` (ZSET holder -> lease
    expiry), ``evicted`` (ZSET holder evicted by `replace` -> when the
    marker lapses) and ``waiters`` (ZSET waiter entry -> its fallback
    instant: runs of a keyed limit waiting for a slot, woken by the release
    of one; only keyed limits write it)."""

    limit: str
    evicted: str
    waiters: str


def limit_keys(limiter_prefix: str, name: str) -> LimiterKeys:
    limit = limiter_key(limiter_prefix, name)
    return LimiterKeys(limit, f"{limit}:evicted", f"{limit}:waiters")


@dataclass(frozen=True, slots=True)
class RateKeys:
    """The keys of one rate limit key (lua/rate.lua), under one hash tag:
    ``state`` (HASH tat, shift) and ``reserved`` (ZSET holder -> reserved
    instant). Both expire when the key goes idle."""

    state: str
    reserved: str


def rate_keys(limiter_prefix: str, name: str, key: str | None = None) -> RateKeys:
    """``{limiter_prefix:rate.<name>}`` or, for a keyed limit,
    ``{limiter_prefix:rate.<name>:<key>}``: services with the same limiter
    prefix share the budget of each (name, key)."""
    state = limiter_key(limiter_prefix, f"rate.{name}" if key is None else f"rate.{name}:{key}")
    return RateKeys(state, f"{state}:reserved")


def keyed_limit_name(key: str) -> str:
    """The concurrency limit of one rendered ``concurrency_key`` (shared by
    every job type whose key renders the same)."""
    return f"key.{key}"


def default_limiter_prefix(prefix: str) -> str:
    return f"{prefix}:limiter"


@dataclass(frozen=True, slots=True)
class SchedulesKeys:
    """The schedules of a prefix, under one hash tag ``{prefix}`` (a queue's
    tag is ``{prefix:queue}``, so they never share a key):
    ``specs`` (HASH name -> spec JSON) and ``state`` (HASH name ->
    ``next_ms|paused|pending_ms|pending_until_ms[|taker]``)."""

    prefix: str

    @property
    def specs(self) -> str:
        return "{" + self.prefix + "}:schedules:specs"

    @property
    def state(self) -> str:
        return "{" + self.prefix + "}:schedules:state"

    def all(self) -> list[str]:
        return [self.specs, self.state]


def schedules_keys(prefix: str) -> SchedulesKeys:
    return SchedulesKeys(check_prefix(prefix))


def queues_key(prefix: str) -> str:
    """The SET of every logical queue used under a prefix (added once per
    process and queue, by App.verify_queues): how `leasequeue stats` and
    App.queues() find the queues without scanning the keyspace. Same hash tag
    as the schedules, ``{prefix}``."""
    return "{" + check_prefix(prefix) + "}:queues"


def instance_key(prefix: str) -> str:
    """A marker key an embedded (memory://) store writes, to tell processes apart."""
    return f"{check_prefix(prefix)}:instance"


def check_breaker_name(name: str) -> str:
    """Return ``name`` or raise ConfigError (breaker names go into key names)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid breaker name {name!r}: use 1-100 characters from A-Z a-z 0-9 _ . -"
        )
    return name


@dataclass(frozen=True, slots=True)
class BreakerKeys:
    """The keys of one circuit breaker. Every breaker of a limiter prefix
    shares the hash tag ``{limiter_prefix:breakers}``, so one script can also
    write the shared ``index`` (SET of names, for listing) and ``events``
    (STREAM of transitions): ``state`` (HASH) and ``failures`` (ZSET failure
    id -> instant ms) are the breaker's own."""

    limiter_prefix: str
    name: str

    @property
    def tag(self) -> str:
        return "{" + f"{self.limiter_prefix}:breakers" + "}"

    @property
    def state(self) -> str:
        return f"{self.tag}:{self.name}:state"

    @property
    def failures(self) -> str:
        return f"{self.tag}:{self.name}:failures"

    @property
    def index(self) -> str:
        return f"{self.tag}:index"

    @property
    def events(self) -> str:
        return f"{self.tag}:events"


def breaker_keys(limiter_prefix: str, name: str) -> BreakerKeys:
    return BreakerKeys(check_prefix(limiter_prefix), check_breaker_name(name))


def check_resource_kind(kind: str) -> str:
    if not isinstance(kind, str) or not _NAME.fullmatch(kind):
        raise ConfigError(
            f"invalid resource kind {kind!r}: use 1-100 characters from A-Z a-z 0-9 _ . -"
        )
    return kind


def check_resource_key(key: str) -> str:
    if not isinstance(key, str) or not key or len(key) > 512 or "\n" in key:
        raise ConfigError(f"invalid resource key {key!r}: a str of 1-512 characters, no newline")
    return key


@dataclass(frozen=True, slots=True)
class ResourceKeys:
    """The resource ledger of an App prefix, under the hash tag
    ``{prefix:resources}``: one HASH per open resource (``entry``), a ZSET of
    entries by when their TTL runs out (``expiry``, member ``kind:key``) and a
    SET of entries per worker id (``worker``). The per-resource and per-worker
    keys are built here and passed to the scripts in KEYS."""

    prefix: str
    kind: str = ""
    key: str = ""
    worker_id: str = ""

    @property
    def tag(self) -> str:
        return "{" + f"{self.prefix}:resources" + "}"

    @property
    def member(self) -> str:
        return f"{self.kind}:{self.key}"

    @property
    def entry(self) -> str:
        return f"{self.tag}:r:{self.member}"

    @property
    def expiry(self) -> str:
        return f"{self.tag}:expiry"

    @property
    def worker(self) -> str:
        return f"{self.tag}:worker:{check_worker_id(self.worker_id)}"


def resource_keys(prefix: str, kind: str = "", key: str = "", worker_id: str = "") -> ResourceKeys:
    if kind:
        check_resource_kind(kind)
        check_resource_key(key)
    return ResourceKeys(check_prefix(prefix), kind, key, worker_id)
