"""A one-job enqueue's reply, waited for by reading the socket over and over
(``ReplySpin``) before the caller sleeps: the async lane's read parks on a
future and gives the event loop its turn (store/direct.py), the sync lane's
blocks in ``recv`` (store/sync_lane.py).

On a Redis next to the client the reply of a small call comes back in tens
of microseconds (enqueue_one.lua's 17-33 us after the write at p10-p90 on
the Intel Xeon host), less than what a sleep and its wake-up cost: on
asyncio's loop the sleep in epoll_wait, the reply's callback and the
caller's task scheduled again (one enqueue per call ran 1.7 times as fast
without them, for less client CPU); on uvloop's loop and for a thread, the
wake-up (1.25-1.3 times as fast, for 11-17 us more client CPU a call).
DESIGN-NOTES.md, "A reply waited for on the socket";
benchmarks/reply_spin.py.

A spin stands aside when it would cost more than it saves:

- another callback is ready on asyncio's own loop (its queue, which
  ``LoopTurn.held`` reads): the loop has work, so its turn is no sleep;
- on an event loop, the calls spun since the loop's last turn add up to
  ``MAX_STREAK_NS``, or another task runs before the loop turned
  (``LoopTurn``): a spun call returns without the loop's turn, so a task
  that enqueues in a loop held every other task, timer and socket of its
  loop for as long as its spins hit (a 0.5 ms timer waited 25.9 ms on
  asyncio's loop and 13.4 on uvloop's while one task made 3,000 calls:
  benchmarks/results/loop_turn.txt), and
  on uvloop, whose queue cannot be read, a burst of concurrent enqueues
  could go as lone calls, each answered before the burst's other tasks ran
  and parked behind it;
- after a spin that ran out (a Redis far away, or slow this moment) the
  next 1, 3, 7 ... 1,023 calls do not spin (doubling with each miss in a
  row, reset by a reply within the budget), so a client of a distant Redis
  spins once in 1,024 calls;
- on one CPU, where it would hold the CPU Redis needs to answer (the lanes
  make none there: ``reply_spin``).

Between two reads the spin gives its CPU to any process waiting for it
(``sched_yield``; on a host with CPUs to spare none waits, and it returns at
once). On a host busy with other work a spin that kept its CPU held Redis
and the other processes off it: with the yield, one enqueue per call from
App ran 1.35-2.23x as fast beside a process busy half the time and
1.51-1.66x beside one busy 90% of it, 0.97-1.08x on a quiet host, and
from SyncApp 0.91-1.06x (benchmarks/busy_host.py, the two versions
alternating; benchmarks/results/reply_spin_yield.txt).

The reading is the caller's (``read_now``: a read of the socket that does
not wait), into the connection's own hiredis reader, in order with all the
bytes read before; an EOF fails the read as a lost connection. The counters
are shared by a lane's threads without a lock: a lost update moves a
back-off by a call, nothing else."""

from __future__ import annotations

import os
from asyncio import AbstractEventLoop, Handle
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.exceptions import ConnectionError as RedisConnectionError

from ..loops import task_of

MAX_STREAK_NS = 2_000_000  # about the longest a loop's other work waits for spun calls


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


# gives this CPU to a process waiting for it, if one is (returns at once
# where none is); a no-op where the OS has no sched_yield
_SCHED_YIELD: Callable[[], None] = getattr(os, "sched_yield", lambda: None)


def reply_spin(budget_us: int) -> ReplySpin | None:
    """A lane's spin: None where it is off (a budget of 0, or one CPU)."""
    return ReplySpin(budget_us) if budget_us > 0 and cpus() > 1 else None


class ReplySpin:
    """Reads a reply off its socket for at most ``budget_us`` (the module's
    docstring says when it does not)."""

    __slots__ = ("budget_ns", "misses", "skip")

    MAX_MISSES = 10

    def __init__(self, budget_us: int) -> None:
        self.budget_ns = budget_us * 1000
        self.misses = 0  # spins in a row that ran out
        self.skip = 0  # calls left that do not spin

    def reply(self, read_now: Callable[[], bytes] | None, held: object, reader: Any) -> Any:
        """The reply; NOT_ENOUGH_DATA when this call does not spin (no
        ``read_now``; ``held``, true where the loop's other work would wait
        for it, as LoopTurn.held says; or a back-off), or its budget ran out
        first (what came by then is in the reader)."""
        if self.skip:
            self.skip -= 1
            return NOT_ENOUGH_DATA
        if read_now is None or held:
            return NOT_ENOUGH_DATA
        return self.read(read_now, reader)

    def read(self, read_now: Callable[[], bytes], reader: Any) -> Any:
        """Read until a reply is whole or the budget ran out."""
        deadline = perf_counter_ns() + self.budget_ns
        while True:
            try:
                data = read_now()
            except BlockingIOError:
                if perf_counter_ns() < deadline:
                    _SCHED_YIELD()  # (the module's docstring)
                    continue
                self.misses = min(self.misses + 1, self.MAX_MISSES)
                self.skip = (1 << self.misses) - 1
                return NOT_ENOUGH_DATA
            if not data:
                raise RedisConnectionError("Connection closed by server.")
            reader.feed(data)
            reply = reader.gets()
            if reply is not NOT_ENOUGH_DATA:
                self.misses = 0
                return reply


class LoopTurn:
    """Whether a spin would hold an event loop's other work (spin.py's
    docstring). The calls of one task since the loop's last turn make a
    streak, which ends when the loop turns (a callback it runs then, put
    in its queue at the streak's first call). A streak older than
    ``MAX_STREAK_NS`` is ``overdue``: its task's next spun call gives the
    loop a turn before it is sent (a yield costs less than a call that
    parks for its reply: about 1% of one-per-call's rate at 2 ms).
    Another task run within a streak, and on asyncio's loop a callback
    ready in its queue other than the streak's own, are work waiting now:
    that call does not spin but parks, its call in flight (``held``). One
    per lane (the tasks of one loop share it)."""

    __slots__ = ("handle", "loop", "since", "task")

    def __init__(self) -> None:
        self.handle: Handle | None = None  # the streak's end; None: the loop turned since
        self.loop: AbstractEventLoop | None = None
        self.task: object = None  # the streak's task
        self.since = 0  # the streak's first call (perf_counter_ns)

    def overdue(self) -> bool:
        """Whether the streak has held the loop long enough: the next spun
        call yields first."""
        return self.handle is not None and perf_counter_ns() - self.since > MAX_STREAK_NS

    def held(self, loop: AbstractEventLoop, ready: deque[Handle] | None) -> bool:
        """Whether a call of the running task, sent, must not spin now."""
        if ready:  # asyncio's queue: anything but this streak's end is work waiting
            if len(ready) > 1 or ready[0] is not self.handle:
                return True
        task = task_of(loop)  # (asyncio.current_task(loop), a C get on 3.11)
        if self.handle is None or self.loop is not loop:  # a new streak
            self.loop, self.task, self.since = loop, task, perf_counter_ns()
            self.handle = loop.call_soon(self._turned)
            return False
        return task is not self.task

    def _turned(self) -> None:
        self.handle = None
        self.task = None  # (not kept alive by the lane past its streak)
