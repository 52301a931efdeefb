"""The command line: worker, exporter, demo, acl, stats, dead list|replay|purge, job
(--logs, --rerun), jobs, queues reshard|pause|resume, schedules
list|pause|resume|trigger, breakers list|open|close.

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
    if args.command == "acl":
        return _acl(args)
    try:
        result: int = anyio.run(_dispatch, args)
        return result
    except LeaseQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _demo(args: argparse.Namespace) -> int:
    if args.saga:
        from .demo_saga import run_saga_demo

        return await run_saga_demo(url=args.url)
    from .demo import run_demo

    return await run_demo(url=args.url, jobs=args.jobs)


async def _dispatch(args: argparse.Namespace) -> int:
    # the commands that make their own App (or none)
    standalone = {"worker": _worker, "exporter": _exporter, "demo": _demo,
                  "dashboard": _dashboard}
    if args.command in standalone:
        return await standalone[args.command](args)
    app = _app_from(args)
    try:
        if args.command == "stats":
            for queue in args.queue or app.known_queues():
                _print(asdict(await app.stats(queue)))
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
        elif args.command == "breakers":
            return await _breakers(app, args)
    finally:
        await app.close()
    return 0


def _acl(args: argparse.Namespace) -> int:
    """Print the ACL SETUSER line of a role (no Redis needed). The password
    comes from $LQ_ACL_PASSWORD and is printed only as its SHA-256."""
    from .acl import acl_setuser

    try:
        line = acl_setuser(args.user or f"lq-{args.role}", args.role, args.prefix,
                           args.queue or (), args.limiter_prefix,
                           os.environ.get("LQ_ACL_PASSWORD"), args.cluster)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(line)
    if "LQ_ACL_PASSWORD" not in os.environ:
        print("note: set LQ_ACL_PASSWORD to put its hash in the line instead of >CHANGE-ME",
              file=sys.stderr)
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
    if args.metrics_port is not None:
        from .metrics import PrometheusHooks, serve

        # the App may have added its own (with a registry of its own)
        hook = next((h for h in app.hooks if isinstance(h, PrometheusHooks)), None)
        if hook is None:
            hook = app.add_hook(PrometheusHooks())
        port = serve(args.metrics_port, args.metrics_addr, hook.registry)
        logging.getLogger("leasequeue").info("metrics on port %d", port)
    worker = Worker(app, args.queue or None, concurrency=args.concurrency,
                    worker_id=args.worker_id, lease=args.lease,
                    shutdown_timeout=args.shutdown_timeout, handle_signals=True,
                    allow_eviction=args.allow_eviction, reap_interval=args.reap_interval,
                    reap_backoff=(args.reap_backoff_base, args.reap_backoff_cap),
                    janitor_interval=args.janitor_interval)
    await worker.run()
    if worker.left_behind or worker.abandoned_cap_reached:
        # a thread that would not stop cannot be killed, and it would hold the
        # interpreter open: leave now (its job's lease lapses and it runs again)
        code = EXIT_ABANDONED if worker.abandoned_cap_reached else 0
        logging.shutdown()
        os._exit(code)
    await app.close()
    return 0


async def _dashboard(args: argparse.Namespace) -> int:
    try:
        from .dashboard.run import serve
    except ImportError as exc:
        raise ConfigError(f"the dashboard needs its extra: pip install 'leasequeue[dashboard]' "
                          f"({exc})") from None
    app = load_app(args.app) if args.app else None
    try:
        return await serve(args, app)
    finally:
        if app is not None:
            await app.close()


async def _exporter(args: argparse.Namespace) -> int:
    from .exporter import run_exporter

    app = _app_from(args)
    try:
        queues = args.queue or app.known_queues()
        await run_exporter(app, queues, args.port, args.addr, args.interval)
    finally:
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


async def _breakers(app: App, args: argparse.Namespace) -> int:
    if args.action == "list":
        states = await app.breaker_states()
        for state in states:
            _print(asdict(state))
        if not states:
            print(f"no breakers under limiter prefix {app.limiter_prefix!r}", file=sys.stderr)
        return 0
    if not args.name:
        raise ConfigError(f"breakers {args.action} needs the breaker's NAME")
    mode = "open" if args.action == "open" else "closed"
    changed = await app.force_breaker(args.name, mode, who=f"cli ({os.getenv('USER', '?')})")
    print(f"breaker {args.name}: {'forced ' + mode if changed else 'was ' + mode + ' already'}")
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
    w.add_argument("--janitor-interval", type=float, default=30.0,
                   help="seconds between passes of the resource ledger's TTL janitor")
    w.add_argument("--allow-eviction", action="store_true",
                   help="run even if Redis may evict keys (unsafe)")
    w.add_argument("--metrics-port", type=int, default=None,
                   help="serve this worker's Prometheus metrics on this port "
                   "(needs leasequeue[prometheus])")
    w.add_argument("--metrics-addr", default="0.0.0.0", help="address for --metrics-port")

    e = sub.add_parser("exporter", help="serve the queue gauges read from Redis to Prometheus "
                       "(one per cluster; needs leasequeue[prometheus])")
    e.add_argument("--app", help="MODULE:APP (its queues and limits; else --url and --prefix)")
    e.add_argument("--url", default="redis://localhost:6379/0")
    e.add_argument("--prefix", default="lq")
    e.add_argument("--queue", "-q", action="append",
                   help="queue to export (repeatable; default: the App's queues)")
    e.add_argument("--port", type=int, default=9808)
    e.add_argument("--addr", default="0.0.0.0")
    e.add_argument("--interval", type=float, default=5.0,
                   help="seconds between reads of Redis (default 5)")

    a = sub.add_parser("acl", help="print a least-privilege Redis ACL user for a role "
                                   "(SECURITY.md)")
    a.add_argument("--role", required=True, choices=["producer", "worker", "operator", "viewer"])
    a.add_argument("--prefix", required=True)
    a.add_argument("--queue", "-q", action="append",
                   help="producer / worker: only these queues (default: every queue)")
    a.add_argument("--limiter-prefix", help="default PREFIX:limiter")
    a.add_argument("--user", help="the ACL user name (default lq-ROLE)")
    a.add_argument("--cluster", action="store_true", help="add what a cluster client needs")

    d = sub.add_parser("demo", help="a guided demo: crash recovery and a poison job")
    d.add_argument("--url", default="memory://demo", help="default: embedded, no server")
    d.add_argument("--jobs", type=int, default=300)
    d.add_argument("--saga", action="store_true",
                   help="the saga demo instead: a crash mid-saga, a compensation")

    _dashboard_parser(sub)

    for name, text in (("stats", "queue statistics"),
                       ("job", "one job's record, its run logs (--logs), or re-run it (--rerun)"),
                       ("jobs", "list a queue's jobs in one state, a page at a time"),
                       ("dead", "dead letters: list, replay, purge"),
                       ("queues", "settings recorded in Redis: reshard QUEUE N, pause QUEUE, "
                                  "resume QUEUE"),
                       ("schedules", "schedules recorded in Redis: list, pause, resume, "
                                     "trigger NAME"),
                       ("breakers", "circuit breakers: list, open NAME (force open), close NAME "
                                    "(force closed)")):
        s = sub.add_parser(name, help=text)
        if name == "schedules":
            s.add_argument("action", choices=["list", "pause", "resume", "trigger"])
            s.add_argument("name", nargs="?", help="the schedule (all but list)")
        if name == "breakers":
            s.add_argument("action", choices=["list", "open", "close"])
            s.add_argument("name", nargs="?", help="the breaker (open, close)")
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
        elif name == "jobs":
            s.add_argument("--queue", "-q", required=True)
        elif name not in ("queues", "schedules", "breakers"):
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


def _dashboard_parser(sub: Any) -> None:
    s = sub.add_parser(
        "dashboard", help="serve the web dashboard (the leasequeue[dashboard] extra)",
        description="Serve the web dashboard. Actions (pause, replay, purge, ...) need "
        "LEASEQUEUE_DASHBOARD_TOKEN (signed in through the page, or sent as a Bearer "
        "header) or LEASEQUEUE_DASHBOARD_BASIC_AUTH=user:password; without either it is "
        "read-only.")
    s.add_argument("--app", help="MODULE:APP (else --url and --prefix)")
    s.add_argument("--url", default="redis://localhost:6379/0")
    s.add_argument("--prefix", default="lq")
    s.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; any other needs credentials)")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--allowed-host", action="append",
                   help="a Host name to answer to (repeatable; default: the loopback names "
                   "on a loopback --host, any name otherwise)")
    s.add_argument("--token-file", help="read the token from this file instead of the "
                   "environment")
    s.add_argument("--read-only", action="store_true", help="refuse every action")
    s.add_argument("--auth-reads", action="store_true",
                   help="every page needs credentials (always on for a non-loopback --host)")
    s.add_argument("--queue", "-q", action="append",
                   help="a queue to show besides those recorded in Redis (repeatable)")
    s.add_argument("--limit", action="append",
                   help="a limit name to show on the limits page (repeatable)")
    s.add_argument("--limiter-prefix", help="the RedisLimiter prefix (default PREFIX:limiter)")
    s.add_argument("--page-size", type=int, default=50, help="jobs per page (default 50)")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
