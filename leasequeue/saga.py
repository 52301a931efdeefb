"""Sagas: a job that writes to two stores with no distributed transaction
between them runs ordered steps, each with an idempotent compensation. Each
step's outcome is recorded in Redis per job, fenced by the run's token, so a
crash resumes the saga on the next attempt (done steps are skipped, or an
interrupted compensation goes on). It never runs a step's ``do`` twice once
its outcome is recorded, and never leaves a failed compensation silent.

Declarative on purpose (``run_saga(ctx, [Step(...), ...])`` rather than an
imperative ``saga.step(...)`` per call): to go on compensating after a crash,
every step's ``undo`` must be known before any step runs, and one list shows
the order to review (the hard-to-undo step goes first)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio

from .context import Context
from .errors import CompensationFailed, ConfigError, RunStopped, SagaCompensated
from .runtime.runstate import check_state_name

RECORD_VERSION = 1
UNDO_TRIES = 5  # tries of one compensation within a run before the job ends dead
UNDO_BACKOFF = 0.5  # seconds before the second try, doubled after each
MAX_ERROR_CHARS = 500  # a failed step's error as kept in the saga record
# stops after which no attempt follows: the saga is compensated at once
ENDING_STOPS = ("canceled", "replaced")
CANCEL_GRACE = 30.0  # seconds, when the run has no stop grace


class SagaStatus:
    RUNNING = "running"  # steps are being done
    COMPENSATING = "compensating"  # a step failed: the done steps are being undone
    COMPLETED = "completed"  # every step done
    COMPENSATED = "compensated"  # a step failed and every step done before it was undone
    FAILED = "failed"  # a compensation kept failing: the job is dead, the record says which


class StepState:
    DONE = "done"
    UNDONE = "undone"


@dataclass(frozen=True, slots=True)
class Step:
    """One step: ``do(results)`` gets the results of the steps before it (name
    -> result) and returns this step's result (anything msgpack encodes, kept
    in Redis: keep it small, e.g. a charge id); ``undo(result)`` gets that
    result back. Both may be async. ``do`` runs at least once (a crash after
    it did its work but before its outcome was recorded runs it again): make
    it idempotent, e.g. keyed by ``ctx.job_id`` and the step name. ``undo``
    must be idempotent too: it can be tried more than once."""

    name: str
    do: Callable[[dict[str, Any]], Any]
    undo: Callable[[Any], Any]


async def _call(fn: Callable[[Any], Any], arg: Any) -> Any:
    value = fn(arg)
    if inspect.isawaitable(value):
        value = await value
    return value


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def _new_record() -> dict[str, Any]:
    return {"v": RECORD_VERSION, "status": SagaStatus.RUNNING, "steps": [], "failed": "",
            "error": ""}


async def run_saga(ctx: Context, steps: Sequence[Step], *, undo_tries: int = UNDO_TRIES,
                   undo_backoff: float = UNDO_BACKOFF) -> dict[str, Any]:
    """Run the steps in order and return their results (name -> result).

    A step whose ``do`` raises ends the saga: the steps done before it are
    compensated in reverse order, then SagaCompensated is raised (the job
    ends dead, reason ``saga-compensated``). A compensation that fails is
    tried ``undo_tries`` times (backoff from ``undo_backoff`` s, doubling);
    if it still fails, CompensationFailed is raised (dead, reason
    ``compensation-failed:<step>``). A stop after which the job runs again
    (timeout, lease lost, shutdown) is not a step failure: the saga stays as
    recorded and the next attempt resumes it. A cancel (or a ``replace``)
    ends the job: the done steps are compensated at once, within the job's
    stop grace. Each recorded outcome is a fenced write: a run that lost its
    lease gets LeaseLost and records nothing. One saga per job."""
    names = [check_state_name(s.name, "saga step") for s in steps]
    if len(set(names)) != len(names):
        raise ConfigError(f"saga step names must be unique: {names}")
    if undo_tries < 1:
        raise ConfigError(f"undo_tries must be >= 1, not {undo_tries}")
    store = ctx._store()  # the run's fenced store (package-private)
    stored = await store.saga(ctx._run)
    saga = _Saga(ctx, store, list(steps), stored if isinstance(stored, dict) else _new_record(),
                 undo_tries, undo_backoff)
    status = saga.record["status"]
    if status == SagaStatus.COMPLETED:
        return {name: result for name, _, result in saga.record["steps"]}
    if status == SagaStatus.COMPENSATED:
        raise SagaCompensated(saga.record["failed"], saga.record["error"])
    if status in (SagaStatus.COMPENSATING, SagaStatus.FAILED):
        ctx.log.warning("resuming the compensation of a saga", failed_step=saga.record["failed"])
        await saga.compensate()
        raise SagaCompensated(saga.record["failed"], saga.record["error"])
    try:
        return await saga.forward()
    except anyio.get_cancelled_exc_class():
        if ctx.stop_reason in ENDING_STOPS:
            await saga.compensate_on_cancel()
        raise  # any other stop: the record stays as it is and the next attempt resumes


@dataclass(eq=False, slots=True)
class _Saga:
    """One run of a saga: its steps, its record (as stored), and how to save it."""

    ctx: Context
    store: Any
    steps: list[Step]
    record: dict[str, Any]
    undo_tries: int
    undo_backoff: float

    async def save(self, detail: str) -> None:
        await self.store.save_saga(self.ctx._run, self.record, detail)

    async def forward(self) -> dict[str, Any]:
        record = self.record
        done = {name: result for name, state, result in record["steps"]
                if state == StepState.DONE}
        results: dict[str, Any] = {}
        for step in self.steps:
            if step.name in done:  # recorded by an earlier run: skipped
                results[step.name] = done[step.name]
                continue
            try:
                result = await _call(step.do, dict(results))
            except RunStopped:
                raise  # a stop is not a step failure: the next attempt resumes here
            except Exception as exc:
                record["status"] = SagaStatus.COMPENSATING
                record["failed"], record["error"] = step.name, _error_text(exc)
                await self.save(f"{step.name} failed")
                self.ctx.log.warning("saga step failed; compensating the steps done before it",
                                     step=step.name, error=record["error"])
                await self.compensate()
                raise SagaCompensated(step.name, record["error"]) from exc
            record["steps"].append([step.name, StepState.DONE, result])
            await self.save(f"{step.name} done")
            results[step.name] = result
        record["status"] = SagaStatus.COMPLETED
        await self.save("completed")
        return results

    async def compensate(self) -> None:
        """Undo the done steps in reverse order, each recorded as it lands."""
        by_name = {s.name: s for s in self.steps}
        self.record["status"] = SagaStatus.COMPENSATING
        for entry in reversed(self.record["steps"]):
            name, state, result = entry
            if state != StepState.DONE:
                continue
            step = by_name.get(name)
            if step is None:
                await self._give_up(name, "the step is not in this saga's definition")
            await self._undo(step, result)
            entry[1] = StepState.UNDONE
            await self.save(f"{name} undone")
        self.record["status"] = SagaStatus.COMPENSATED
        await self.save("compensated")

    async def _undo(self, step: Step, result: Any) -> None:
        error = ""
        for attempt in range(self.undo_tries):
            try:
                await _call(step.undo, result)
                return
            except RunStopped:
                raise
            except Exception as exc:
                error = _error_text(exc)
                self.ctx.log.warning("saga compensation failed", step=step.name, error=error,
                                     attempt=attempt + 1, tries=self.undo_tries)
                if attempt + 1 < self.undo_tries:
                    await anyio.sleep(self.undo_backoff * 2 ** attempt)
        await self._give_up(step.name, error)

    async def _give_up(self, name: str, error: str) -> NoReturn:
        self.record["status"] = SagaStatus.FAILED
        self.record["undo_failed"], self.record["undo_error"] = name, error
        await self.save(f"{name} compensation failed")
        raise CompensationFailed(name, error)

    async def compensate_on_cancel(self) -> None:
        """The job was canceled (or replaced) mid-saga: no attempt follows to
        resume it, so the done steps are compensated now, shielded from the
        cancel, within the job's stop grace."""
        ctx = self.ctx
        grace = getattr(ctx._run, "stop_grace", 0.0) or CANCEL_GRACE
        with anyio.CancelScope(shield=True), anyio.move_on_after(grace) as scope:
            self.record["status"] = SagaStatus.COMPENSATING
            self.record["failed"], self.record["error"] = "", f"job {ctx.stop_reason}"
            await self.save(f"{ctx.stop_reason}: compensating")
            ctx.log.warning("saga stopped by a cancel; compensating the done steps")
            await self.compensate()
        if scope.cancelled_caught:
            ctx.log.error("saga compensation after a cancel ran out of its stop grace; the "
                          "record keeps the steps still done", grace_s=grace,
                          done=[n for n, st, _ in self.record["steps"] if st == StepState.DONE])
