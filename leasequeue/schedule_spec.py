"""Schedule specs: validation, the JSON text recorded in Redis, and the fire
arithmetic (cron in a time zone, or an interval) over server-clock instants.

Pure functions and data: no Redis here, and never the client clock — every
instant is an epoch ms the caller read from the server."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigError
from .store.keys import check_job_name, check_queue_name, is_worker_id

MIN_EVERY_MS = 1000  # an interval under 1 s is a busy loop, not a schedule
MAX_JITTER_S = 3600.0
SPEC_VERSION = 1


class Misfire(StrEnum):
    """What a schedule does when more than one of its fires is due at once
    (its workers were down for a whole period or more)."""

    SKIP = "skip"  # drop every missed fire; the next one comes on time
    ONCE = "once"  # one catch-up fire (the latest missed instant), never a burst


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a schedule does; its JSON text is the record in Redis, compared
    as text by schedule_upsert (a changed spec updates the record)."""

    name: str
    job: str
    queue: str
    cron: str | None
    tz: str
    every_ms: int | None
    payload: dict[str, Any] | None
    misfire: Misfire
    jitter_ms: int

    def to_json(self) -> str:
        fields = asdict(self)
        del fields["name"]  # the hash field
        fields["misfire"] = str(self.misfire)
        fields["v"] = SPEC_VERSION
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, name: str, raw: str) -> ScheduleSpec:
        """Decode a recorded spec; ConfigError naming the problem when it was
        edited into something that is not a schedule."""
        try:
            f = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"schedule {name!r}: the recorded spec is not JSON ({exc})") from None
        if not isinstance(f, dict) or f.get("v") != SPEC_VERSION:
            raise ConfigError(f"schedule {name!r}: the recorded spec is not a version "
                              f"{SPEC_VERSION} schedule: {raw[:200]!r}")
        every = f.get("every_ms")
        return make_spec(
            name, f.get("job"), cron=f.get("cron"), tz=f.get("tz", "UTC"),
            every=None if every is None else _ms_to_delta(name, every),
            payload=f.get("payload"), queue=f.get("queue"), misfire=f.get("misfire"),
            jitter=_number(f.get("jitter_ms", 0)) / 1000)

    # -- fire arithmetic (epoch ms of the server clock) ----------------------

    def next_after(self, ms: int) -> int:
        """The first fire strictly after ``ms``."""
        if self.every_ms is not None:
            return (ms // self.every_ms + 1) * self.every_ms
        assert self.cron is not None
        return _to_ms(next(CronSim(self.cron, self._at(ms))))

    def latest_at_or_before(self, ms: int) -> int:
        """The last fire at or before ``ms``."""
        if self.every_ms is not None:
            return ms // self.every_ms * self.every_ms
        assert self.cron is not None
        # cronsim's reverse gives the first fire strictly before: start 1 ms later
        return _to_ms(next(CronSim(self.cron, self._at(ms + 1), reverse=True)))

    def describe(self) -> str:
        if self.every_ms is not None:
            return f"every {self.every_ms / 1000:g}s"
        return f"cron {self.cron!r} {self.tz}"

    def _at(self, ms: int) -> datetime:
        # cronsim works at minute granularity: sub-second parts are dropped
        # (cron fires are on whole minutes, so nothing is lost)
        return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(ZoneInfo(self.tz))


@dataclass(frozen=True, slots=True)
class Decision:
    """What the scheduler does with a due schedule: fire ``fire_ms`` (0: no
    fire, the missed fires are skipped) and move its next fire to ``next_ms``."""

    fire_ms: int
    next_ms: int
    missed: bool


def decide(spec: ScheduleSpec, due_ms: int, now_ms: int) -> Decision:
    """A schedule due at ``due_ms`` (<= now_ms). One due fire fires, however
    late; more than one due fire is a misfire: skip them all, or fire once
    (the latest). The next fire is the first strictly after now."""
    following = spec.next_after(due_ms)
    if following > now_ms:
        return Decision(due_ms, following, missed=False)
    next_ms = spec.next_after(now_ms)
    if spec.misfire is Misfire.ONCE:
        return Decision(max(due_ms, spec.latest_at_or_before(now_ms)), next_ms, missed=True)
    return Decision(0, next_ms, missed=True)


def fire_job_id(name: str, fire_ms: int) -> str:
    return f"schedule:{name}:{fire_ms}"


def manual_job_id(name: str, at_ms: int) -> str:
    """'run now': its own id, never equal to a regular fire's."""
    return f"schedule:{name}:manual:{at_ms}"


def jitter_delay(spec: ScheduleSpec, fire_ms: int) -> float:
    """Seconds the fire's job waits (scheduled on the server clock): the same
    on every replica for one fire, spread over [0, jitter) across fires."""
    if spec.jitter_ms <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{spec.name}:{fire_ms}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return fraction * spec.jitter_ms / 1000


def make_spec(name: Any, job: Any, *, cron: Any = None, tz: Any = "UTC", every: Any = None,
              payload: Any = None, queue: Any = None, misfire: Any = "skip",
              jitter: Any = 0.0) -> ScheduleSpec:
    """Check every argument of a schedule (ConfigError naming the problem)."""
    check_job_name(name)
    where = f"schedule {name!r}"
    if not isinstance(job, str):
        raise ConfigError(f"{where}: job must be a job name (str), got {job!r}")
    check_job_name(job)
    if (cron is None) == (every is None):
        raise ConfigError(f"{where}: give exactly one of cron= and every=")
    every_ms = None
    if every is not None:
        if not isinstance(every, timedelta):
            raise ConfigError(f"{where}: every must be a datetime.timedelta, got {every!r}")
        every_ms = round(every.total_seconds() * 1000)
        if every_ms < MIN_EVERY_MS:
            raise ConfigError(f"{where}: every={every!r} is under the floor of "
                              f"{MIN_EVERY_MS / 1000:g} s")
    zone = _zone(where, tz)
    if cron is not None:
        _check_cron(where, cron, zone)
    if misfire not in tuple(Misfire):
        raise ConfigError(f"{where}: misfire must be one of "
                          f"{', '.join(m.value for m in Misfire)}, got {misfire!r}")
    j = _number(jitter)
    if not (0 <= j <= MAX_JITTER_S):
        raise ConfigError(f"{where}: jitter must be a number of seconds in [0, {MAX_JITTER_S:g}],"
                          f" got {jitter!r}")
    if payload is not None:
        if not isinstance(payload, dict):
            raise ConfigError(f"{where}: payload must be a dict, got {type(payload).__name__}")
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: payload must be JSON-serializable ({exc})") from None
    return ScheduleSpec(
        name=name, job=job, queue=check_queue_name(queue),
        cron=cron, tz=zone.key, every_ms=every_ms, payload=payload,
        misfire=Misfire(misfire), jitter_ms=round(j * 1000))


def _zone(where: str, tz: Any) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ConfigError(f"{where}: tz must be an IANA time zone name, got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}: unknown time zone {tz!r} (an IANA name such as "
                          "'Europe/Berlin'; install tzdata where the system has none)") from None


def _check_cron(where: str, cron: Any, zone: ZoneInfo) -> None:
    if not isinstance(cron, str):
        raise ConfigError(f"{where}: cron must be a str, got {cron!r}")
    try:
        next(CronSim(cron, datetime.now(zone)))  # validates; the instant is irrelevant
    except (CronSimError, StopIteration) as exc:
        raise ConfigError(f"{where}: cron expression {cron!r} does not parse: {exc}") from None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


def _ms_to_delta(name: str, value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"schedule {name!r}: every_ms must be an int, got {value!r}")
    return timedelta(milliseconds=value)


def _to_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule as recorded in Redis; ``problem`` names what is wrong with a
    record edited into nonsense ('' when it is well-formed)."""

    name: str
    spec: ScheduleSpec | None
    next_ms: int | None
    paused: bool
    pending_ms: int
    pending_until_ms: int
    problem: str
    raw_spec: str
    raw_state: str | None
    # the scheduler that took the pending fire (its worker's id and a nonce,
    # Scheduler.taker; '' = none, or a state written before takers were)
    pending_taker: str = ""

    def describe(self, now_ms: int) -> dict[str, Any]:
        """For the boot log and the CLI."""
        out: dict[str, Any] = {"schedule": self.name}
        if self.spec is not None:
            out.update(job=self.spec.job, queue=self.spec.queue, spec=self.spec.describe(),
                       misfire=str(self.spec.misfire), jitter_s=self.spec.jitter_ms / 1000)
        if self.next_ms is not None:
            out["next_fire"] = format_ms(self.next_ms, self.spec.tz if self.spec else "UTC")
            out["next_fire_ms"] = self.next_ms
            out["next_fire_in_s"] = round((self.next_ms - now_ms) / 1000, 3)
        out["paused"] = self.paused
        if self.pending_ms:
            out["pending_fire_ms"] = self.pending_ms
            if self.pending_taker:
                out["pending_fire_taker"] = self.pending_taker
        if self.problem:
            out["problem"] = self.problem
        return out


def parse_record(name: str, raw_spec: str, raw_state: str | None) -> ScheduleRecord:
    spec: ScheduleSpec | None = None
    problem = ""
    try:
        spec = ScheduleSpec.from_json(name, raw_spec)
    except ConfigError as exc:
        problem = str(exc)
    # the fifth field, while a fire is pending: the scheduler that took it
    parts = (raw_state or "").split("|", 4)
    numbers, taker = parts[:4], parts[4] if len(parts) == 5 else ""
    if (len(numbers) == 4 and all(p.isdigit() for p in numbers) and numbers[1] in ("0", "1")
            and (len(parts) == 4 or is_worker_id(taker))):
        next_ms, paused, pending, until = (int(p) for p in numbers)
        return ScheduleRecord(name, spec, next_ms, paused == 1, pending, until, problem,
                              raw_spec, raw_state, taker)
    problem = problem or f"schedule {name!r}: the recorded state {raw_state!r} is not " \
                         "next_ms|paused|pending_ms|pending_until_ms[|taker]"
    return ScheduleRecord(name, spec, None, False, 0, 0, problem, raw_spec, raw_state)


def format_ms(ms: int, tz: str = "UTC") -> str:
    """An instant as ISO 8601 in a time zone (for people; never parsed back)."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(zone).isoformat(
        timespec="milliseconds")
