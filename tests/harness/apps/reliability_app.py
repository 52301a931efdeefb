"""The App that reliability-test worker processes run (``leasequeue worker
tests.harness.apps.reliability_app:app``). Everything comes from the environment:

- ``LQ_URL`` / ``LQ_PREFIX``: where the queue lives (``LQ_URL`` may point at a
  TCP proxy in front of Redis);
- ``LQ_RECORD_URL``: where executions are recorded (default ``LQ_URL``). The
  network-cut test points it straight at Redis, so a worker behind a cut proxy
  still leaves evidence of what it ran;
- ``LQ_AUDIT=1``: also write the hot transitions (claimed, succeeded) to the
  events stream, so a test can count accepted completions per job;
- ``LQ_CLOCK_SKEW``: seconds added to this process's wall clock (time.time and
  time.time_ns), patched at import, before anything reads the clock.

Every run appends ``"<start|end> <job> <token> <worker> <client wall ms>"`` to
the list ``<prefix>:test:executions``.
"""

from __future__ import annotations

import os
import signal
import time

import anyio
from redis.asyncio import Redis

from leasequeue import App, Context
from leasequeue.store.settings import StoreSettings

SKEW_S = float(os.environ.get("LQ_CLOCK_SKEW", "0") or 0)
if SKEW_S:
    _real_time, _real_time_ns = time.time, time.time_ns
    time.time = lambda: _real_time() + SKEW_S
    time.time_ns = lambda: _real_time_ns() + int(SKEW_S * 1e9)

URL = os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0")
app = App(URL, prefix=os.environ.get("LQ_PREFIX", "lqtest"),
          settings=StoreSettings(audit_all=os.environ.get("LQ_AUDIT") == "1"))
EXEC_KEY = f"{app.prefix}:test:executions"

_recorder: Redis | None = None


def _record_client() -> Redis:
    # created lazily: the worker's event loop must exist before the client is used
    global _recorder
    if _recorder is None:
        _recorder = Redis.from_url(os.environ.get("LQ_RECORD_URL", URL))
    return _recorder


async def record(kind: str, ctx: Context) -> None:
    client_ms = int(time.time() * 1000)  # the (possibly skewed) client clock
    await _record_client().rpush(
        EXEC_KEY, f"{kind} {ctx.job_id} {ctx.token} {ctx.worker_id} {client_ms}")


@app.job(max_attempts=50, timeout=120)
async def work(ctx: Context, seconds: float = 0.0) -> None:
    """A job that takes ``seconds``; the budget and backoff come from the enqueue."""
    await record("start", ctx)
    if seconds:
        await anyio.sleep(seconds)
    await record("end", ctx)


@app.job(max_attempts=2, timeout=120)
async def poison(ctx: Context) -> None:
    """Kills the process that runs it, every time (a segfaulting C extension, an
    OOM kill): only lease expiry can tell, and it must count as an attempt."""
    await record("start", ctx)
    os.kill(os.getpid(), signal.SIGKILL)
