"""The command line: worker, demo, stats, dead list|replay|purge, job
(--logs, --rerun), jobs, queues reshard|pause|resume, schedules
list|pause|resume|trigger.

Only argument parsing and printing live here; the work is done by App,
Worker and demo.py."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from dataclasses import asdict
from typing import Any

import anyio

from . import log
from .app import App
from .errors import ConfigError, LeaseQueueError
from .store.connection import is_memory_url

EXIT_ABANDONED = 3  # the worker stopped because handler threads would not stop


def load_app(target: str) -> App:
    """Import ``module:attribute`` and return the App found there."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"expected MODULE:APP, got {target!r}")
    sys.path.insert(0, os.getcwd())
    app = getattr(importlib.import_module(module_name), attr)
    if not isinstance(app, App):
        raise SystemExit(f"{target} is a {type(app).__name__}, not a leasequeue.App")
    return app


def _app_from(args: argparse.Namespace) -> App:
    if args.app:
        return load_app(args.app)
    return App(args.url, prefix=args.prefix)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    log.configure(args.log_level.upper())
    try:
        result: int = anyio.run(_dispatch, args)
        return result
    except LeaseQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _stats(app: App, args: argparse.Namespace) -> None:
    if args.limits:
        for entry in await app.limit_stats(args.key):
            _print(entry)
        return
    for queue in args.queue or app.known_queues():
        _print(asdict(await app.stats(queue)))


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "worker":
        return await _worker(args)
    if args.command == "demo":
        from .demo import run_demo

        return await run_demo(url=args.url, jobs=args.jobs)
    app = _app_from(args)
    try:
        if args.command == "stats":
            await _stats(app, args)
        elif args.command == "job":
            return await _job(app, args)
        elif args.command == "jobs":
            records, cursor = await app.jobs(args.queue, args.state, args.cursor, args.count,
                                             args.correlation_id)
            for record in records:
                _print(_summary(record))
            print(f"next cursor: {cursor}" if cursor else "end", file=sys.stderr)
        elif args.command == "dead":
            return await _dead(app, args)
        elif args.command == "schedules":
            return await _schedules(app, args)
        elif args.command == "queues":
            return await _queues(app, args)
    finally:
        await app.close()
    return 0


async def _worker(args: argparse.Namespace) -> int:
    from .worker import Worker

    app = load_app(args.app)
    if is_memory_url(app.url):
        # an embedded store lives inside one process: a worker started here
        # would wait forever on an empty store of its own
        raise ConfigError(
            f"{args.app} uses {app.url}: an embedded memory:// store cannot be shared "
            "between processes. Run the worker in the producer's process "
            "(await Worker(app).run()), try `leasequeue demo`, or use a redis:// URL."
        )
    worker = Worker(app, args.queue or None, concurrency=args.concurrency,
                    worker_id=args.worker_id, lease=args.lease,
                    shutdown_timeout=args.shutdown_timeout, handle_signals=True,
                    allow_eviction=args.allow_eviction, reap_interval=args.reap_interval,
                    reap_backoff=(args.reap_backoff_base, args.reap_backoff_cap))
    await worker.run()
    if worker.left_behind or worker.abandoned_cap_reached:
        # a thread that would not stop cannot be killed, and it would hold the
        # interpreter open: leave now (its job's lease lapses and it runs again)
        code = EXIT_ABANDONED if worker.abandoned_cap_reached else 0
        logging.shutdown()
        os._exit(code)
    await app.close()
    return 0


async def _job(app: App, args: argparse.Namespace) -> int:
    if args.rerun:
        new_id = await app.rerun(args.id, args.queue)
        print(f"job {args.id} re-run as {new_id}")
        return 0
    record = await app.get_job(args.id, args.queue)
    if not args.logs:
        _print(asdict(record))
        return 0
    if not record.logs:
        print(f"job {args.id}: no run logs kept (its run_logs policy, or no run logged)")
    for run in record.logs:
        print(f"--- attempt {run.attempt}: {run.outcome} (at {run.at_ms} ms)")
        for line in run.lines:
            print(line)
    return 0


async def _queues(app: App, args: argparse.Namespace) -> int:
    if args.action == "reshard":
        if args.shards is None:
            raise ConfigError("queues reshard needs the new shard count")
        old = await app.reshard(args.queue, args.shards)
        print(f"queue {args.queue}: {old} -> {args.shards} shard(s) recorded; restart its "
              f"producers and workers with queue_shards={{{args.queue!r}: {args.shards}}}")
    elif args.action == "pause":
        await app.pause(args.queue)
        print(f"queue {args.queue} paused: nothing new starts; running jobs finish")
    else:
        await app.resume(args.queue)
        print(f"queue {args.queue} resumed")
    return 0


def _summary(record: Any) -> dict[str, Any]:
    """One line of `leasequeue jobs`."""
    return {k: getattr(record, k) for k in (
        "id", "name", "state", "attempt", "work_failures", "infra_failures", "correlation_id",
        "enqueued_ms", "finished_ms", "reason", "error", "rerun_of")}


async def _dead(app: App, args: argparse.Namespace) -> int:
    queue = args.queue or app.registry.defaults.queue
    if args.action == "list":
        for entry in reversed(await app.dead_letters(queue, args.count)):
            _print(entry)
    elif args.action == "replay":
        n = await app.replay(args.ids or None, queue=queue, limit=args.count)
        print(f"replayed {n} job(s) from {queue}")
    elif args.action == "purge":
        n = await app.purge_dead(queue)
        print(f"purged {n} dead job(s) from {queue}")
    return 0


async def _schedules(app: App, args: argparse.Namespace) -> int:
    if args.action == "list":
        now, records = await app.schedules.list()
        for rec in records:
            _print(rec.describe(now))
        if not records:
            print(f"no schedules recorded under prefix {app.prefix!r}", file=sys.stderr)
        return 0
    if not args.name:
        raise ConfigError(f"schedules {args.action} needs the schedule's NAME")
    if args.action == "trigger":
        job = await app.schedules.trigger(args.name)
        print(f"schedule {args.name}: enqueued {job.id} on {job.queue} ({job.state})")
    elif args.action == "pause":
        changed = await app.schedules.pause(args.name)
        print(f"schedule {args.name}: {'paused' if changed else 'was paused already'}")
    else:
        changed = await app.schedules.resume(args.name)
        print(f"schedule {args.name}: {'resumed' if changed else 'was not paused'}")
    return 0


def _print(obj: Any) -> None:
    print(json.dumps(obj, default=str))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leasequeue", description=__doc__)
    p.add_argument("--log-level", default="info", help="debug, info, warning (default info)")
    sub = p.add_subparsers(dest="command")

    w = sub.add_parser("worker", help="run a worker for MODULE:APP")
    w.add_argument("app", help="MODULE:APP, e.g. myproject.tasks:app")
    w.add_argument("--queue", "-q", action="append", help="queue to consume (repeatable)")
    w.add_argument("--concurrency", "-c", type=int, default=10)
    w.add_argument("--worker-id")
    w.add_argument("--lease", type=float, default=30.0, help="lease seconds (default 30)")
    w.add_argument("--shutdown-timeout", type=float, default=30.0)
    w.add_argument("--reap-interval", type=float, default=None,
                   help="seconds between reaper ticks (default min(5, lease/2))")
    w.add_argument("--reap-backoff-base", type=float, default=1.0,
                   help="a reaped job waits base * 2^(attempt-1) s (default 1)")
    w.add_argument("--reap-backoff-cap", type=float, default=60.0,
                   help="... capped at this many seconds (default 60)")
    w.add_argument("--allow-eviction", action="store_true",
                   help="run even if Redis may evict keys (unsafe)")

    d = sub.add_parser("demo", help="a guided demo: crash recovery and a poison job")
    d.add_argument("--url", default="memory://demo", help="default: embedded, no server")
    d.add_argument("--jobs", type=int, default=300)

    for name, text in (("stats", "queue statistics"),
                       ("job", "one job's record, its run logs (--logs), or re-run it (--rerun)"),
                       ("jobs", "list a queue's jobs in one state, a page at a time"),
                       ("dead", "dead letters: list, replay, purge"),
                       ("queues", "settings recorded in Redis: reshard QUEUE N, pause QUEUE, "
                                  "resume QUEUE"),
                       ("schedules", "schedules recorded in Redis: list, pause, resume, "
                                     "trigger NAME")):
        s = sub.add_parser(name, help=text)
        if name == "schedules":
            s.add_argument("action", choices=["list", "pause", "resume", "trigger"])
            s.add_argument("name", nargs="?", help="the schedule (all but list)")
        if name == "queues":
            s.add_argument("action", choices=["reshard", "pause", "resume"])
            s.add_argument("queue", help="the logical queue")
            s.add_argument("shards", type=int, nargs="?",
                           help="reshard: the new shard count (1 = not sharded); refused "
                           "unless the queue is drained")
        s.add_argument("--app", help="MODULE:APP (else --url and --prefix)")
        s.add_argument("--url", default="redis://localhost:6379/0")
        s.add_argument("--prefix", default="lq")
        if name == "stats":
            s.add_argument("--queue", "-q", action="append")
            s.add_argument("--limits", action="store_true",
                           help="each declared limit's state instead (needs --app)")
            s.add_argument("--key", help="with --limits: the state of this key of keyed limits")
        elif name == "jobs":
            s.add_argument("--queue", "-q", required=True)
        elif name not in ("queues", "schedules"):
            s.add_argument("--queue", "-q")
        if name == "job":
            s.add_argument("id")
            s.add_argument("--logs", action="store_true", help="print the kept run logs")
            s.add_argument("--rerun", action="store_true",
                           help="run this finished job again as a new job")
        if name == "jobs":
            s.add_argument("--state", "-s", required=True,
                           choices=["queued", "ready", "scheduled", "leased", "done", "dead"])
            s.add_argument("--cursor", help="the cursor the previous page printed")
            s.add_argument("--count", type=int, default=100)
            s.add_argument("--correlation-id", help="only jobs with this correlation id")
        if name == "dead":
            s.add_argument("action", choices=["list", "replay", "purge"])
            s.add_argument("ids", nargs="*", help="job ids to replay (default: the oldest)")
            s.add_argument("--count", type=int, default=100)
    return p


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
