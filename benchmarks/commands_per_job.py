"""Redis commands per job for a drain of no-op jobs (INFO commandstats, the
commands Lua runs included): a count, not a rate, so it is steady on a busy
machine. Compare two trees by running it under each one's PYTHONPATH:

  PYTHONPATH=<tree> python benchmarks/commands_per_job.py --port 6399 --retention 0

It needs a redis-server on --port that nothing else uses (it resets the stats)."""

from __future__ import annotations

import argparse
import time

import anyio
import redis

import leasequeue as lq


async def drain(port: int, jobs: int, retention: float, concurrency: int) -> str:
    app = lq.App(f"redis://127.0.0.1:{port}/0", prefix=f"cpj{time.time_ns()}")

    @app.job(retention=retention)
    async def noop(ctx: lq.Context) -> None:
        return None

    await app.enqueue_many([lq.JobRequest("noop", {}) for _ in range(jobs)])
    r = redis.Redis(port=port)
    r.config_resetstat()
    worker = lq.Worker(app, concurrency=concurrency, lease=30)
    stats_key = app.keys("default").stats
    polls = 0  # one HGET each, taken off the count
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        while int(await app.redis.hget(stats_key, "succeeded") or 0) < jobs:
            polls += 1
            await anyio.sleep(0.02)
        polls += 1
        worker.stop()
    stats = r.info("commandstats")
    r.close()
    await app.close()
    calls = sum(v["calls"] for k, v in stats.items()
                if k not in ("cmdstat_config", "cmdstat_info")) - polls
    scripts = stats.get("cmdstat_evalsha", {}).get("calls", 0)
    return (f"retention={retention} jobs={jobs} concurrency={concurrency} "
            f"commands/job={calls / jobs:.3f} script calls/job={scripts / jobs:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--retention", type=float, default=86400.0)
    ap.add_argument("--concurrency", type=int, default=50)
    args = ap.parse_args()
    print(anyio.run(drain, args.port, args.jobs, args.retention, args.concurrency))


if __name__ == "__main__":
    main()
