"""Job definitions and the registry that maps a job name to its handler and
effective settings. Pure data: no Redis, no running of handlers."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from .backoff import Backoff, exponential
from .errors import ConfigError, UnknownJob
from .rate import LimitKey, Rate, check_rates
from .runlog import DEFAULT_BYTES, DEFAULT_LINES, MAX_BYTES, RunLogs
from .store.keys import check_job_name, check_queue_name

if TYPE_CHECKING:
    from .breaker import Breaker


@dataclass(frozen=True, slots=True)
class Defaults:
    """App-wide defaults a job definition falls back on."""

    queue: str = "default"
    max_attempts: int = 3
    max_infra_attempts: int = 10
    backoff: Backoff = field(default_factory=lambda: exponential(1.0, 300.0, jitter=True))
    infra_backoff: Backoff = field(default_factory=lambda: exponential(1.0, 60.0, jitter=True))
    timeout: float | None = 600.0
    stop_grace: float = 30.0
    retention: float = 24 * 3600.0
    on_conflict: str = "enqueue"
    slot_backoff: float = 2.0
    run_logs: str = "errors"  # none | errors | all: which runs keep their ctx.log lines
    run_log_lines: int = DEFAULT_LINES  # most lines kept per run
    run_log_bytes: int = DEFAULT_BYTES  # most bytes kept per run (at most 64 KiB)


class JobOptions(TypedDict, total=False):
    """What ``@app.job(...)`` accepts; anything left out takes the App's Defaults."""

    name: str
    queue: str
    max_attempts: int
    max_infra_attempts: int
    backoff: Backoff
    infra_backoff: Backoff
    timeout: float | None  # None: no timeout
    stop_grace: float
    retention: float
    max_concurrent: int
    concurrency_key: str | Callable[..., str]  # max_concurrent per key, e.g. "order:{order_id}"
    rate: Rate | list[Rate]  # rate limits: lq.Rate(100, per=1.0, key="stripe:{account_id}")
    on_conflict: str  # enqueue | skip | replace
    slot_backoff: float
    run_logs: str  # none | errors | all
    run_log_lines: int
    run_log_bytes: int
    breakers: Sequence[Breaker]  # circuit breakers the job needs (leasequeue/breaker.py)


@dataclass(frozen=True, slots=True)
class JobDefinition:
    name: str
    fn: Callable[..., Any]
    queue: str
    max_attempts: int
    max_infra_attempts: int
    backoff: Backoff
    infra_backoff: Backoff
    timeout: float | None
    stop_grace: float
    retention: float
    is_async: bool
    max_concurrent: int | None = None
    on_conflict: str = "enqueue"  # enqueue | skip | replace
    slot_backoff: float = 2.0
    run_logs: str = "errors"  # none | errors | all
    run_log_lines: int = DEFAULT_LINES
    run_log_bytes: int = DEFAULT_BYTES
    breakers: tuple[Breaker, ...] = ()
    concurrency_key: LimitKey | None = None
    rate: tuple[Rate, ...] = ()

    @property
    def retention_ms(self) -> int:
        return int(self.retention * 1000)

    def describe(self) -> dict[str, Any]:
        """The effective settings, for the boot log."""
        return {
            "job": self.name, "queue": self.queue, "max_attempts": self.max_attempts,
            "max_infra_attempts": self.max_infra_attempts, "backoff": repr(self.backoff),
            "infra_backoff": repr(self.infra_backoff), "timeout": self.timeout,
            "stop_grace": self.stop_grace, "retention": self.retention,
            "kind": "async" if self.is_async else "sync (thread)",
            "max_concurrent": self.max_concurrent, "on_conflict": self.on_conflict,
            "slot_backoff": self.slot_backoff, "run_logs": self.run_logs,
            "run_log_lines": self.run_log_lines, "run_log_bytes": self.run_log_bytes,
            "breakers": [b.name for b in self.breakers],
            "concurrency_key": (None if self.concurrency_key is None
                                else self.concurrency_key.text),
            "rate_limits": [r.describe() for r in self.rate],
        }


class Registry:
    def __init__(self, defaults: Defaults) -> None:
        _checked("Defaults", {f.name: getattr(defaults, f.name) for f in fields(defaults)})
        self.defaults = defaults
        self._jobs: dict[str, JobDefinition] = {}
        self.named_rates: dict[str, Rate] = {}  # named rate limits, one set of numbers each
        #: counts the jobs registered: what a producer cached of a name's
        #: route (Producer.default_shape) holds while it stays the same
        self.version = 0

    def register(self, fn: Callable[..., Any], **options: Unpack[JobOptions]) -> JobDefinition:
        """Check every option (ConfigError naming the option and the value) and
        add the definition; what is left out takes the Defaults."""
        unknown = sorted(set(options) - set(CHECKS))
        if unknown:
            raise ConfigError(f"unknown job option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(CHECKS))}")
        if not callable(fn):
            raise ConfigError(f"a job handler must be callable, got {fn!r}")
        d = self.defaults
        given: dict[str, Any] = {
            **{f.name: getattr(d, f.name) for f in fields(d)},
            "name": getattr(fn, "__name__", None), "max_concurrent": None, "breakers": (),
            **options,
        }
        where = f"job {given['name']!r}"
        v = _checked(where, given)
        if v["name"] in self._jobs:
            raise ConfigError(f"job {v['name']!r} is registered twice")
        definition = JobDefinition(fn=fn, is_async=inspect.iscoroutinefunction(fn), **v)
        self._check_limit_keys(definition, where)
        for rate in definition.rate:
            if rate.name is not None:
                self.named_rates[rate.name] = rate
        self._jobs[definition.name] = definition
        self.version += 1
        return definition

    def _check_limit_keys(self, d: JobDefinition, where: str) -> None:
        """Rate and concurrency keys must be renderable from what the
        handler takes; named rates keep one set of numbers."""
        if d.concurrency_key is not None and d.max_concurrent is None:
            raise ConfigError(f"{where}: concurrency_key needs max_concurrent (how many runs "
                              "per key at once)")
        for rate in d.rate:
            if rate.name is None:
                continue
            known = self.named_rates.get(rate.name)
            if known is not None and not known.same_numbers(rate):
                raise ConfigError(f"{where}: rate limit {rate.name!r} is declared as "
                                  f"{known.describe()} elsewhere, here as {rate.describe()}")
        try:
            params = inspect.signature(d.fn).parameters.values()
        except (TypeError, ValueError):
            return
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return  # takes any field
        accepted = {p.name for p in params if p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        keys = [r.limit_key for r in d.rate] + [d.concurrency_key]
        for key in keys:
            missing = [] if key is None else [f for f in key.fields if f not in accepted]
            if key is not None and missing:
                raise ConfigError(f"{where}: limit key template {key.text!r} names "
                                  f"{', '.join(missing)}, which the handler does not take")

    def get(self, name: str) -> JobDefinition:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJob(f"no job is registered under the name {name!r}") from None

    def find(self, name: str) -> JobDefinition | None:
        return self._jobs.get(name)

    @property
    def empty(self) -> bool:
        return not self._jobs

    def all(self) -> list[JobDefinition]:
        return list(self._jobs.values())

    def queues(self) -> list[str]:
        return sorted({d.queue for d in self._jobs.values()})


# -- option checks: each takes (option, value) and returns the value to keep --


def _count(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{option} must be an int >= 1, got {value!r}")
    return value


def _optional_count(option: str, value: Any) -> int | None:
    return None if value is None else _count(option, value)


def _seconds(option: str, value: Any, positive: bool) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0 or (positive and value == 0)):
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{option} must be a finite number of seconds {bound}, got {value!r}")
    return float(value)


def _grace(option: str, value: Any) -> float:
    return _seconds(option, value, positive=False)


def _pause(option: str, value: Any) -> float:
    # 0 would put a run whose slot is busy straight back in line: a hot loop
    return _seconds(option, value, positive=True)


def _timeout(option: str, value: Any) -> float | None:
    return None if value is None else _seconds(option, value, positive=True)


def _policy(option: str, value: Any) -> Backoff:
    if not callable(value):
        raise ConfigError(f"{option} must be callable (attempt -> seconds), e.g. "
                          f"lq.exponential(1, 300), got {value!r}")
    policy: Backoff = value
    return policy


def _name(option: str, value: Any) -> str:
    return check_job_name(value)


def _queue(option: str, value: Any) -> str:
    return check_queue_name(value)


CONFLICT_POLICIES = ("enqueue", "skip", "replace")


def _limit_key(option: str, value: Any) -> LimitKey | None:
    return None if value is None else LimitKey.of(option, value)


def _conflict(option: str, value: Any) -> str:
    if value not in CONFLICT_POLICIES:
        raise ConfigError(f"{option} must be one of {CONFLICT_POLICIES}, got {value!r}")
    return str(value)


def _run_logs(option: str, value: Any) -> str:
    policies = tuple(p.value for p in RunLogs)
    if value not in policies:
        raise ConfigError(f"{option} must be one of {policies}, got {value!r}")
    return str(value)


def _log_bytes(option: str, value: Any) -> int:
    n = _count(option, value)
    if n > MAX_BYTES:
        raise ConfigError(f"{option} must be at most {MAX_BYTES}, got {value!r}")
    return n


def _breakers(option: str, value: Any) -> tuple[Breaker, ...]:
    from .breaker import Breaker  # the breaker module imports the runtime, which imports this

    if isinstance(value, Breaker) or not isinstance(value, list | tuple) or not all(
            isinstance(b, Breaker) for b in value):
        raise ConfigError(f"{option} must be a list of lq.Breaker, got {value!r}")
    names = [b.name for b in value]
    if len(set(names)) != len(names):
        raise ConfigError(f"{option} lists a breaker twice: {names}")
    return tuple(value)


CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "name": _name, "queue": _queue, "max_attempts": _count, "max_infra_attempts": _count,
    "backoff": _policy, "infra_backoff": _policy, "timeout": _timeout, "stop_grace": _grace,
    "retention": _grace, "max_concurrent": _optional_count, "on_conflict": _conflict,
    "slot_backoff": _pause, "run_logs": _run_logs, "run_log_lines": _count,
    "run_log_bytes": _log_bytes, "breakers": _breakers, "concurrency_key": _limit_key,
    "rate": check_rates,
}


def _checked(where: str, values: dict[str, Any]) -> dict[str, Any]:
    checked = {}
    for option, value in values.items():
        try:
            checked[option] = CHECKS[option](option, value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return checked
