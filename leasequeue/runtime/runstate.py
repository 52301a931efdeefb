"""What a run leaves for its job's next attempt — checkpoints, a saga record
and progress — written fenced by the run's token (runstate.lua) and loaded
on first use, never with the claim: a job that never uses them costs
nothing. Progress is coalesced here: at most one write per run per
``progress_interval``, and the last value always lands (when the interval is
up, and before the run settles). A write Redis refuses means the lease is
gone: the run is lost (the run table stops it) and the handler gets LeaseLost."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import codec
from ..errors import ConfigError, LeaseLost, RedisUnavailable, ScriptError, StateTooLarge
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.record import ERROR_US, clean_log_text
from ..store.scripts import Scripts
from ..store.specs import RunStateReply
from .runs import Phase, RunRecord, RunTable, StopReason

MAX_CHECKPOINT_BYTES = 64 * 1024  # a job's checkpoints, msgpack-encoded together
MAX_SAGA_BYTES = 64 * 1024  # a job's saga record (its steps' results included)
MAX_NOTE_CHARS = 200  # a progress note is cut here
MAX_PROGRESS_BYTES = 512  # the script's guard on a progress value
PROGRESS_INTERVAL = 1.0  # seconds: at most one progress write per run per interval
# checkpoint and saga step names: shown in events, dead reasons and the CLI
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")


def check_state_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"invalid {what} name {name!r}: use 1-100 characters from "
                          "A-Z a-z 0-9 _ . : -")
    return name


@dataclass(frozen=True, slots=True)
class RunStateParams:
    scripts: Scripts
    keys: Callable[[str], QueueKeys]
    table: RunTable
    progress_interval: float = PROGRESS_INTERVAL


@dataclass(eq=False, slots=True)
class _Loaded:
    """A run's view of its job's state: read once, then kept in step with
    its own writes (fencing makes it the only writer). The lock orders the
    run's own reads and writes: two checkpoints written at once by one run
    (a task group in the handler) must not merge onto the same old map."""

    checkpoints: dict[str, Any] | None = None  # None: not read yet
    saga: Any = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)


@dataclass(eq=False, slots=True)
class _Progress:
    pending: tuple[float, str] | None = None
    next_at: float = 0.0  # monotonic: the next write may go then
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class RunStateStore:
    """One per worker: every run's checkpoint, saga and progress writes."""

    def __init__(self, params: RunStateParams) -> None:
        self._p = params
        self._loaded: dict[RunRecord, _Loaded] = {}
        self._progress: dict[RunRecord, _Progress] = {}
        self._due: dict[RunRecord, _Progress] = {}  # runs with a value to write
        self._wakeup = anyio.Event()
        self._log = get_log("runstate")

    # -- loading ----------------------------------------------------------------

    def _entry(self, run: RunRecord) -> _Loaded:
        entry = self._loaded.get(run)
        if entry is None:
            entry = self._loaded[run] = _Loaded()
        return entry

    async def _read(self, run: RunRecord, entry: _Loaded) -> dict[str, Any]:
        """The checkpoints, read from Redis the first time (the lock is held)."""
        if entry.checkpoints is None:
            job = run.job
            raw_c, raw_s, _ = await self._p.scripts.read_runstate(self._p.keys(job.queue),
                                                                  job.id)
            checkpoints = codec.decode_state(raw_c, job.id)
            entry.saga = codec.decode_state(raw_s, job.id)
            entry.checkpoints = checkpoints if isinstance(checkpoints, dict) else {}
        return entry.checkpoints

    async def checkpoints(self, run: RunRecord) -> dict[str, Any]:
        """The checkpoints the job's runs accepted so far (a copy)."""
        entry = self._entry(run)
        async with entry.lock:
            return dict(await self._read(run, entry))

    async def saga(self, run: RunRecord) -> Any:
        """The job's saga record as stored (None: no saga ran yet)."""
        entry = self._entry(run)
        async with entry.lock:
            await self._read(run, entry)
            return entry.saga

    # -- fenced writes -------------------------------------------------------------

    async def checkpoint(self, run: RunRecord, name: str, value: Any) -> None:
        check_state_name(name, "checkpoint")
        entry = self._entry(run)
        async with entry.lock:
            merged = {**await self._read(run, entry), name: value}
            data = codec.encode_state(merged, f"checkpoint {name!r}")
            if len(data) > MAX_CHECKPOINT_BYTES:
                raise StateTooLarge(f"checkpoints of job {run.job.id} with {name!r}", len(data),
                                    MAX_CHECKPOINT_BYTES)
            await self._write(run, "c", data, MAX_CHECKPOINT_BYTES, name)
            entry.checkpoints = merged

    async def save_saga(self, run: RunRecord, record: Any, detail: str) -> None:
        data = codec.encode_state(record, "saga record")
        if len(data) > MAX_SAGA_BYTES:
            raise StateTooLarge(f"saga record of job {run.job.id}", len(data), MAX_SAGA_BYTES)
        entry = self._entry(run)
        async with entry.lock:
            await self._write(run, "s", data, MAX_SAGA_BYTES, detail)
            entry.saga = record

    async def _write(self, run: RunRecord, kind: str, data: bytes, max_bytes: int,
                     detail: str) -> None:
        job = run.job
        if run.phase is Phase.LOST:
            raise LeaseLost(f"job {job.id}: the lease of run {job.token} is gone")
        answer = await self._p.scripts.runstate(self._p.keys(job.queue), job.id, job.token,
                                                kind, data, max_bytes, detail)
        if answer is RunStateReply.LOST:
            self._lost(run)
            raise LeaseLost(f"job {job.id}: run {job.token} no longer holds the lease; "
                            "its write was refused")
        if answer is RunStateReply.TOO_LARGE:  # Python checks first: a bound out of step
            raise StateTooLarge(f"{kind} of job {job.id}", len(data), max_bytes)

    def _lost(self, run: RunRecord) -> None:
        self._log.warning("a run's fenced write was refused: lease lost; stopping it",
                          **run.fields())
        self._p.table.lose(run, StopReason.LEASE_LOST)

    # -- progress ------------------------------------------------------------------

    def progress(self, run: RunRecord, fraction: float, note: str) -> None:
        """Record the run's progress; written at once when the interval allows,
        else when it is up (only the last value of the interval)."""
        if run.phase is Phase.LOST:
            raise LeaseLost(f"job {run.job.id}: the lease of run {run.job.token} is gone")
        if not isinstance(fraction, int | float) or not math.isfinite(fraction) \
                or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress must be a number from 0 to 1, not {fraction!r}")
        p = self._progress.get(run)
        if p is None:
            p = self._progress[run] = _Progress()
        p.pending = (float(fraction), clean_log_text(str(note))[:MAX_NOTE_CHARS])
        if run not in self._due:
            self._due[run] = p
            self._wakeup.set()

    async def run(self) -> None:
        """Write due progress values, each run at most once per interval."""
        while True:
            if not self._due:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            now = time.monotonic()
            soonest = min(p.next_at for p in self._due.values())
            if soonest > now:
                with anyio.move_on_after(soonest - now):
                    await self._wakeup.wait()
                if self._wakeup.is_set():
                    self._wakeup = anyio.Event()
                continue
            for run, p in list(self._due.items()):
                if p.next_at <= now:
                    await self._flush(run, p)

    async def _flush(self, run: RunRecord, p: _Progress) -> None:
        async with p.lock:
            value = p.pending
            self._due.pop(run, None)
            if value is None or run.phase in (Phase.LOST, Phase.SETTLED):
                return
            p.pending = None
            p.next_at = time.monotonic() + self._p.progress_interval
            fraction, note = value
            text = f"{fraction:.4f}".rstrip("0").rstrip(".") or "0"
            job = run.job
            try:
                answer = await self._p.scripts.runstate(
                    self._p.keys(job.queue), job.id, job.token, "p",
                    f"{text}{ERROR_US}{note}".encode(), MAX_PROGRESS_BYTES,
                    f"{text} {note}".rstrip())
            except (RedisUnavailable, ScriptError) as exc:
                self._log.warning("progress not written; retrying after the interval",
                                  error=str(exc), **run.fields())
                if p.pending is None:  # keep it unless a newer value came meanwhile
                    p.pending = value
                self._due[run] = p
                return
            if answer is RunStateReply.LOST:
                self._lost(run)

    def used_by(self, run: RunRecord) -> bool:
        """Whether the run loaded or wrote anything here (finish() has work)."""
        return run in self._loaded or run in self._progress

    async def finish(self, run: RunRecord) -> None:
        """The handler returned: write its last progress value now (before the
        run settles, after which the write would be refused) and forget the run."""
        self._loaded.pop(run, None)
        p = self._progress.pop(run, None)
        if p is None:
            return
        self._due[run] = p
        await self._flush(run, p)
