"""`leasequeue demo`: a few hundred jobs, three workers, one of them killed
mid-job, a poison job that kills every worker that runs it, and a schedule
firing once a second across the workers; then a summary to read in five
seconds. With a Redis URL the workers are real processes and the kill is a
SIGKILL; on memory:// (the default: no server) they are tasks in this
process and a kill cancels one with no cleanup.

The demo is a list of scenes (Load, Crash, Poison, Schedule): each enqueues
its jobs, acts on every tick, and writes one summary line. Add a scene to
show another feature. Workers' JSON log lines go to a log file, named at the
end, never into the progress display."""

from __future__ import annotations

import itertools
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Protocol

import anyio

from . import log
from .app import App, JobRequest
from .audit import read_audit
from .demo_app import CRON_QUEUE, POISON_ATTEMPTS, QUEUE, build_app
from .demo_breaker import breaker_phase
from .demo_workers import LEASE, ProcessWorkers, TaskWorkers, Workers
from .models import JobRecord, QueueStats
from .redact import redact_url
from .store.connection import is_memory_url

WORKERS = 3
DEADLINE = 120.0


@dataclass
class Stage:
    """What every scene sees: the App, the workers, the latest stats of the
    demo queue, and how to print a line."""

    app: App
    workers: Workers
    say: Callable[[str], None]
    stats: QueueStats | None = None

    @property
    def done(self) -> int:
        st = self.stats
        return 0 if st is None else st.counters.get("succeeded", 0) + st.dead


class Scene(Protocol):
    total: int  # jobs of the demo queue this scene waits for

    async def setup(self, stage: Stage) -> None: ...

    async def tick(self, stage: Stage) -> None: ...

    async def finished(self, stage: Stage) -> bool:
        """Whether the scene has shown what it shows (the demo ends when every
        scene has and the demo queue is drained)."""

    async def summary(self, stage: Stage) -> tuple[bool, str]:
        """(it went as it should, one line for the summary)."""


@dataclass
class Load:
    """Healthy jobs: every one must succeed, none lost."""

    total: int

    async def setup(self, stage: Stage) -> None:
        await stage.app.enqueue_many([JobRequest("resize", {"image": i}, job_id=f"img-{i}")
                                      for i in range(self.total)])

    async def tick(self, stage: Stage) -> None:
        return None

    async def finished(self, stage: Stage) -> bool:
        return True  # the demo queue's counts say it

    async def summary(self, stage: Stage) -> tuple[bool, str]:
        st = await stage.app.stats(QUEUE)
        succeeded = st.counters.get("succeeded", 0)
        unfinished = st.ready + st.scheduled + st.leased
        lost = self.total + 1 - succeeded - st.dead - unfinished  # + 1: the poison job
        return (succeeded == self.total and lost == 0,
                f"{self.total} healthy jobs: {succeeded} succeeded, {lost} lost")


@dataclass
class Crash:
    """Kill a worker while it holds jobs, once a third of the work is done;
    the reaper hands its jobs to the others when their leases lapse."""

    total: int = 0
    victim: str = ""
    held: list[str] = field(default_factory=list)
    replacement: str = ""

    async def setup(self, stage: Stage) -> None:
        return None

    async def tick(self, stage: Stage) -> None:
        if self.victim or stage.stats is None:
            return
        if stage.done < (stage.stats.counters.get("enqueued", 0)) // 3:
            return
        holders: dict[str, int] = {}
        leased = await _leased(stage.app)
        poisoned = {r.worker for r in leased if r.id == "poison-1"}  # the poison scene's
        for rec in leased:
            if rec.worker in stage.workers.alive() and rec.worker not in poisoned:
                holders[rec.worker] = holders.get(rec.worker, 0) + 1
        if not holders:
            return
        victim = max(holders, key=lambda w: holders[w])
        stage.workers.kill(victim)
        self.replacement = stage.workers.start()
        await stage.workers.gone(victim)
        # what it held once it can write nothing more (its last calls on the
        # wire landed: acks settled jobs, a claim leased more), read after the
        # fact, never from a look before the kill, which races those calls:
        # what it still holds, and what the reaper already took from it (when
        # the killed task took long to end, the reaper may have taken it all)
        held = [r.id for r in await _leased(stage.app) if r.worker == victim]
        held += await _reaped_from(stage.app, victim)
        held = [job_id for job_id in dict.fromkeys(held) if job_id != "poison-1"]
        how = "SIGKILL" if stage.workers.kind == "processes" else "task cancelled"
        if not held:  # its last acks were on the wire: they landed, nothing to recover
            stage.say(f"** killed {victim} ({how}) just as its last jobs finished; "
                      f"started {self.replacement}, will kill another")
            return
        self.victim, self.held = victim, held
        shown = ", ".join(held[:4]) + (" ..." if len(held) > 4 else "")
        stage.say(f"** killed {victim} ({how}) while it held {len(held)} job(s): {shown}")
        stage.say(f"   their leases lapse in {LEASE:g}s, the reaper hands them to the others; "
                  f"started {self.replacement}")

    async def finished(self, stage: Stage) -> bool:
        # once the demo queue is drained (the loop asks only then) no worker
        # can hold a job any more: the summary says whether a kill came
        return True

    async def summary(self, stage: Stage) -> tuple[bool, str]:
        if not self.victim:
            return False, "crash: no worker held a job at the moment to kill one"
        reaped, finished_by, succeeded = 0, set(), 0
        for job_id in self.held:
            trail = await stage.app.audit(job_id=job_id, queue=QUEUE)
            if any(e.event in ("reaped", "reaped-unstarted") and e.by == "reaper" for e in trail):
                reaped += 1
            rec = await stage.app.get_job(job_id, QUEUE)
            if rec.state == "succeeded" and rec.worker:
                succeeded += 1
                finished_by.add(rec.worker)
        ok = (reaped == succeeded == len(self.held)) and self.victim not in finished_by
        by = ", ".join(sorted(finished_by)) or "-"
        return ok, (f"crash: {self.victim} killed holding {len(self.held)} job(s); "
                    f"{reaped} handed back by the reaper and run again by {by}")


@dataclass
class Poison:
    """A job that kills every worker that runs it ends in the dead letters
    after its attempts, instead of going round for ever."""

    total: int = 1
    kills: list[str] = field(default_factory=list)

    async def setup(self, stage: Stage) -> None:
        await stage.app.enqueue("poison", job_id="poison-1")

    async def tick(self, stage: Stage) -> None:
        for worker_id in stage.workers.died():
            self.kills.append(worker_id)
            rec = await stage.app.get_job("poison-1", QUEUE)
            new = stage.workers.start()
            stage.say(f"** poison-1 killed {worker_id} (attempt {rec.attempt} of "
                      f"{POISON_ATTEMPTS}); starting {new}")

    async def finished(self, stage: Stage) -> bool:
        return True  # the demo queue's counts say it

    async def summary(self, stage: Stage) -> tuple[bool, str]:
        rec = await stage.app.get_job("poison-1", QUEUE)
        letters = [e for e in await stage.app.dead_letters(QUEUE) if e["job"] == "poison-1"]
        ok = rec.state == "dead" and rec.reason == "lease-expired" and bool(letters)
        # a run can also end in the crash scene's kill: the claim that gave it
        # to the victim can land between that scene's look and its kill
        trail = await stage.app.audit(job_id="poison-1", queue=QUEUE)
        ran_on = dict.fromkeys(e.detail for e in trail if e.event == "claimed")
        others = [w for w in ran_on if w not in self.kills]
        also = (f" (its run on {', '.join(others)} ended when the crash scene killed "
                f"{'that worker' if len(others) == 1 else 'them'})" if others else "")
        return ok, (f"poison job: killed {len(self.kills)} worker(s){also}, then {rec.state} "
                    f"({rec.reason}) after {rec.attempt} attempts; in the dead letters")


@dataclass
class Schedule:
    """A schedule fires once a second; every worker runs the scheduler, each
    fire is taken by one of them and run once."""

    total: int = 0
    shown: int = 2  # fires to see run before the demo may end
    seen: int = 0

    async def setup(self, stage: Stage) -> None:
        return None

    async def tick(self, stage: Stage) -> None:
        return None

    async def finished(self, stage: Stage) -> bool:
        if self.seen < self.shown:
            self.seen = len(await self._fires(stage))
        return self.seen >= self.shown

    async def _fires(self, stage: Stage) -> list[JobRecord]:
        fires: list[JobRecord] = []
        cursor = None
        while True:
            page, cursor = await stage.app.jobs(CRON_QUEUE, "done", cursor, 1000)
            fires += [r for r in page if r.id.startswith("schedule:heartbeat:")]
            if cursor is None:
                return fires

    async def summary(self, stage: Stage) -> tuple[bool, str]:
        fires = await self._fires(stage)
        # one job per fire instant (its id), instants a period apart: no fire
        # was taken twice; a fire's job may still run twice (at-least-once),
        # when the worker running it was killed
        instants = sorted(int(r.id.rsplit(":", 1)[1]) for r in fires)
        spaced = all(b - a >= 1000 for a, b in itertools.pairwise(instants))
        again = sum(1 for r in fires if r.attempt > 1)
        takers = ", ".join(sorted({r.worker for r in fires if r.worker})) or "-"
        rerun = f", {again} run again after a kill" if again else ""
        return (bool(fires) and spaced,
                f"schedule 'heartbeat': fired {len(fires)} time(s), one job per fire "
                f"instant, 1s apart, run by {takers}{rerun}")


async def _reaped_from(app: App, worker_id: str) -> list[str]:
    """The jobs the reaper took from ``worker_id`` (its audit trail's reaped
    events name the holder whose lease lapsed)."""
    trail = await read_audit(app.redis, app.url, [app.keys(QUEUE)], job_id=None,
                             correlation_id=None, count=app.settings.events_maxlen)
    return [e.job_id for e in trail if e.event in ("reaped", "reaped-unstarted")
            and e.by == "reaper" and e.detail == worker_id]


async def _leased(app: App) -> list[JobRecord]:
    records, _ = await app.jobs(QUEUE, "leased", count=1000)
    return records


class Display:
    """The progress bar (redrawn in place on a terminal, every quarter when
    piped) and the event lines."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = ""
        self.quarter = -1

    def say(self, text: str) -> None:
        if self.tty:
            self.out.write(f"\r{' ' * 78}\r")
        self.out.write(text + "\n")
        self.out.flush()

    def bar(self, done: int, total: int, note: str) -> None:
        width = 40
        filled = int(width * done / max(1, total))
        text = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note:<20}"
        if self.tty and text != self.last:
            self.last = text
            self.out.write("\r" + text)
            self.out.flush()
        elif not self.tty and done * 4 // max(1, total) > self.quarter:
            self.quarter = done * 4 // max(1, total)
            self.say(text.rstrip())


async def run_demo(url: str = "memory://demo", jobs: int = 300,
                   log_file: str | None = None) -> int:
    real = not is_memory_url(url)
    prefix = f"demo{int(time.time() * 1000)}"
    path = log_file or tempfile.mkstemp(prefix="leasequeue-demo-", suffix=".log")[1]
    display = Display(sys.stdout)
    logger = logging.getLogger(log.ROOT)
    saved = (logger.handlers[:], logger.level, logger.propagate)
    sink, text_sink = _open_log(path)
    log.configure(logging.INFO, stream=text_sink)
    try:
        return await _run(url, prefix, jobs, real, sink, display, path)
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        sink.close()
        text_sink.close()


def _open_log(path: str) -> tuple[IO[bytes], IO[str]]:
    """The log file, for the worker processes' output and for this process's
    own log lines."""
    return open(path, "ab"), open(path, "a", encoding="utf-8")


async def _run(url: str, prefix: str, jobs: int, real: bool, sink: IO[bytes],
               display: Display, path: str) -> int:
    say = display.say
    if real:
        say(f"leasequeue demo on {redact_url(url)} (prefix {prefix}): {jobs} jobs, "
            f"{WORKERS} worker processes, lease {LEASE:g}s, a schedule every 1s. A kill is a "
            "real SIGKILL.")
    else:
        say(f"leasequeue demo on {redact_url(url)}: {jobs} jobs, {WORKERS} workers, "
            f"lease {LEASE:g}s, a schedule every 1s.")
        say("memory:// runs every worker as a task of this one process: a kill cancels "
            "the task without letting it ack or release what it holds. Give --url "
            "redis://... to kill real worker processes.")
    say("")
    scenes: list[Scene] = [Load(jobs), Crash(), Poison(), Schedule()]
    total = sum(s.total for s in scenes)
    async with anyio.create_task_group() as tg:
        app = build_app(url, prefix)  # enqueues and reads; runs nothing
        workers: Workers = (ProcessWorkers(url, prefix, sink) if real
                            else TaskWorkers(url, prefix, tg))
        stage = Stage(app, workers, say)
        try:
            for scene in scenes:
                await scene.setup(stage)
            for _ in range(WORKERS):
                workers.start()
            deadline = time.monotonic() + DEADLINE
            while time.monotonic() < deadline:
                await anyio.sleep(0.05)
                stage.stats = await app.stats(QUEUE)
                display.bar(stage.done, total, f"leased {stage.stats.leased}")
                for scene in scenes:
                    await scene.tick(stage)
                if stage.done >= total and stage.stats.leased == 0 and all(
                        [await scene.finished(stage) for scene in scenes]):
                    break
        finally:
            await workers.stop()
    try:
        # then a circuit breaker trips and recovers (a worker in this process)
        breaker = await breaker_phase(app)
        return await _summary(stage, scenes, path, [breaker])
    finally:
        await workers.close()
        await app.close()


async def _summary(stage: Stage, scenes: list[Scene], path: str,
                   more: list[tuple[bool, str]]) -> int:
    results = [*[await scene.summary(stage) for scene in scenes], *more]
    stage.say("")
    stage.say("Summary")
    for ok, line in results:
        stage.say(f"  {'ok  ' if ok else 'FAIL'} {line}")
    stage.say(f"  workers' log lines: {path}")
    return 0 if all(ok for ok, _ in results) else 1
