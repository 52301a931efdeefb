"""Job definitions and the registry that maps a job name to its handler and
effective settings. Pure data: no Redis, no running of handlers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from .backoff import Backoff, exponential
from .errors import ConfigError, UnknownJob
from .store.keys import check_job_name, check_queue_name


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
    on_conflict: str  # enqueue | skip | replace
    slot_backoff: float


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
            "slot_backoff": self.slot_backoff,
        }


class Registry:
    def __init__(self, defaults: Defaults) -> None:
        self.defaults = defaults
        self._jobs: dict[str, JobDefinition] = {}

    def register(self, fn: Callable[..., Any], **options: Unpack[JobOptions]) -> JobDefinition:
        d = self.defaults
        o = options
        timeout = o.get("timeout", "default")
        max_concurrent = o.get("max_concurrent")
        job_name = check_job_name(o.get("name") or fn.__name__)
        if job_name in self._jobs:
            raise ConfigError(f"job {job_name!r} is registered twice")
        definition = JobDefinition(
            name=job_name, fn=fn, queue=check_queue_name(o.get("queue") or d.queue),
            max_attempts=_positive("max_attempts", o.get("max_attempts") or d.max_attempts),
            max_infra_attempts=_positive(
                "max_infra_attempts", o.get("max_infra_attempts") or d.max_infra_attempts),
            backoff=o.get("backoff") or d.backoff,
            infra_backoff=o.get("infra_backoff") or d.infra_backoff,
            timeout=d.timeout if timeout == "default" else _timeout(timeout),
            stop_grace=float(o.get("stop_grace", d.stop_grace)),
            retention=float(o.get("retention", d.retention)),
            is_async=inspect.iscoroutinefunction(fn),
            max_concurrent=None if max_concurrent is None else _positive(
                "max_concurrent", max_concurrent),
            on_conflict=_conflict(o.get("on_conflict") or d.on_conflict),
            slot_backoff=float(o.get("slot_backoff", d.slot_backoff)),
        )
        self._jobs[job_name] = definition
        return definition

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


def _positive(what: str, value: int) -> int:
    if value < 1:
        raise ConfigError(f"{what} must be >= 1, got {value}")
    return int(value)


def _timeout(value: float | str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) or value <= 0:
        raise ConfigError(f"timeout must be a positive number of seconds or None, got {value!r}")
    return float(value)


CONFLICT_POLICIES = ("enqueue", "skip", "replace")


def _conflict(policy: str) -> str:
    if policy not in CONFLICT_POLICIES:
        raise ConfigError(f"on_conflict must be one of {CONFLICT_POLICIES}, got {policy!r}")
    return policy
