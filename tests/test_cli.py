"""The command line other than `worker` (tested with real processes elsewhere):
`stats`, `job`, `dead list|replay|purge` and `queues reshard`, run in-process
through leasequeue.cli.main against a real Redis, output parsed and checked
against what the App reads."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from leasequeue import App, Context, JobRequest, PermanentError
from leasequeue.cli import main
from tests.harness.redis_proc import RedisProcess
from tests.helpers import eventually, worker_running


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """main() configures the leasequeue logger (JSON handler, no propagation):
    undo it so later tests' caplog still sees the records."""
    logger = logging.getLogger("leasequeue")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


def seed(url: str, prefix: str) -> None:
    """3 jobs succeed, 2 die (permanent), 1 waits in the queue."""

    async def go() -> None:
        async with App(url, prefix=prefix) as app:
            @app.job
            async def ok(ctx: Context) -> None:
                return None

            @app.job
            async def boom(ctx: Context) -> None:
                raise PermanentError("no way")

            await app.enqueue_many([JobRequest("ok", job_id=f"ok{i}") for i in range(3)]
                                   + [JobRequest("boom", job_id=f"dead{i}") for i in range(2)])
            async with worker_running(app):
                await eventually(lambda: _settled(app, 5), what="the seeded jobs to settle")
            await app.enqueue("ok", job_id="waiting", delay=3600)

    anyio.run(go)


async def _settled(app: App, n: int) -> bool:
    c = (await app.stats()).counters
    return c.get("succeeded", 0) + c.get("dead", 0) >= n


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Exit code and stdout; stderr is kept in LAST_ERR."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    LAST_ERR[:] = [captured.err]
    return code, captured.out


LAST_ERR: list[str] = [""]


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_stats_job_and_dead_commands(redis_server: RedisProcess, prefix: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    seed(redis_server.url, prefix)
    where = ["--url", redis_server.url, "--prefix", prefix]

    code, out = run_cli(capsys, "stats", "--queue", "default", *where)
    stats = json_lines(out)
    assert code == 0 and len(stats) == 1, out
    assert (stats[0]["queue"], stats[0]["dead"], stats[0]["scheduled"]) == ("default", 2, 1)
    assert stats[0]["counters"]["succeeded"] == 3 and stats[0]["counters"]["dead"] == 2

    code, out = run_cli(capsys, "job", "dead0", *where)
    job = json_lines(out)[0]
    assert code == 0 and (job["id"], job["state"], job["reason"]) == ("dead0", "dead",
                                                                       "permanent"), job
    assert "no way" in job["error"]

    code, out = run_cli(capsys, "job", "nope", *where)
    assert code == 1 and out == ""  # a typed error, reported on stderr
    assert LAST_ERR[0].startswith("error: ") and "nope" in LAST_ERR[0], LAST_ERR

    code, out = run_cli(capsys, "dead", "list", *where)
    entries = json_lines(out)
    assert code == 0 and sorted(e["id"] for e in entries) == ["dead0", "dead1"], entries
    assert {e["reason"] for e in entries} == {"permanent"}

    code, out = run_cli(capsys, "dead", "replay", "dead0", *where)
    assert code == 0 and out.strip() == "replayed 1 job(s) from default", out
    _, out = run_cli(capsys, "job", "dead0", *where)
    assert json_lines(out)[0]["state"] == "queued"

    code, out = run_cli(capsys, "dead", "purge", "--yes", *where)
    assert code == 0 and out.strip() == "purged 1 dead job(s) from default", out
    _, out = run_cli(capsys, "stats", "--queue", "default", *where)
    assert json_lines(out)[0]["dead"] == 0


def test_queues_reshard_command(redis_server: RedisProcess, prefix: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """Refused while the queue holds work (nothing written), done once it is empty."""
    where = ["--url", redis_server.url, "--prefix", prefix]

    async def enqueue_one() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            await app.enqueue("x", job_id="left", queue="hot")

    anyio.run(enqueue_one)
    code, out = run_cli(capsys, "queues", "reshard", "hot", "3", *where)
    assert code == 1 and "not drained" in LAST_ERR[0], (out, LAST_ERR)

    async def drain() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            assert await app.cancel("left", queue="hot") == "canceled"

    anyio.run(drain)
    code, out = run_cli(capsys, "queues", "reshard", "hot", "3", *where)
    assert code == 0 and out.startswith("queue hot: 1 -> 3 shard(s) recorded"), out


def test_schedules_commands(redis_server: RedisProcess, prefix: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """`schedules list|pause|resume|trigger` against schedules a service recorded."""
    from datetime import timedelta

    where = ["--url", redis_server.url, "--prefix", prefix]

    async def record() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            @app.job
            async def tick(ctx: Context) -> None:
                return None

            app.schedule("every-hour", "tick", every=timedelta(hours=1))
            await app.schedules.record()

    anyio.run(record)
    code, out = run_cli(capsys, "schedules", "list", *where)
    listed = json_lines(out)
    assert code == 0 and [s["schedule"] for s in listed] == ["every-hour"], out
    assert listed[0]["paused"] is False and listed[0]["spec"] == "every 3600s", listed

    code, out = run_cli(capsys, "schedules", "pause", "every-hour", *where)
    assert code == 0 and out.strip() == "schedule every-hour: paused", out
    code, out = run_cli(capsys, "schedules", "pause", "every-hour", *where)
    assert code == 0 and "was paused already" in out, out
    code, out = run_cli(capsys, "schedules", "resume", "every-hour", *where)
    assert code == 0 and "every-hour" in out, out

    code, out = run_cli(capsys, "schedules", "trigger", "every-hour", *where)
    assert code == 0 and "enqueued schedule:every-hour:manual:" in out, out

    code, out = run_cli(capsys, "schedules", "pause", "no-such", *where)
    assert code == 1 and "no-such" in LAST_ERR[0], (out, LAST_ERR)
