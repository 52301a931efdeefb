"""Which asyncio event loop a command runs on: asyncio's own, or uvloop's
(libuv underneath, ``pip install 'leasequeue[uvloop]'``).

``leasequeue worker --loop auto`` (the default) takes uvloop when it is
installed, as uvicorn's ``--loop auto`` does: the worker's process is ours,
and on uvloop a worker spends less CPU per job and a producer's round trip
costs less (README, "The event loop"). Code that runs a Worker or an App in
its own process picks the loop itself (``uvloop.run(main())``, or
``anyio.run(main, backend_options={"use_uvloop": True})``); running_loop()
says which one it got."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import weakref
from collections.abc import Callable
from typing import Protocol

from .errors import ConfigError

LOOPS = ("auto", "asyncio", "uvloop")

# task_of(loop): the task ``loop`` is stepping now, or None (asyncio's
# current_task(loop)). On Python 3.11 asyncio.current_task is a Python
# function around this dict (about 1,000 instructions a call more than the
# dict's C get, by callgrind), and asyncio.get_running_loop() makes a
# getpid() system call each call (its check for a fork): a hot path that
# knows a loop asks it for its task instead (store/coalesce.py,
# store/spin.py). C since 3.12, where get_running_loop no longer asks.
task_of: Callable[[asyncio.AbstractEventLoop], object]
if sys.version_info < (3, 12):
    from asyncio.tasks import _current_tasks  # type: ignore[attr-defined]

    task_of = _current_tasks.get
else:
    task_of = asyncio.current_task


class ForgetsInChild(Protocol):
    """What holds connections of this process: told in a forked child."""

    def _forget_in_child(self) -> None: ...


_IN_CHILD: weakref.WeakSet[ForgetsInChild] = weakref.WeakSet()


def forget_in_child(holder: ForgetsInChild) -> None:
    """Have ``holder._forget_in_child()`` run in every child this process
    forks (its connections are the parent's there): the lanes of App and
    SyncApp. Held weakly: a holder gone is not told."""
    _IN_CHILD.add(holder)


def _after_fork_in_child() -> None:
    for holder in list(_IN_CHILD):
        holder._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def has_uvloop() -> bool:
    """True when uvloop can be imported (it is an optional extra)."""
    return importlib.util.find_spec("uvloop") is not None


def backend_options(loop: str) -> dict[str, bool]:
    """anyio.run's ``backend_options`` for ``loop`` (one of LOOPS): uvloop's
    loop for "uvloop", and for "auto" when uvloop is installed; asyncio's own
    otherwise. ConfigError for "uvloop" when it is not installed, and for a
    name not in LOOPS."""
    if loop not in LOOPS:
        raise ConfigError(f"unknown event loop {loop!r}: use one of {', '.join(LOOPS)}")
    if loop == "asyncio":
        return {}
    if has_uvloop():
        return {"use_uvloop": True}
    if loop == "uvloop":
        raise ConfigError("--loop uvloop needs uvloop: pip install 'leasequeue[uvloop]'")
    return {}


def running_loop() -> str:
    """'uvloop' or 'asyncio': the kind of the running event loop (logged when
    a worker starts)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".")[0] == "uvloop" else "asyncio"
