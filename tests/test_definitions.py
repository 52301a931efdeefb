"""The handler's definition decides a job's budgets (the producer stores
"unset" unless told otherwise), and settings that cannot work are refused
when they are declared, naming the option and the value."""

from __future__ import annotations

from typing import Any

import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.app import UNSET_BUDGET
from leasequeue.store.record import parse_record

pytestmark = pytest.mark.anyio

Q = "default"


async def stored_budgets(app: App, job_id: str, queue: str = Q) -> tuple[int, int]:
    """max_attempts and max_infra as the job record in Redis holds them."""
    raw = await app.redis.hget(app.keys(queue).jobs, job_id)
    assert raw is not None
    record = parse_record(raw)
    return record["max_attempts"], record["max_infra"]


async def test_a_producer_only_app_stores_unset_budgets(app: App) -> None:
    await app.enqueue("theirs", job_id="a")
    await app.enqueue_many([JobRequest("theirs", job_id="b")])
    assert await stored_budgets(app, "a") == (UNSET_BUDGET, UNSET_BUDGET) == (0, 0)
    assert await stored_budgets(app, "b") == (0, 0)


async def test_a_registered_definition_is_not_copied_into_the_record(app: App) -> None:
    @app.job(max_attempts=5, max_infra_attempts=7)
    async def mine(ctx: Context) -> None: ...

    await app.enqueue("mine", job_id="a")
    # the worker that runs it applies its own definition, which may differ
    assert await stored_budgets(app, "a") == (0, 0)


async def test_explicit_budgets_are_stored(app: App) -> None:
    await app.enqueue("theirs", job_id="a", max_attempts=4)
    await app.enqueue("theirs", job_id="b", max_infra_attempts=2)
    await app.enqueue_many([JobRequest("theirs", job_id="c", max_attempts=1,
                                       max_infra_attempts=9)])
    assert await stored_budgets(app, "a") == (4, 0)
    assert await stored_budgets(app, "b") == (0, 2)
    assert await stored_budgets(app, "c") == (1, 9)


@pytest.mark.parametrize("option, value", [
    ("max_attempts", 0), ("max_attempts", -1), ("max_attempts", 2.5), ("max_attempts", True),
    ("max_attempts", "3"), ("max_infra_attempts", 0), ("max_infra_attempts", -3),
])
async def test_bad_explicit_budgets_are_refused(app: App, option: str, value: Any) -> None:
    from leasequeue.errors import ConfigError

    with pytest.raises(ConfigError, match=option):
        await app.enqueue("theirs", job_id="a", **{option: value})
    with pytest.raises(ConfigError, match=option):
        await app.enqueue_many([JobRequest("theirs", job_id="b", **{option: value})])
    assert await app.redis.hlen(app.keys(Q).jobs) == 0


# -- registration refuses settings that cannot work ------------------------------

NAN, INF = float("nan"), float("inf")

BAD_OPTIONS: list[tuple[str, Any]] = [
    ("max_attempts", 0), ("max_attempts", -1), ("max_attempts", 2.5), ("max_attempts", True),
    ("max_attempts", None), ("max_infra_attempts", 0), ("max_infra_attempts", "10"),
    ("backoff", 5), ("backoff", None), ("infra_backoff", "fixed(1)"),
    ("timeout", 0), ("timeout", -1), ("timeout", NAN), ("timeout", "600"),
    ("stop_grace", -1), ("stop_grace", NAN), ("stop_grace", INF), ("stop_grace", None),
    ("retention", -0.5), ("retention", INF), ("retention", "1d"),
    ("slot_backoff", -1), ("slot_backoff", 0), ("slot_backoff", NAN),
    ("max_concurrent", 0), ("max_concurrent", -2), ("max_concurrent", 1.5),
    ("max_concurrent", False), ("on_conflict", "drop"), ("on_conflict", None),
    ("queue", ""), ("queue", "a b"), ("name", ""), ("name", "a|b"),
]


def _ids(cases: list[tuple[str, Any]]) -> list[str]:
    return [f"{option}={value!r}" for option, value in cases]


@pytest.mark.parametrize("option, value", BAD_OPTIONS, ids=_ids(BAD_OPTIONS))
def test_registration_refuses_bad_options(prefix: str, option: str, value: Any) -> None:
    from leasequeue.errors import ConfigError

    app = App(f"memory://{prefix}", prefix=prefix)

    async def handler(ctx: Context) -> None: ...

    with pytest.raises(ConfigError) as caught:
        app.job(**{option: value})(handler)
    if option not in ("queue", "name"):  # their messages say "queue name" / "job name"
        assert option in str(caught.value) and repr(value) in str(caught.value)
    assert app.registry.empty


GOOD_OPTIONS: list[tuple[str, Any, Any]] = [
    # option, given, what the definition holds
    ("max_attempts", 1, 1), ("max_infra_attempts", 1, 1), ("timeout", None, None),
    ("timeout", 0.5, 0.5), ("stop_grace", 0, 0.0), ("retention", 0, 0.0),
    ("slot_backoff", 0.01, 0.01), ("max_concurrent", 1, 1), ("max_concurrent", None, None),
    ("on_conflict", "replace", "replace"), ("backoff", len, len),
]


@pytest.mark.parametrize("option, value, held", GOOD_OPTIONS,
                         ids=[f"{o}={v!r}" for o, v, _ in GOOD_OPTIONS])
def test_registration_keeps_good_options(prefix: str, option: str, value: Any,
                                          held: Any) -> None:
    app = App(f"memory://{prefix}", prefix=prefix)

    async def handler(ctx: Context) -> None: ...

    app.job(**{option: value})(handler)
    assert getattr(app.registry.get("handler"), option) == held


def test_registration_refuses_unknown_options_and_non_callables(prefix: str) -> None:
    from leasequeue.errors import ConfigError

    app = App(f"memory://{prefix}", prefix=prefix)

    async def handler(ctx: Context) -> None: ...

    with pytest.raises(ConfigError, match="max_attempt"):  # a typo is not ignored
        app.job(max_attempt=5)(handler)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="callable"):
        app.registry.register("not a function")  # type: ignore[arg-type]


DEFAULTS_CASES = [(o, v) for o, v in BAD_OPTIONS if o not in ("name", "max_concurrent")]


@pytest.mark.parametrize("option, value", DEFAULTS_CASES, ids=_ids(DEFAULTS_CASES))
def test_bad_defaults_are_refused_when_the_app_is_built(prefix: str, option: str,
                                                        value: Any) -> None:
    from leasequeue import Defaults
    from leasequeue.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        App(f"memory://{prefix}", prefix=prefix, defaults=Defaults(**{option: value}))
    assert "Defaults" in str(caught.value)
    if option != "queue":
        assert option in str(caught.value) and repr(value) in str(caught.value)


def test_the_documented_settings_are_the_code_s() -> None:
    """README's settings numbers (Defaults, Worker defaults, batch sizes, the
    slot wait, claim-ahead and heartbeat shares) are the code's values."""
    import inspect

    from leasequeue import Defaults, Worker
    from leasequeue.app import ENQUEUE_CHUNK, MAX_PRIORITY
    from leasequeue.backoff import Exponential
    from leasequeue.runtime import executor, heartbeater, held, limits, slots, starter, timeouts

    d = Defaults()
    assert (d.max_attempts, d.max_infra_attempts, d.timeout, d.stop_grace, d.retention,
            d.on_conflict, d.slot_backoff) == (3, 10, 600.0, 30.0, 24 * 3600.0, "enqueue", 2.0)
    assert d.backoff == Exponential(1, 300, jitter=True)
    assert d.infra_backoff == Exponential(1, 60, jitter=True)
    params = inspect.signature(Worker).parameters
    assert {k: params[k].default for k in ("concurrency", "lease", "shutdown_timeout",
                                           "max_abandoned")} == {
        "concurrency": 10, "lease": 30.0, "shutdown_timeout": 30.0, "max_abandoned": 1}
    assert (ENQUEUE_CHUNK, MAX_PRIORITY) == (500, 32767)
    assert (executor.SLOT_WAIT, limits.SLOT_POLL, executor.CONFIRM_AFTER) == (1.0, 0.05, 0.05)
    assert (slots.AHEAD_HORIZON, timeouts.TICK, starter.COALESCE) == (0.02, 0.05, 0.005)
    assert heartbeater.DEADLINE_SHARE == 0.25 and executor.MIN_LEASE_SHARE == 1 / 3
    # "Runs held ahead behind a long run go back": 100 jobs, 100 ms, every 50 ms
    assert (slots.AHEAD_MAX, held.HOLD_MAX, held.TICK) == (100, 0.1, 0.05)


def test_the_documented_constants_of_wait_logs_and_schedules() -> None:
    """The constants the Operator controls, Per-run logs and Schedules
    sections quote: the wait slice and token lifetime, the kept history
    sizes, the run-log byte cap, the interval floor, a fire's pending lease."""
    from pathlib import Path

    from leasequeue import app, runlog, schedule_spec
    from leasequeue.runtime.scheduler import SchedulerParams

    lib = (Path(__file__).resolve().parent.parent / "lua" / "_lib.lua").read_text()
    for line in ("local NOTIFY_TTL_MS = 10000", "local ERRORS_KEPT = 5",
                 "local LOG_RUNS_KEPT = 3", "local LOG_RUN_MAX = 65536"):
        assert line in lib, line
    assert (app.WAIT_SLICE, app.MAX_LIST_COUNT) == (2.0, 1000)
    assert runlog.MAX_BYTES == 64 * 1024
    assert schedule_spec.MIN_EVERY_MS == 1000
    assert SchedulerParams.__dataclass_fields__["fire_lease_ms"].default == 10_000


def test_the_documented_security_limits() -> None:
    """README's Security section and SECURITY.md quote the decoding limits:
    nesting 100 levels, a stored envelope of 8 MiB (16x the 512 KiB default
    payload limit)."""
    from leasequeue import codec

    assert codec.MAX_DEPTH == 100
    assert codec.DECODE_MAX_BYTES == 8 * 1024 * 1024 == 16 * codec.DEFAULT_MAX_PAYLOAD


def test_the_documented_constants_of_the_dashboard() -> None:
    """The figures the Web dashboard section quotes: the session's lifetime,
    how many dead jobs one "replay oldest" replays, the token's minimum
    length, the form size cap, the page size, the bind address and port."""
    from leasequeue.cli import _parser
    from leasequeue.dashboard import run, security, server

    assert security.SESSION_TTL_S == 12 * 3600
    assert server.REPLAY_ALL_LIMIT == 1000
    assert server.MAX_FORM_BYTES == 64 * 1024
    assert run.MIN_TOKEN_CHARS == 16
    assert server.DashboardConfig().page_size == 50
    args = _parser().parse_args(["dashboard"])
    assert (args.host, args.port, args.page_size) == ("127.0.0.1", 8080, 50)


def test_the_documented_metrics_defaults() -> None:
    """The exporter's defaults and the histogram buckets the Metrics section
    quotes (README: --port 9808, --interval 5, wait/run buckets 5 ms .. 1 h)."""
    from leasequeue.cli import _parser
    from leasequeue.metrics import DEFAULT_BUCKETS

    args = _parser().parse_args(["exporter"])
    assert (args.port, args.interval, args.queue) == (9808, 5.0, None)
    assert (DEFAULT_BUCKETS[0], DEFAULT_BUCKETS[-1]) == (0.005, 3600.0)
    worker = _parser().parse_args(["worker", "m:app"])
    assert worker.metrics_port is None  # metrics are off unless asked for


def test_the_documented_constants_of_the_resilience_kit() -> None:
    """The bounds and intervals the Resilience kit section quotes."""
    import inspect

    from leasequeue import saga
    from leasequeue.runtime import runstate

    assert runstate.MAX_CHECKPOINT_BYTES == runstate.MAX_SAGA_BYTES == 64 * 1024
    assert (runstate.PROGRESS_INTERVAL, runstate.MAX_NOTE_CHARS) == (1.0, 200)
    assert (saga.UNDO_TRIES, saga.UNDO_BACKOFF) == (5, 0.5)
    params = inspect.signature(saga.run_saga).parameters
    assert (params["undo_tries"].default, params["undo_backoff"].default) == (5, 0.5)


def test_the_documented_defaults_of_the_resilience_kit() -> None:
    """The figures the Circuit breakers and Orphan reconciliation sections
    quote: a Breaker's defaults, the wait of an unreachable breaker, the
    resource TTL and closer claim, the janitor's interval and lease."""
    import inspect

    from leasequeue import App, Breaker, Worker, resources
    from leasequeue.runtime import breakers, janitor
    from leasequeue.store.settings import StoreSettings

    b = Breaker("x")
    assert (b.failures, b.window, b.cooldown, b.max_cooldown, b.probe_lease) == (
        5, 60.0, 30.0, 16 * 30.0, 60.0)
    assert breakers.UNREACHABLE_WAIT == 1.0
    assert (resources.DEFAULT_TTL, resources.CLOSE_LEASE, resources.OPEN_WAIT) == (
        3600.0, 60.0, 5.0)
    assert inspect.signature(App.resource_kind).parameters["ttl"].default == 3600.0
    assert inspect.signature(Worker).parameters["janitor_interval"].default == 30.0
    assert "lease_ms = int(p.interval * 3 * 1000)" in inspect.getsource(janitor)
    assert StoreSettings().events_maxlen == 10_000  # the breakers' events stream cap


def test_the_documented_command_line_and_sync_constants() -> None:
    """The figures the README's command-line, audit, demo and sync producer
    sections quote are the code's."""
    from leasequeue import cli, demo, demo_app, demo_workers, producer
    from leasequeue.store.settings import StoreSettings

    assert (cli.REPLAY_PAGE, cli.EXIT_CHECK_FAILED, cli.DEFAULT_URL) == (
        500, 1, "redis://localhost:6379/0")
    assert (cli.URL_ENV, cli.PREFIX_ENV) == ("LEASEQUEUE_URL", "LEASEQUEUE_PREFIX")
    assert StoreSettings().events_maxlen == 10_000
    assert (producer.WAIT_SLICE, producer.ENQUEUE_CHUNK) == (2.0, 500)
    assert (demo.WORKERS, demo_workers.LEASE, demo_app.POISON_ATTEMPTS) == (3, 2.0, 3)


def test_the_documented_constants_of_rate_limits() -> None:
    """The constants the Rate limits section quotes: the key length cap, the
    in-place wait, the gathering window, the reservation lifetime and the
    late-start slack of lua/rate.lua, and the default burst (= the limit)."""
    from pathlib import Path

    from leasequeue import Rate
    from leasequeue.limiter import RateCounter
    from leasequeue.runtime import rates
    from leasequeue.store.keys import MAX_LIMIT_KEY

    lua = (Path(__file__).resolve().parent.parent / "lua" / "rate.lua").read_text()
    assert "local SLACK_US = math.min(interval, 10000)" in lua
    assert MAX_LIMIT_KEY == 128
    assert (rates.WAIT_IN_PLACE, rates.GATHER) == (0.05, 0.001)
    assert RateCounter.STALE_US == 600 * 1_000_000
    assert Rate(100).effective_burst == 100 and Rate(100, per=60).interval_us == 600_000
