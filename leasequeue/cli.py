"""The command line: worker, exporter, dashboard, demo, acl, stats, check, job,
jobs, audit, dead list|replay|purge, queues reshard|pause|resume, schedules
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

from . import __version__, log
from .app import App
from .errors import ConfigError, LeaseQueueError
from .loops import LOOPS, backend_options
from .store.connection import is_memory_url
from .store.specs import ReplayReply

EXIT_ABANDONED = 3  # the worker stopped because handler threads would not stop
EXIT_CHECK_FAILED = 1  # `check`: a queue is over a threshold (errors exit 1 too)
URL_ENV, PREFIX_ENV = "LEASEQUEUE_URL", "LEASEQUEUE_PREFIX"
DEFAULT_URL = "redis://localhost:6379/0"
REPLAY_PAGE = 500

DESCRIPTION = """\
leasequeue: a Redis job queue. Run workers, look at queues and jobs, replay
or purge dead jobs, pause queues and schedules.

  leasequeue demo                          try it, no Redis needed
  leasequeue worker myapp.tasks:app        run a worker (--url or LEASEQUEUE_URL)
  leasequeue stats                         every queue under the prefix
  leasequeue check --max-dead 0            exit non-zero when a queue needs a look

Connection options (--url, --prefix) default to the environment variables
LEASEQUEUE_URL and LEASEQUEUE_PREFIX. `leasequeue COMMAND --help` for more."""


def load_app(target: str) -> App:
    """Import ``module:attribute`` and return the App found there; ConfigError
    (one line, no traceback) when that cannot be done."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected MODULE:APP (e.g. myproject.tasks:app), got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} (from {target}): {exc}") from None
    app = getattr(module, attr, None)
    if app is None:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
    if not isinstance(app, App):
        raise ConfigError(f"{target} is a {type(app).__name__}, not a leasequeue.App")
    return app


def _app_from(args: argparse.Namespace) -> App:
    if args.app:
        app = load_app(args.app)
        if args.url_given:
            app.rebind(args.url)
        return app
    return App(args.url, prefix=args.prefix)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not getattr(args, "command", None):
        _parser().print_help()
        return 2
    log.configure(args.log_level.upper())
    if args.command == "acl":
        return _acl(args)
    try:
        # the worker's process is ours: its event loop is --loop's (uvloop when
        # installed, loops.py); every other command runs on asyncio's own
        options = backend_options(args.loop) if args.command == "worker" else {}
        result: int = anyio.run(_dispatch, args, backend_options=options)
        return result
    except LeaseQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # a task group's (the demo's): its first error
        matched, _ = group.split(LeaseQueueError)
        if matched is None:
            raise
        print(f"error: {_first(matched)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _first(group: BaseExceptionGroup[LeaseQueueError]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def _demo(args: argparse.Namespace) -> int:
    if args.saga:
        from .demo_saga import run_saga_demo

        return await run_saga_demo(url=args.url)
    from .demo import run_demo

    return await run_demo(url=args.url, jobs=args.jobs, log_file=args.log_file)


async def _dispatch(args: argparse.Namespace) -> int:
    # the commands that make their own App (or none)
    standalone = {"worker": _worker, "exporter": _exporter, "demo": _demo,
                  "dashboard": _dashboard}
    if args.command in standalone:
        return await standalone[args.command](args)
    app = _app_from(args)
    try:
        handler = {"stats": _stats, "check": _check, "job": _job, "jobs": _jobs,
                   "audit": _audit, "dead": _dead, "schedules": _schedules,
                   "queues": _queues, "breakers": _breakers}[args.command]
        return await handler(app, args)
    finally:
        await app.close()


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
    url = args.url or os.environ.get(URL_ENV)
    if url:
        app.rebind(url)
    if is_memory_url(app.url):
        # an embedded store lives inside one process: a worker started here
        # would wait forever on an empty store of its own
        raise ConfigError(
            f"{args.app} uses {app.url}: an embedded memory:// store cannot be shared "
            "between processes. Pass --url redis://... (or set LEASEQUEUE_URL), run the "
            "worker in the producer's process (await Worker(app).run()), or try "
            "`leasequeue demo`."
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


async def _queues_of(app: App, args: argparse.Namespace) -> list[str]:
    """The queues a command covers: --queue, else every queue under the prefix."""
    if args.queue:
        return list(args.queue)
    queues = await app.queues()
    if not queues:
        raise ConfigError(f"no queues under prefix {app.prefix!r} at {app.url} (a queue is "
                          "recorded by its first enqueue or a worker's boot): check --prefix "
                          "and --url")
    return queues


async def _stats(app: App, args: argparse.Namespace) -> int:
    if args.limits:  # each declared limit's state (concurrency and rate)
        for entry in await app.limit_stats(args.key):
            _print(entry)
        return 0
    for queue in await _queues_of(app, args):
        _print(asdict(await app.stats(queue)))
    return 0


async def _check(app: App, args: argparse.Namespace) -> int:
    """One line per queue, `ok` or `FAIL` with what is over its threshold."""
    failed = 0
    for queue in await _queues_of(app, args):
        st = await app.stats(queue)
        age_s = (st.oldest_ready_age_ms or 0) / 1000
        problems = []
        if args.max_oldest_age is not None and age_s > args.max_oldest_age:
            problems.append(f"oldest ready job waits {age_s:.1f}s > {args.max_oldest_age:g}s")
        if args.max_dead is not None and st.dead > args.max_dead:
            problems.append(f"dead {st.dead} > {args.max_dead}")
        if args.max_ready is not None and st.ready > args.max_ready:
            problems.append(f"ready {st.ready} > {args.max_ready}")
        summary = f"ready {st.ready}, leased {st.leased}, dead {st.dead}, oldest {age_s:.1f}s"
        if st.paused:
            summary += ", paused"
        if problems:
            failed += 1
            print(f"FAIL {queue}: {'; '.join(problems)} ({summary})")
        else:
            print(f"ok   {queue}: {summary}")
    return EXIT_CHECK_FAILED if failed else 0


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


async def _jobs(app: App, args: argparse.Namespace) -> int:
    records, cursor = await app.jobs(args.queue, args.state, args.cursor, args.count,
                                     args.correlation_id)
    for record in records:
        _print(_summary(record))
    print(f"next cursor: {cursor}" if cursor else "end", file=sys.stderr)
    return 0


async def _audit(app: App, args: argparse.Namespace) -> int:
    if not (args.job or args.correlation):
        raise ConfigError("audit needs --job ID or --correlation CID")
    entries = await app.audit(job_id=args.job, correlation_id=args.correlation,
                              queue=args.queue, count=args.count)
    for entry in entries:
        _print(asdict(entry))
    if not entries:
        what = f"job {args.job}" if args.job else f"correlation id {args.correlation}"
        print(f"no audit entries for {what} (the trail keeps the newest entries per queue)",
              file=sys.stderr)
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
        return await _dead_list(app, queue, args)
    if args.action == "replay":
        return await _dead_replay(app, queue, args)
    return await _dead_purge(app, queue, args)


async def _dead_list(app: App, queue: str, args: argparse.Namespace) -> int:
    if args.history:  # the dead-letter stream: replayed and purged jobs too
        for entry in reversed(await app.dead_letters(queue, args.count)):
            _print(entry)
        return 0
    await app.stats(queue)  # UnknownQueue for a typo
    cursor, shown = None, 0
    while shown < args.count:
        records, cursor = await app.jobs(queue, "dead", cursor, min(1000, args.count - shown))
        for r in records:
            _print({"id": r.id, "name": r.name, "reason": r.reason, "attempt": r.attempt,
                    "died_ms": r.finished_ms, "correlation_id": r.correlation_id,
                    "error": (r.error or "").split("\n", 1)[0]})
        shown += len(records)
        if cursor is None:
            break
    return 0


async def _dead_replay(app: App, queue: str, args: argparse.Namespace) -> int:
    if args.ids:
        answers = await app.replay_each(args.ids, queue=queue)
        replayed = [i for i, a in answers.items() if a == ReplayReply.REPLAYED]
        print(f"replayed {len(replayed)} job(s) from {queue}")
        missed = [i for i in args.ids if answers.get(i) != ReplayReply.REPLAYED]
        if missed:
            raise ConfigError(f"{len(missed)} id(s) not replayed (not dead in {queue}, or no "
                              f"such job): {', '.join(missed)}")
        return 0
    # every dead job, a page at a time; bounded by the count at the start, so
    # jobs that die again meanwhile are not replayed round and round
    total = (await app.stats(queue)).dead
    done = 0
    while done < total:
        n = await app.replay(queue=queue, limit=min(args.count, total - done))
        if n == 0:
            break
        done += n
        print(f"replayed {done}/{total}", file=sys.stderr, flush=True)
    left = (await app.stats(queue)).dead
    print(f"replayed {done} job(s) from {queue}" + (f"; {left} dead job(s) left" if left else ""))
    return 0


async def _dead_purge(app: App, queue: str, args: argparse.Namespace) -> int:
    dead = (await app.stats(queue)).dead
    if dead == 0:
        print(f"no dead jobs in {queue}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"dead purge deletes {dead} dead job(s) of {queue} for good; "
                              "pass --yes to confirm (no terminal to ask on)")
        answer = await anyio.to_thread.run_sync(
            input, f"delete {dead} dead job(s) of {queue} for good (no replay after)? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing purged")
            return 1
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


# -- the parser ---------------------------------------------------------------

class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's layout; appends a default the help does not
    mention already (None, False and unset defaults are left out)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default not in (None, False, argparse.SUPPRESS) and "default" not in text
                and action.option_strings):
            text += " (default: %(default)s)"
        return text


def _common(url: bool = True) -> argparse.ArgumentParser:
    """Options every command takes, before or after the command name."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--log-level", default=argparse.SUPPRESS,
                   choices=["debug", "info", "warning", "error"],
                   help="log level of the JSON log lines on stderr (default: info)")
    if url:
        p.add_argument("--app", help="MODULE:APP to take the prefix, queues and shard "
                       "counts from (else --url and --prefix)")
        p.add_argument("--url", default=None,
                       help=f"Redis URL (default: ${URL_ENV}, else {DEFAULT_URL})")
        p.add_argument("--prefix", default=None,
                       help=f"key prefix (default: ${PREFIX_ENV}, else lq)")
    return p


def _sub(sub: Any, name: str, text: str, url: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text, parents=[_common(url)], formatter_class=_Formatter)
    return parser


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leasequeue", description=DESCRIPTION,
                                formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=f"leasequeue {__version__}")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level of the JSON log lines on stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND",
                           help="what to do (`leasequeue COMMAND --help` for its options)")

    w = _sub(sub, "worker", "run a worker for the App at MODULE:APP", url=False)
    w.add_argument("app", help="MODULE:APP, e.g. myproject.tasks:app")
    w.add_argument("--url", help=f"Redis URL, instead of the App's own (default: ${URL_ENV} "
                   "when set, else the URL the App was built with)")
    w.add_argument("--queue", "-q", action="append",
                   help="queue to consume, repeatable (default: every queue of the App)")
    w.add_argument("--concurrency", "-c", type=int, default=10, help="jobs run at once")
    w.add_argument("--loop", choices=LOOPS, default="auto",
                   help="event loop: uvloop's (needs leasequeue[uvloop]) or asyncio's own; "
                   "auto takes uvloop when it is installed")
    w.add_argument("--worker-id", help="this worker's id in logs and job records "
                   "(default: host-pid-random)")
    w.add_argument("--lease", type=float, default=30.0, help="lease length in seconds")
    w.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds running jobs get to finish after SIGTERM")
    w.add_argument("--reap-interval", type=float, default=None,
                   help="seconds between reaper ticks (default: min(5, lease/2))")
    w.add_argument("--reap-backoff-base", type=float, default=1.0,
                   help="a reaped job waits base * 2^(attempt-1) seconds")
    w.add_argument("--reap-backoff-cap", type=float, default=60.0,
                   help="... capped at this many seconds")
    w.add_argument("--allow-eviction", action="store_true",
                   help="run even if Redis may evict keys (unsafe: leases can vanish)")
    w.add_argument("--janitor-interval", type=float, default=30.0,
                   help="seconds between passes of the resource ledger's TTL janitor")
    w.add_argument("--metrics-port", type=int, default=None,
                   help="serve this worker's Prometheus metrics on this port "
                   "(needs leasequeue[prometheus])")
    w.add_argument("--metrics-addr", default="0.0.0.0", help="address for --metrics-port")

    e = _sub(sub, "exporter", "serve the queue gauges read from Redis to Prometheus (one per "
             "cluster; needs leasequeue[prometheus])")
    e.add_argument("--queue", "-q", action="append",
                   help="queue to export, repeatable (default: the App's queues)")
    e.add_argument("--port", type=int, default=9808, help="port to serve /metrics on")
    e.add_argument("--addr", default="0.0.0.0", help="address to serve on")
    e.add_argument("--interval", type=float, default=5.0,
                   help="seconds between reads of Redis")

    a = _sub(sub, "acl", "print a least-privilege Redis ACL user for a role (SECURITY.md)",
             url=False)
    a.add_argument("--role", required=True, choices=["producer", "worker", "operator", "viewer"],
                   help="what the user may do")
    a.add_argument("--prefix", required=True, help="the key prefix")
    a.add_argument("--queue", "-q", action="append",
                   help="producer / worker: only these queues (default: every queue)")
    a.add_argument("--limiter-prefix", help="default PREFIX:limiter")
    a.add_argument("--user", help="the ACL user name (default lq-ROLE)")
    a.add_argument("--cluster", action="store_true", help="add what a cluster client needs")

    d = _sub(sub, "demo", "a guided demo: a worker killed mid-job, a poison job, a schedule",
             url=False)
    d.add_argument("--url", default="memory://demo",
                   help="memory:// runs in one process with no server; a redis:// URL "
                   "runs real worker processes and SIGKILLs one")
    d.add_argument("--jobs", type=int, default=300, help="healthy jobs to run")
    d.add_argument("--log-file", default=None,
                   help="where the workers' JSON log lines go (default: a temporary file, "
                   "named at the end)")
    d.add_argument("--saga", action="store_true",
                   help="the saga demo instead: a crash mid-saga, a compensation")

    _dashboard_parser(sub)

    s = _sub(sub, "stats", "queue statistics as JSON, one line per queue")
    s.add_argument("--queue", "-q", action="append",
                   help="queue, repeatable (default: every queue under the prefix)")
    s.add_argument("--limits", action="store_true",
                   help="each declared limit's state instead (needs --app)")
    s.add_argument("--key", help="with --limits: the state of this key of keyed limits")

    c = _sub(sub, "check", "exit non-zero when a queue is over a threshold (for cron or a "
             "monitor); one ok/FAIL line per queue")
    c.add_argument("--queue", "-q", action="append",
                   help="queue, repeatable (default: every queue under the prefix)")
    c.add_argument("--max-oldest-age", type=float, metavar="SECONDS",
                   help="fail when the oldest ready job has waited longer")
    c.add_argument("--max-dead", type=int, metavar="N", help="fail when more jobs are dead")
    c.add_argument("--max-ready", type=int, metavar="N", help="fail when more jobs wait")

    j = _sub(sub, "job", "one job's record, its run logs (--logs), or re-run it (--rerun)")
    j.add_argument("id", help="the job id")
    j.add_argument("--queue", "-q", help="its queue (default: the App's queues, or default)")
    j.add_argument("--logs", action="store_true", help="print the kept run logs")
    j.add_argument("--rerun", action="store_true",
                   help="run this finished job again as a new job")

    js = _sub(sub, "jobs", "list a queue's jobs in one state, a page at a time")
    js.add_argument("--queue", "-q", required=True, help="the queue")
    js.add_argument("--state", "-s", required=True,
                    choices=["queued", "ready", "scheduled", "leased", "done", "dead"],
                    help="which jobs")
    js.add_argument("--cursor", help="the cursor the previous page printed")
    js.add_argument("--count", type=int, default=100, help="jobs per page (at most 1000)")
    js.add_argument("--correlation-id", help="only jobs with this correlation id")

    a = _sub(sub, "audit", "the audit trail of one job or one correlation id: who did what, "
             "and why")
    a.add_argument("--job", help="a job id")
    a.add_argument("--correlation", help="a correlation id")
    a.add_argument("--queue", "-q", help="the queue (default: every queue under the prefix)")
    a.add_argument("--count", type=int, default=100, help="most entries shown")

    dead = _sub(sub, "dead", "dead jobs: list, replay (all, or the ids given), purge")
    dead.add_argument("action", choices=["list", "replay", "purge"], help="what to do")
    dead.add_argument("ids", nargs="*", help="replay: the job ids (default: every dead job)")
    dead.add_argument("--queue", "-q", help="the queue (default: default)")
    dead.add_argument("--count", type=int, default=REPLAY_PAGE,
                      help="list: most jobs shown; replay: jobs per page")
    dead.add_argument("--history", action="store_true",
                      help="list: the dead-letter history (replayed and purged jobs too)")
    dead.add_argument("--yes", "-y", action="store_true", help="purge: do not ask")

    q = _sub(sub, "queues", "settings recorded in Redis: reshard QUEUE N, pause QUEUE, "
             "resume QUEUE")
    q.add_argument("action", choices=["reshard", "pause", "resume"], help="what to do")
    q.add_argument("queue", help="the logical queue")
    q.add_argument("shards", type=int, nargs="?",
                   help="reshard: the new shard count (1 = not sharded); refused unless the "
                   "queue is drained")

    sc = _sub(sub, "schedules", "schedules recorded in Redis: list, pause, resume, "
              "trigger NAME")
    sc.add_argument("action", choices=["list", "pause", "resume", "trigger"], help="what to do")
    sc.add_argument("name", nargs="?", help="the schedule (all but list)")

    b = _sub(sub, "breakers", "circuit breakers: list, open NAME (force open), close NAME "
             "(force closed)")
    b.add_argument("action", choices=["list", "open", "close"], help="what to do")
    b.add_argument("name", nargs="?", help="the breaker (open, close)")
    return p


def _dashboard_parser(sub: Any) -> None:
    s = _sub(sub, "dashboard", "serve the web dashboard (the leasequeue[dashboard] extra). "
             "Actions (pause, replay, purge, ...) need LEASEQUEUE_DASHBOARD_TOKEN (signed in "
             "through the page, or sent as a Bearer header) or "
             "LEASEQUEUE_DASHBOARD_BASIC_AUTH=user:password; without either it is read-only")
    s.add_argument("--host", default="127.0.0.1",
                   help="bind address (any other than loopback needs credentials)")
    s.add_argument("--port", type=int, default=8080, help="port to serve on")
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
    s.add_argument("--page-size", type=int, default=50, help="jobs per page")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse argv and fill the connection defaults from the environment."""
    args = _parser().parse_args(argv)
    if "url" in args and args.command != "demo":
        args.url_given = args.url is not None or (args.command != "worker"
                                                  and URL_ENV in os.environ)
        if args.command != "worker" and args.url is None:
            args.url = os.environ.get(URL_ENV, DEFAULT_URL)
    if "prefix" in args and args.prefix is None:
        args.prefix = os.environ.get(PREFIX_ENV, "lq")
    return args


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
