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
probe were as its handler started.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched_process_fork", "sched_process_exec", "sched_process_exit", "sched_wakeup_new",
          "sched_migrate_task")
_LINE = re.compile(r"\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")
_FIELD = re.compile(r"\b(pid|child_pid|target_cpu|dest_cpu)=(\d+)")


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

    def moved(self, tid: int, t0: float, t1: float) -> bool:
        """Whether the task's CPU changed within (t0, t1]."""
        times = self.cpus.get(tid, ([], []))[0]
        return bisect.bisect_right(times, t1) > bisect.bisect_right(times, t0)

    def probe(self, client: int, worker: int, redis: int, t0: float,
              t1: float) -> tuple[str, list[str]]:
        """Where one enqueue->start probe ran: the three tasks' CPUs as its
        handler started (t1), and which of them changed CPU during it."""
        tasks = {"client": client, "worker": worker, "redis": redis}
        moved = [name for name, tid in tasks.items() if self.moved(tid, t0, t1)]
        c, w, r = (self._at(tid, t1) for tid in (client, worker, redis))
        if c is None or w is None or r is None:
            return "unknown", moved
        if c == w == r:
            return "one CPU", moved
        if w == r:
            return "producer apart", moved
        if c == r:
            return "worker apart", moved
        return ("Redis apart" if c == w else "unknown"), moved

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
            if int(f["pid"]) in p.tree:
                p.tree.add(int(f["child_pid"]))
            continue
        tid = int(f["pid"])
        if event == "sched_process_exec":
            p.execs[tid] = t
        elif event == "sched_process_exit":
            p.exits[tid] = t
        else:
            cpu = int(f["target_cpu"] if event == "sched_wakeup_new" else f["dest_cpu"])
            times, cpus = p.cpus.setdefault(tid, ([], []))
            times.append(t)
            cpus.append(cpu)
    return p


def last_cpu(pid: int, tid: int | None = None) -> int:
    """The CPU a task last ran on (field 39 of its stat)."""
    path = f"/proc/{pid}/task/{tid or pid}/stat"
    with open(path, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[36])


class SchedTrace:
    """The tracefs instance: open() it (False where tracefs cannot be
    written: no placement then), begin() before each bench process, end()
    after it, close() at the end."""

    def __init__(self, name: str | None = None, buffer_kb: int = 8192) -> None:
        self.dir = TRACEFS / "instances" / (name or f"leasequeue-bench-{os.getpid()}")
        self.buffer_kb = buffer_kb

    def _write(self, rel: str, value: str) -> None:
        (self.dir / rel).write_text(value)

    def open(self) -> bool:
        self._remove_stale()
        try:
            self.dir.mkdir()
            self._write("trace_clock", "mono")
            self._write("buffer_size_kb", str(self.buffer_kb))
            for event in EVENTS:
                self._write(f"events/sched/{event}/enable", "1")
            self._write("tracing_on", "0")
        except OSError:
            self.close()
            return False
        return True

    def _remove_stale(self) -> None:
        """Instances an earlier harness left behind (killed before its
        close()), its pid in the name and no longer running."""
        for stale in (TRACEFS / "instances").glob("leasequeue-bench-*"):
            pid = stale.name.rsplit("-", 1)[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    stale.rmdir()
                except OSError:
                    pass

    def begin(self) -> None:
        self._write("trace", "")  # (cleared)
        self._write("tracing_on", "1")

    def end(self) -> str:
        self._write("tracing_on", "0")
        lost = sum(int(m) for m in re.findall(r"overrun: (\d+)", "".join(
            (cpu / "stats").read_text() for cpu in (self.dir / "per_cpu").iterdir())))
        if lost:
            raise RuntimeError(f"the trace lost {lost} events (a larger buffer_kb)")
        return (self.dir / "trace").read_text()

    def close(self) -> None:
        try:
            self._write("tracing_on", "0")
        except OSError:
            pass
        try:
            self.dir.rmdir()
        except OSError:
            pass
