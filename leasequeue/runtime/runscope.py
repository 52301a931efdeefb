"""An async run's cancel scope: what the executor needs from an anyio
CancelScope around an async handler (cancel that run, catch that
cancellation and no other), for a fraction of its cost per run.

anyio's scope links itself into the task's scope tree on every enter and
exit (a weak-keyed lookup of the task's state each way, sets of child
scopes and tasks updated), about 3 us a run on the benchmark hosts and a
seventh of a drained no-op job's worker instructions
(benchmarks/instructions.py). A run's handler is cancelled rarely (a
timeout, a cancel, a lost lease, shutdown); the cost of doing it belongs to
that moment, not to every run. So this scope does nothing on enter and exit
but note the task, and a cancel does what anyio's does, by the same means:

- it cancels the task at its current await (``Task.cancel``, with a message
  anyio reads as its own, so an outer anyio scope cancelled in the same turn
  still recognises its cancellation), and again at each await after, every
  turn of the loop while the scope is active (level-triggered: a handler
  that swallows one CancelledError is cancelled at its next await, as under
  anyio);
- never while the task is inside a shielded anyio scope entered within this
  one (a saga's compensations, a resource's close: they finish first);
- on exit it takes its own requests back (``Task.uncancel``, as
  ``asyncio.timeout`` does) and swallows the CancelledError only when no
  other cancellation of the task is pending and no enclosing anyio scope is
  cancelled: an outer scope's cancellation, or the loop's shutdown, goes on
  up (an anyio scope inside a cancelled one does the same).

Works on asyncio's loop and uvloop's (both run asyncio's Task)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, NamedTuple

try:  # anyio's record of each task's innermost cancel scope (its asyncio backend)
    from anyio._backends._asyncio import _task_states

    AVAILABLE = True
except ImportError:  # pragma: no cover - another anyio layout: shields cannot be seen,
    # so the executor keeps anyio's own CancelScope (handler.py)
    _task_states = None  # type: ignore[assignment]
    AVAILABLE = False


class Host(NamedTuple):
    """The task that runs handlers one after the other (an executor) and
    anyio's state of it: read once per task (host()), not once per run
    (asyncio.current_task alone costs a third of a microsecond on 3.11)."""

    task: asyncio.Task[Any]
    state: Any  # anyio's TaskState of the task; None when anyio did not start it


def host() -> Host:
    """The running task, as the host of the RunScopes it will enter."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("a RunScope is entered by an asyncio task")
    return Host(task, _task_states.get(task))


class RunScope:
    """Entered by the task that runs the handler, ``host`` (host() of that
    very task: not checked), or by the running task when none is given;
    ``cancel()`` from any task of the same loop."""

    __slots__ = ("_active", "_at_enter", "_handle", "_host", "_outer", "_pending", "_task",
                 "cancel_called", "cancelled_caught")

    def __init__(self, host: Host | None = None) -> None:
        self._host = host
        self._task: asyncio.Task[Any] | None = None
        self._active = False
        self._at_enter = 0  # the task's pending cancellations when entered
        self._outer: Any = None  # the task's innermost anyio scope when entered
        self._pending = 0  # Task.cancel() calls of this scope not yet taken back
        self._handle: asyncio.Handle | None = None  # the next delivery, scheduled
        self.cancel_called = False
        self.cancelled_caught = False

    def __enter__(self) -> RunScope:
        task, state = self._host or host()
        if state is None:  # anyio may have started tracking the task since
            state = _task_states.get(task)
        self._task = task
        self._at_enter = task.cancelling()
        # anyio's innermost scope of the task now: those entered after it are
        # the handler's own (a shielded one holds off this scope's cancel)
        self._outer = state.cancel_scope if state is not None else None
        self._active = True
        if self.cancel_called:
            self._deliver()
        return self

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._active:
            self._deliver()

    def _deliver(self) -> None:
        """Cancel the task at its await unless it is shielded, is running
        (this turn: it is cancelled at the await it comes to) or already has
        a cancellation pending; then again next turn, while active."""
        self._handle = None
        task = self._task
        if not self._active or task is None or task.done():
            return
        if (task is not asyncio.current_task() and not task._must_cancel  # type: ignore[attr-defined]
                and not self._shielded(task)):
            waiter = task._fut_waiter  # type: ignore[attr-defined]
            if waiter is None or not waiter.done():
                task.cancel(f"Cancelled via cancel scope {id(self):x}")
                self._pending += 1
        self._handle = task.get_loop().call_soon(self._deliver)

    def _shielded(self, task: asyncio.Task[Any]) -> bool:
        """Whether an anyio scope entered within this one shields the task."""
        state = _task_states.get(task)
        scope = state.cancel_scope if state is not None else None
        while scope is not None and scope is not self._outer:
            if scope.shield:
                return True
            scope = scope._parent_scope
        return False

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._active = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task, self._task = self._task, None
        if not self.cancel_called or task is None:
            return False
        while self._pending:
            task.uncancel()
            self._pending -= 1
        if task.cancelling() > self._at_enter:
            return False  # another cancellation of the task is pending: it goes on up
        outer = self._outer
        if outer is not None and outer._effectively_cancelled:
            # an enclosing anyio scope is cancelled too (it held its delivery
            # while this one's was pending): the CancelledError is its as well
            return False
        if isinstance(exc, asyncio.CancelledError):
            self.cancelled_caught = True
            return True
        return False

