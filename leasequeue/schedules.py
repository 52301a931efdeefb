"""The schedules of an App: declared in code, recorded in Redis (so every
service and the CLI see the same ones), paused, resumed and triggered there.

It checks declarations and calls the schedule scripts; the firing loop is
runtime/scheduler.py. Every instant comes from the server clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigError
from .log import get_log
from .models import EnqueuedJob
from .registry import Registry
from .schedule_spec import (
    ScheduleRecord,
    ScheduleSpec,
    make_spec,
    manual_job_id,
    parse_record,
)
from .store.keys import SchedulesKeys
from .store.scripts import Scripts
from .store.specs import (
    SchedulePauseReply,
    ScheduleTriggerReply,
    ScheduleUpsertReply,
)

# (job name, payload, job id, queue, delay seconds) -> the enqueued job
Enqueue = Callable[[str, dict[str, Any] | None, str, str, float], Awaitable[EnqueuedJob]]


@dataclass(frozen=True, slots=True)
class Declared:
    spec: ScheduleSpec
    paused: bool


class Schedules:
    """Declared schedules and the operator calls on recorded ones."""

    def __init__(self, scripts: Scripts, keys: SchedulesKeys, registry: Registry,
                 enqueue: Enqueue) -> None:
        self.scripts = scripts
        self.keys = keys
        self._registry = registry
        self.enqueue = enqueue  # how a fire's job is enqueued (the App's enqueue)
        self.declared: dict[str, Declared] = {}
        self._log = get_log("schedules")

    def declare(self, name: str, job: str, *, cron: str | None = None, tz: str = "UTC",
                every: timedelta | None = None, payload: dict[str, Any] | None = None,
                queue: str | None = None, misfire: str = "skip", jitter: float = 0.0,
                paused: bool = False) -> ScheduleSpec:
        """Check a schedule (ConfigError naming the problem; nothing is
        written) and keep it for record()."""
        if isinstance(name, str) and name in self.declared:
            raise ConfigError(f"schedule {name!r} is declared twice")
        if not isinstance(paused, bool):
            raise ConfigError(f"schedule {name!r}: paused must be a bool, got {paused!r}")
        spec = make_spec(name, job, cron=cron, tz=tz, every=every, payload=payload,
                         queue=self._queue_for(name, job, queue), misfire=misfire,
                         jitter=jitter)
        self.declared[spec.name] = Declared(spec, paused)
        return spec

    def _queue_for(self, name: str, job: Any, queue: str | None) -> str:
        if queue is not None:
            return queue  # a job another service handles, like enqueue(queue=...)
        definition = self._registry.find(job) if isinstance(job, str) else None
        if definition is not None:
            return definition.queue
        if self._registry.empty:  # a producer-only App: the default queue
            return self._registry.defaults.queue
        raise ConfigError(
            f"schedule {name!r} names the job {job!r}, which is not registered on this App; "
            "register it first, or pass queue= for a job that another service handles")

    # -- Redis ----------------------------------------------------------------

    async def record(self) -> tuple[int, list[ScheduleRecord]]:
        """Write the declared schedules to Redis (a changed spec updates its
        record, keeping its paused flag); returns (server now ms, every
        recorded schedule)."""
        if self.declared:
            now, _ = await self.scripts.schedule_list(self.keys, 0)
            for d in self.declared.values():
                code = await self.scripts.schedule_upsert(
                    self.keys, d.spec.name, d.spec.to_json(), d.spec.next_after(now), d.paused)
                if code is not ScheduleUpsertReply.UNCHANGED:
                    self._log.info(f"schedule {code.name.lower()}", schedule=d.spec.name,
                                   spec=d.spec.describe())
        return await self.list()

    async def list(self) -> tuple[int, list[ScheduleRecord]]:
        """(server now ms, every recorded schedule by name)."""
        now, rows = await self.scripts.schedule_list(self.keys)
        return now, [parse_record(*row) for row in rows]

    async def get(self, name: str) -> tuple[int, ScheduleRecord]:
        now, records = await self.list()
        for rec in records:
            if rec.name == name:
                return now, rec
        raise ConfigError(f"no schedule {name!r} is recorded under prefix {self.keys.prefix!r}"
                          f" (recorded: {', '.join(r.name for r in records) or 'none'})")

    async def pause(self, name: str) -> bool:
        """Pause a schedule; False when it was paused already."""
        await self.get(name)
        code = await self.scripts.schedule_pause(self.keys, name, True)
        self._refused(name, code)
        return code is SchedulePauseReply.CHANGED

    async def resume(self, name: str) -> bool:
        """Resume a schedule: its next fire is the first one after now (the
        fires it missed while paused are not caught up). False when it was not
        paused."""
        now, rec = await self.get(name)
        if rec.spec is None:
            raise ConfigError(rec.problem)
        code = await self.scripts.schedule_pause(self.keys, name, False, rec.spec.next_after(now))
        self._refused(name, code)
        return code is SchedulePauseReply.CHANGED

    async def trigger(self, name: str) -> EnqueuedJob:
        """Run now: enqueue the schedule's job under its own id
        ``schedule:<name>:manual:<server ms>``; the regular fires go on."""
        code, now, raw = await self.scripts.schedule_trigger(self.keys, name)
        if code is ScheduleTriggerReply.MISSING or raw is None:
            await self.get(name)  # raises, naming the recorded ones
            raise ConfigError(f"no schedule {name!r} is recorded")
        spec = ScheduleSpec.from_json(name, raw)
        return await self.enqueue(spec.job, spec.payload, manual_job_id(name, now), spec.queue,
                                   0.0)

    def _refused(self, name: str, code: SchedulePauseReply) -> None:
        if code is SchedulePauseReply.MISSING:
            raise ConfigError(f"no schedule {name!r} is recorded")
        if code is SchedulePauseReply.MALFORMED:
            raise ConfigError(f"schedule {name!r}: its recorded state is malformed; redeclare "
                              "it (a worker's boot rewrites it)")
