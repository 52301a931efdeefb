"""The circuit-breaker part of `leasequeue demo`: a dependency goes down,
its breaker trips after 5 infrastructure failures, the other jobs wait
(no attempt spent) while one probe per half-open period tries it, and the
breaker closes once the dependency is back."""

from __future__ import annotations

import time
from typing import Any

import anyio

from .app import App, JobRequest
from .backoff import fixed
from .context import Context
from .errors import TransientError
from .store.keys import breaker_keys
from .worker import Worker

JOBS = 40


async def breaker_phase(app: App) -> tuple[bool, str]:
    """Run the phase on ``app``: (every job succeeded on attempt 1, a summary line)."""
    api = app.breaker("flaky-api", failures=5, window=10, cooldown=0.5, max_cooldown=1.0)
    down = {"now": True}
    calls = {"down": 0}

    @app.job(queue="demo-api", breakers=[api], max_attempts=1, max_infra_attempts=1000,
             infra_backoff=fixed(0.05))
    async def call_api(ctx: Context, n: int) -> int:
        if down["now"]:
            calls["down"] += 1
            raise TransientError("flaky-api: connection refused")
        return n

    print(f"\n-- circuit breaker: {JOBS} jobs call flaky-api, which is down --")
    await app.enqueue_many([JobRequest("call_api", {"n": i}, job_id=f"api-{i}")
                            for i in range(JOBS)])
    events = breaker_keys(app.limiter_prefix, api.name).events
    worker = Worker(app, ["demo-api"], concurrency=4, worker_id="worker-api", lease=2.0,
                    shutdown_timeout=5)
    seen = failed_probes = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await anyio.sleep(0.05)
            rows: Any = await app.redis.xrange(events)
            for _, fields in rows[seen:]:
                seen += 1
                event, detail = fields[b"event"].decode(), fields[b"detail"].decode()
                print(f"** breaker {event}: {detail}")
                failed_probes += event == "reopened"
                if failed_probes == 2 and down["now"]:  # two failed probes, then it is back
                    down["now"] = False
                    print("** flaky-api is back")
            st = await app.stats("demo-api")
            if st.counters.get("succeeded", 0) >= JOBS:
                break
        worker.stop()
    records = [await app.get_job(f"api-{i}", "demo-api") for i in range(JOBS)]
    first_try = sum(1 for r in records if r.state == "succeeded" and r.attempt == 1)
    return first_try == JOBS, (
        f"circuit breaker: flaky-api tripped after 5 infrastructure failures and closed "
        f"after {failed_probes} failed probe(s); {first_try}/{JOBS} jobs succeeded on their "
        f"first attempt, flaky-api called {calls['down']} times while down")
