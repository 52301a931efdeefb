"""`leasequeue demo`: a few hundred jobs, three workers, one of them crashed
mid-job, and a poison job that kills every worker that runs it. Shows the
reaper recovering the crashed worker's jobs, the poison job landing in the
dead letters, and a schedule firing once a second across the workers. Runs
on the embedded memory:// store unless given a URL."""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

import anyio

from .app import App, JobRequest
from .context import Context
from .demo_breaker import breaker_phase
from .redact import redact_url
from .worker import Worker

LEASE = 2.0


@dataclass
class Cluster:
    """The demo's workers; a crash cancels a worker's scope with no cleanup at
    all (no release, no ack), exactly what SIGKILL leaves behind."""

    app: App
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    crash_requests: list[str] = field(default_factory=list)
    started: int = 0

    def new_worker(self, tg: anyio.abc.TaskGroup) -> str:
        self.started += 1
        worker_id = f"worker-{self.started}"
        worker = Worker(self.app, ["demo", "demo-cron"], concurrency=8, worker_id=worker_id,
                        lease=LEASE, reap_interval=0.5, reap_backoff=(0.0, 0.0), shutdown_timeout=5)
        self.workers[worker_id] = worker
        tg.start_soon(self._run, worker_id, worker)
        return worker_id

    async def _run(self, worker_id: str, worker: Worker) -> None:
        with anyio.CancelScope() as scope:
            self.scopes[worker_id] = scope
            await worker.run()

    def crash(self, worker_id: str) -> list[str]:
        held = [run.job.id for run in self.workers[worker_id].table]
        self.scopes.pop(worker_id).cancel()
        self.workers.pop(worker_id)
        return held


def _say(text: str) -> None:
    print(f"\r{' ' * 78}\r{text}", flush=True)


_last_bar = [""]


def _bar(done: int, total: int, note: str) -> None:
    width = 40
    filled = int(width * done / max(1, total))
    text = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note:<20}"
    if text != _last_bar[0]:  # redraw only on change (keeps piped output short)
        _last_bar[0] = text
        sys.stdout.write(text)
        sys.stdout.flush()


async def run_demo(url: str = "memory://demo", jobs: int = 300) -> int:
    app = App(url, prefix=f"demo{int(time.time())}")
    cluster = Cluster(app)

    # a crash charges an attempt to every run its worker had started: a healthy
    # job can share a worker with the poison job on each of its 3 crashes and
    # be on the crashed worker too (4 charges), so it gets 5 attempts
    @app.job(queue="demo", max_attempts=5)
    async def resize(ctx: Context, image: int) -> int:
        await anyio.sleep(random.uniform(0.005, 0.03))
        return image * 2

    @app.job(queue="demo", max_attempts=3)
    async def poison(ctx: Context) -> None:
        # stands for a job that segfaults or OOMs its worker every time
        cluster.crash_requests.append(ctx.worker_id)
        await anyio.sleep_forever()

    # every worker runs the scheduler loop, none is the leader: each fire is
    # taken by one of them and enqueued as schedule:heartbeat:<fire ms>
    fired: list[str] = []

    @app.job(queue="demo-cron")
    async def heartbeat(ctx: Context) -> None:
        fired.append(ctx.job_id)
        if len(fired) <= 3:
            _say(f"** schedule fired: {ctx.job_id} (run by {ctx.worker_id})")

    app.schedule("heartbeat", "heartbeat", every=timedelta(seconds=1))

    print(f"leasequeue demo on {redact_url(url)}: {jobs} jobs, 3 workers, lease {LEASE}s, "
          "a schedule every 1s\n")
    await app.enqueue_many([JobRequest("resize", {"image": i}, job_id=f"img-{i}")
                            for i in range(jobs)])
    await app.enqueue("poison", job_id="poison-1")
    total = jobs + 1
    crashed_held: list[str] = []
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            cluster.new_worker(tg)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            await anyio.sleep(0.05)
            st = await app.stats("demo")
            done = st.counters.get("succeeded", 0) + st.dead
            _bar(done, total, f"leased {st.leased}")
            if not crashed_held and done >= total // 3:
                victim = next(iter(cluster.workers))
                crashed_held = cluster.crash(victim)
                _say(f"** crashed {victim} while it held {len(crashed_held)} job(s): "
                     f"{', '.join(crashed_held[:4])}{' ...' if len(crashed_held) > 4 else ''}")
                _say(f"   their leases run out in {LEASE}s; the reaper hands them back")
                cluster.new_worker(tg)
            while cluster.crash_requests:
                victim = cluster.crash_requests.pop()
                if victim in cluster.workers:
                    taken = [j for j in cluster.crash(victim) if j != "poison-1"]
                    rec = await app.get_job("poison-1", "demo")
                    also = f", taking {', '.join(taken[:4])} down with it" if taken else ""
                    # the budget is the definition's: the record holds "unset"
                    budget = app.registry.get("poison").max_attempts
                    _say(f"** poison-1 killed {victim} (attempt {rec.attempt} of {budget})"
                         f"{also}; starting a new worker")
                    cluster.new_worker(tg)
            if done >= total and st.leased == 0:
                break
        for worker in cluster.workers.values():
            worker.stop()
    print()
    print(f"\nschedule heartbeat fired {len(fired)} time(s), each instant once: "
          f"{len(set(fired)) == len(fired)}")
    breaker_ok = await breaker_phase(app)
    return await _report(app, crashed_held, jobs) or (0 if breaker_ok else 1)


async def _report(app: App, crashed_held: list[str], jobs: int) -> int:
    st = await app.stats("demo")
    poison = await app.get_job("poison-1", "demo")
    # the crashed worker may have held a schedule fire too (queue demo-cron)
    recovered = [await app.get_job(job_id) for job_id in crashed_held]
    print("\nrecovered from the crashed worker:")
    for rec in recovered[:5]:
        print(f"  {rec.id}: {rec.state} on attempt {rec.attempt} by {rec.worker}")
    letters = await app.dead_letters("demo")
    print("\ndead letters:")
    for entry in letters:
        print(f"  {entry['job']}: reason {entry['reason']} after {entry['attempt']} attempts")
    succeeded = st.counters.get("succeeded", 0)
    lost = jobs + 1 - succeeded - st.dead - st.ready - st.scheduled - st.leased
    print(f"\nsucceeded {succeeded}/{jobs}, dead {st.dead}, still queued {st.ready}, "
          f"leased {st.leased}: lost {lost}")
    await app.close()
    ok = succeeded == jobs and poison.state == "dead" and poison.reason == "lease-expired"
    return 0 if ok else 1
