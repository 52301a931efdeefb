"""Where each process of a bench ran, from the kernel's own record: the
harness's view of the scheduler's placement (README, "Where it is behind":
on a 2-CPU host an unpinned column is decided by whether a client shares
Redis's CPU).

A private tracefs instance (/sys/kernel/tracing/instances/NAME) records five
scheduler events, every one rare next to a bench's calls: a task's fork
(threads too) and its first CPU (sched_wakeup_new), an exec, an exit, and
every change of the CPU a task is assigned to (sched_migrate_task: the
kernel emits it whenever a task's CPU changes). The events are stamped on
the clock of Python's time.monotonic() (trace_clock "mono") and kept in the
kernel's buffer while the bench runs: nothing of ours wakes up meanwhile, so
recording does not move the processes it records (a first version polled
/proc every 5 ms from a thread, and that thread's wake-ups alone moved the
enqueue->start p50, bee-queue's by 1.18x and ours by 1.06x:
results/placement_recorder.txt).

``Placement.share(a, b, t0, t1)`` is then the share of the window in which
tasks a and b (alive both) were assigned to one CPU, and
``Placement.probe(...)`` where the three processes of one enqueue->start
probe were as its handler started (a snapshot at that instant: a worker or
Redis woken onto another CPU during the probe is counted where it ended,
which can differ from where it spent the idle time between probes).

The worker is a process the bench started with an exec: leasequeue's, the
Node peers', arq's, SAQ's, RQ's (SimpleWorker) and bullmq-py's run their
handlers there; Celery's prefork pool, Dramatiq's and taskiq's run them in
forked children that never exec, where this would place the supervisor, so
the report gives no worker pairs for those three. A harness killed with
SIGKILL leaves its instance behind (tracing off between benches; ``rmdir``
it).
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched_process_fork", "sched_process_exec", "sched_process_exit", "sched_wakeup_new",
          "sched_migrate_task")
# "<comm>-<pid> [cpu] <irq flags, unless that option is off> <seconds>: <event>: <fields>"
_LINE = re.compile(r"\[(\d+)\]\s+(?:\S+\s+)?([\d.]+): (\w+): (.*)$")
_FIELD = re.compile(r"\b(pid|child_pid|target_cpu|orig_cpu|dest_cpu)=(\d+)")


@dataclass
class Placement:
    """What the events of one bench process say: per task (a tid), the CPU
    it was assigned to over time; the tasks descended from the bench's
    leader, and which of them exec'd (processes started, not threads)."""

    leader: int
    cpus: dict[int, tuple[list[float], list[int]]] = field(default_factory=dict)
    exits: dict[int, float] = field(default_factory=dict)
    execs: dict[int, float] = field(default_factory=dict)
    tree: set[int] = field(default_factory=set)

    def _at(self, tid: int, t: float) -> int | None:
        """The CPU a task was assigned to at ``t`` (None: not yet seen, or
        exited by then)."""
        times, cpus = self.cpus.get(tid, ([], []))
        i = bisect.bisect_right(times, t) - 1
        if i < 0 or self.exits.get(tid, float("inf")) <= t:
            return None
        return cpus[i]

    def share(self, a: int, b: int, t0: float, t1: float) -> float | None:
        """The share of [t0, t1], while both were alive, in which a and b were
        assigned to one CPU (None: never both alive in it)."""
        cuts = {t0, t1}
        for tid in (a, b):
            cuts.update(t for t in self.cpus.get(tid, ([], []))[0] if t0 < t < t1)
            if t0 < self.exits.get(tid, t1) < t1:
                cuts.add(self.exits[tid])
        edges = sorted(cuts)
        both = same = 0.0
        for lo, hi in itertools.pairwise(edges):
            x, y = self._at(a, lo), self._at(b, lo)
            if x is not None and y is not None:
                both += hi - lo
                same += (hi - lo) * (x == y)
        return round(same / both, 3) if both > 0 else None

    def moves(self, tid: int, t0: float, t1: float) -> int:
        """How many times the task's CPU changed within (t0, t1]."""
        times = self.cpus.get(tid, ([], []))[0]
        return bisect.bisect_right(times, t1) - bisect.bisect_right(times, t0)

    def probe(self, client: int, worker: int, redis: int, t0: float,
              t1: float) -> tuple[str, list[str]]:
        """Where one enqueue->start probe ran: the three tasks' CPUs as its
        handler started (t1), and which of them changed CPU during it."""
        tasks = {"client": client, "worker": worker, "redis": redis}
        moved = [name for name, tid in tasks.items() if self.moves(tid, t0, t1)]
        c, w, r = (self._at(tid, t1) for tid in (client, worker, redis))
        if c is None or w is None or r is None:
            return "unknown", moved
        if c == w == r:
            return "one CPU", moved
        if w == r:
            return "producer apart", moved
        if c == r:
            return "worker apart", moved
        return ("Redis apart" if c == w else "all apart"), moved

    def worker(self, t0: float, t1: float) -> int | None:
        """The process the bench started (it exec'd; not the bench itself)
        that was alive longest in [t0, t1]: the worker of an e2s window."""
        best, longest = None, 0.0
        for tid, at in self.execs.items():
            alive = min(self.exits.get(tid, t1), t1) - max(at, t0)
            if tid != self.leader and tid in self.tree and alive > longest:
                best, longest = tid, alive
        return best


def parse(text: str, leader: int, known: dict[int, tuple[float, int]]) -> Placement:
    """The events of the trace's text; ``known``: tasks that existed before
    it began (redis-server's main thread), with when and where they were
    read from /proc."""
    p = Placement(leader)
    p.tree.add(leader)
    for tid, (t, cpu) in known.items():
        p.cpus[tid] = ([t], [cpu])
    for line in text.splitlines():
        m = _LINE.search(line)
        if m is None:
            continue
        t, event = float(m.group(2)), m.group(3)
        f = dict(_FIELD.findall(m.group(4)))
        if event == "sched_process_fork":
            child = int(f["child_pid"])
            if child != p.leader:  # (the trace begins before the leader's own fork)
                for known_of in (p.execs, p.exits):  # a tid used again starts afresh
                    known_of.pop(child, None)
                p.tree.discard(child)
            if int(f["pid"]) in p.tree:
                p.tree.add(child)
            continue
        tid = int(f["pid"])
        if event == "sched_process_exec":
            p.execs[tid] = t
        elif event == "sched_process_exit":
            p.exits[tid] = t
        elif event == "sched_wakeup_new":  # a new task: its first CPU
            p.cpus[tid] = ([t], [int(f["target_cpu"])])
        elif f.get("orig_cpu") != f.get("dest_cpu"):  # sched_migrate_task
            times, cpus = p.cpus.setdefault(tid, ([], []))
            at = bisect.bisect_right(times, t)  # (a known task's /proc read may be later)
            times.insert(at, t)
            cpus.insert(at, int(f["dest_cpu"]))
    return p


def last_cpu(pid: int, tid: int | None = None) -> int:
    """The CPU a task last ran on (field 39 of its stat)."""
    path = f"/proc/{pid}/task/{tid or pid}/stat"
    with open(path, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[36])


def tracefs_mounted() -> bool:
    """Whether tracefs is mounted at TRACEFS (its instances/ is there)."""
    try:
        return (TRACEFS / "instances").is_dir()
    except OSError:
        return False


def mount_tracefs() -> bool:
    """Mount tracefs at TRACEFS where it is not mounted and this process is
    root (a fresh VM often boots without it, and a harness run left without
    placement cannot get it back): True when it was mounted here. Nothing
    is tried where it is mounted already, or not as root; a refused mount
    (no tracefs in the kernel, a container without the right) is False."""
    if os.geteuid() != 0 or not TRACEFS.is_dir() or tracefs_mounted():
        return False
    try:
        done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and tracefs_mounted()


class SchedTrace:
    """The tracefs instance: open() it (False where tracefs cannot be made
    or written: no placement then), begin() before each bench process,
    end() after it, close() at the end."""

    def __init__(self, name: str | None = None, buffer_kb: int = 8192) -> None:
        # unique on the whole kernel (tracefs is shared by every pid namespace)
        name = name or f"leasequeue-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir = TRACEFS / "instances" / name
        self.buffer_kb = buffer_kb
        self._made = False

    def _write(self, rel: str, value: str) -> None:
        (self.dir / rel).write_text(value)

    def open(self) -> bool:
        """Make the instance and enable its events (tracing off until begin())."""
        try:
            self.dir.mkdir()
            self._made = True
            self._write("trace_clock", "mono")
            self._write("buffer_size_kb", str(self.buffer_kb))
            for event in EVENTS:
                self._write(f"events/sched/{event}/enable", "1")
            self._write("tracing_on", "0")
        except OSError:
            self.close()
            return False
        return True

    def begin(self, running: Iterable[int] = ()) -> dict[int, tuple[float, int]]:
        """Clear the buffer and start recording; for the tasks already
        ``running`` that parse() must know (they fork no event now), when and
        on which CPU /proc saw each."""
        self._write("trace", "")  # (cleared)
        self._write("tracing_on", "1")
        return {pid: (time.monotonic(), last_cpu(pid)) for pid in running}

    def stop(self) -> None:
        """Stop recording (the events so far stay in the buffer)."""
        self._write("tracing_on", "0")

    def end(self) -> str:
        """Stop recording; the events since begin(), as tracefs prints them.
        RuntimeError if the buffer lost any (too small)."""
        self.stop()
        lost = sum(int(m) for m in re.findall(r"overrun: (\d+)", "".join(
            (cpu / "stats").read_text() for cpu in (self.dir / "per_cpu").iterdir())))
        if lost:
            raise RuntimeError(f"the trace lost {lost} events (a larger buffer_kb)")
        return (self.dir / "trace").read_text()

    def close(self) -> None:
        """Stop and remove the instance, if this object made it."""
        if not self._made:
            return
        try:
            self._write("tracing_on", "0")
        except OSError:
            pass
        try:
            self.dir.rmdir()
        except OSError:
            pass
        self._made = False
