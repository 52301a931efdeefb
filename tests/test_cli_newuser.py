"""The command line as a new user meets it: each test is one rough edge a
first try found, and asserts it is gone (worker --url / LEASEQUEUE_URL, stats
over every queue, --log-level anywhere, --version, help on every option, a
one-line error for a missing module, dead replay of everything in pages,
unknown ids, purge confirmation, dead list without purged jobs, unknown
queues, the README's names, `check` for cron, and the audit trail)."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import leasequeue
from leasequeue import App, Context, JobRequest, PermanentError, UnknownQueue
from leasequeue.cli import _parser, main
from tests.harness.redis_proc import RedisProcess, env_with_path
from tests.helpers import eventually, worker_running
from tests.test_cli import _restore_logging  # noqa: F401 (autouse: main() sets up logging)

ROOT = Path(__file__).resolve().parent.parent


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def make_dead(url: str, prefix: str, n: int, queue: str = "default") -> None:
    """n jobs in the dead set of ``queue`` (a handler that raises PermanentError)."""

    async def go() -> None:
        async with App(url, prefix=prefix) as app:
            @app.job(queue=queue)
            async def boom(ctx: Context) -> None:
                raise PermanentError("no way")

            await app.enqueue_many([JobRequest("boom", job_id=f"d{i}") for i in range(n)])
            async with worker_running(app, queues=[queue], concurrency=50):
                await eventually(lambda: _dead_count(app, queue, n), limit=60,
                                 what=f"{n} dead jobs")

    anyio.run(go)


async def _dead_count(app: App, queue: str, n: int) -> bool:
    return (await app.stats(queue)).dead >= n


# -- the worker: --url and LEASEQUEUE_URL ----------------------------------------

def _run_worker(redis_server: RedisProcess, prefix: str, args: list[str],
                env: dict[str, str]) -> subprocess.Popen[bytes]:
    full = env_with_path()
    full.pop("LEASEQUEUE_URL", None)
    full.update(LQ_PREFIX=prefix, **env)
    return subprocess.Popen(
        [sys.executable, "-m", "leasequeue.cli", "worker", "tests.harness.apps.memory_app:app",
         *args], env=full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_worker_takes_a_url_flag_or_the_environment(redis_server: RedisProcess,
                                                        prefix: str, how: str) -> None:
    """The App in the module says memory://; the CLI points the worker at a
    real Redis, and a job enqueued there is run."""
    if how == "flag":
        proc = _run_worker(redis_server, prefix, ["--url", redis_server.url, "--worker-id",
                                                  "w-flag"], {})
    else:
        proc = _run_worker(redis_server, prefix, ["--worker-id", "w-env"],
                           {"LEASEQUEUE_URL": redis_server.url})

    async def go() -> Any:
        async with App(redis_server.url, prefix=prefix) as app:
            job = await app.enqueue("hello", {"name": "ann"})
            return await app.wait(job.id, timeout=30)

    try:
        assert anyio.run(go) == f"hello ann from w-{how}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_a_memory_app_without_a_url_is_one_clear_error(redis_server: RedisProcess,
                                                      prefix: str) -> None:
    proc = _run_worker(redis_server, prefix, [], {})
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    text = err.decode().strip()
    assert text.startswith("error: ") and "--url" in text and "LEASEQUEUE_URL" in text
    assert len(text.splitlines()) == 1, text


def test_a_missing_module_is_one_line_not_a_traceback() -> None:
    out = subprocess.run([sys.executable, "-m", "leasequeue.cli", "worker", "nosuch.tasks:app"],
                         env=env_with_path(), cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: cannot import 'nosuch.tasks' (from nosuch.tasks:app): No module named 'nosuch'"]
    bad = subprocess.run([sys.executable, "-m", "leasequeue.cli", "stats", "--app",
                          "leasequeue:nothing"], env=env_with_path(), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "error: module 'leasequeue' has no attribute 'nothing'"]


# -- stats over every queue; unknown queues ----------------------------------------

def test_stats_without_a_queue_lists_every_queue_under_the_prefix(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def go() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            await app.enqueue("a", queue="emails")
            await app.enqueue("b", queue="reports")
            await app.enqueue("c")

    anyio.run(go)
    code, out, _ = cli(capsys, "stats", "--url", redis_server.url, "--prefix", prefix)
    assert code == 0
    assert [s["queue"] for s in lines(out)] == ["default", "emails", "reports"]
    assert all(s["ready"] == 1 for s in lines(out))

    code, out, err = cli(capsys, "stats", "--url", redis_server.url, "--prefix", "nothing-here")
    assert code == 1 and "no queues under prefix 'nothing-here'" in err


def test_stats_of_an_unknown_queue_is_a_typed_error(redis_server: RedisProcess, prefix: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    async def go() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            @app.job(queue="emails")
            async def send(ctx: Context) -> None: ...

            assert (await app.stats("emails")).ready == 0  # registered: zeros are true
            assert (await app.stats()).ready == 0  # the default queue: zeros are true
            with pytest.raises(UnknownQueue, match="'emials' does not exist"):
                await app.stats("emials")
            await app.enqueue("x", queue="other")
        async with App(redis_server.url, prefix=prefix) as bare:
            assert (await bare.stats("other")).ready == 1  # it exists in Redis

    anyio.run(go)
    code, _, err = cli(capsys, "stats", "-q", "emials", "--url", redis_server.url,
                       "--prefix", prefix)
    assert code == 1 and err.startswith("error: queue 'emials' does not exist")


# -- options -----------------------------------------------------------------------

def test_log_level_works_before_and_after_the_command(redis_server: RedisProcess, prefix: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    make_dead(redis_server.url, prefix, 1)
    where = ["--url", redis_server.url, "--prefix", prefix]
    for argv in (["--log-level", "warning", "stats", *where],
                 ["stats", "--log-level", "warning", *where],
                 ["stats", *where, "--log-level", "error"]):
        code, _, _ = cli(capsys, *argv)
        assert code == 0, argv
        expected = logging.ERROR if "error" in argv else logging.WARNING
        assert logging.getLogger("leasequeue").level == expected, argv


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"leasequeue {leasequeue.__version__}"


def test_every_option_has_help_and_shows_its_default() -> None:
    parser = _parser()
    subs = next(a for a in parser._actions if isinstance(a, __import__("argparse")
                                                         ._SubParsersAction))
    assert set(subs.choices) >= {"worker", "demo", "stats", "check", "job", "jobs", "audit",
                                 "dead", "queues", "schedules"}
    for name, sub in [("leasequeue", parser), *subs.choices.items()]:
        for action in sub._actions:
            if action.dest == "help":
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        help_text = " ".join(sub.format_help().split())
        if name == "worker":
            assert "(default: 10)" in help_text and "(default: 30.0)" in help_text
        if name == "dead":
            assert "(default: 500)" in help_text


def test_the_top_level_help_speaks_to_a_user(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "leasequeue demo" in text and "LEASEQUEUE_URL" in text
    assert "Only argument parsing" not in text and "demo.py" not in text


# -- dead jobs ------------------------------------------------------------------------

def test_dead_replay_with_no_ids_replays_every_job_in_pages(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_dead(redis_server.url, prefix, 1200)
    code, out, err = cli(capsys, "dead", "replay", "--count", "500", "--url",
                         redis_server.url, "--prefix", prefix)
    assert code == 0 and out.strip() == "replayed 1200 job(s) from default", out
    assert err.strip().splitlines() == ["replayed 500/1200", "replayed 1000/1200",
                                        "replayed 1200/1200"]
    code, out, _ = cli(capsys, "stats", "-q", "default", "--url", redis_server.url,
                       "--prefix", prefix)
    (st,) = lines(out)
    assert (st["dead"], st["ready"]) == (0, 1200)


def test_dead_replay_of_unknown_ids_exits_non_zero_and_names_them(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_dead(redis_server.url, prefix, 2)
    code, out, err = cli(capsys, "dead", "replay", "d0", "nosuchid", "d1x", "--url",
                         redis_server.url, "--prefix", prefix)
    assert code == 1
    assert out.strip() == "replayed 1 job(s) from default"
    assert "2 id(s) not replayed" in err and "nosuchid, d1x" in err


class _Tty:
    def __init__(self, answer: str, tty: bool = True) -> None:
        self.answer, self.tty = answer, tty

    def isatty(self) -> bool:
        return self.tty

    def readline(self) -> str:
        return self.answer + "\n"


def test_dead_purge_asks_first(redis_server: RedisProcess, prefix: str,
                               capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    make_dead(redis_server.url, prefix, 3)
    where = ["--url", redis_server.url, "--prefix", prefix]
    monkeypatch.setattr(sys, "stdin", _Tty("y", tty=False))  # not a terminal: never asked
    code, _, err = cli(capsys, "dead", "purge", *where)
    assert code == 1 and "pass --yes" in err and "3 dead job(s)" in err
    monkeypatch.setattr(sys, "stdin", _Tty("n"))
    code, out, _ = cli(capsys, "dead", "purge", *where)
    assert code == 1 and "nothing purged" in out
    code, out, _ = cli(capsys, "stats", "-q", "default", *where)
    assert lines(out)[0]["dead"] == 3
    monkeypatch.setattr(sys, "stdin", _Tty("y"))
    code, out, _ = cli(capsys, "dead", "purge", *where)
    assert code == 0 and "purged 3 dead job(s)" in out
    make_dead(redis_server.url, prefix, 1)
    code, out, _ = cli(capsys, "dead", "purge", "--yes", *where)
    assert code == 0 and "purged 1 dead job(s)" in out


def test_dead_list_shows_the_dead_jobs_not_the_purged_ones(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_dead(redis_server.url, prefix, 2)
    where = ["--url", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "dead", "list", *where)
    assert code == 0 and sorted(e["id"] for e in lines(out)) == ["d0", "d1"]
    assert {e["reason"] for e in lines(out)} == {"permanent"}
    assert cli(capsys, "dead", "purge", "--yes", *where)[0] == 0
    code, out, _ = cli(capsys, "dead", "list", *where)
    assert code == 0 and out == ""
    code, out, _ = cli(capsys, "dead", "list", "--history", *where)
    assert sorted(e["job"] for e in lines(out)) == ["d0", "d1"]  # the history keeps them


# -- README ---------------------------------------------------------------------------

def test_the_readme_names_only_what_import_leasequeue_exports() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("NotDurable", "StoreSettings", "SyncApp", "UnknownQueue", "AuditEntry"):
        assert name in readme, name
        assert hasattr(leasequeue, name) and name in leasequeue.__all__, name
    for name in set(re.findall(r"\blq\.([A-Za-z_]+)", readme)):
        assert hasattr(leasequeue, name), f"README uses lq.{name}"
    # (its relative links, and every other page's: tests/test_doc_links.py)


# -- check, for cron ---------------------------------------------------------------------

def test_check_exits_non_zero_when_a_queue_is_over_a_threshold(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_dead(redis_server.url, prefix, 2)

    async def waiting() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            await app.enqueue("x", queue="slow")

    anyio.run(waiting)
    where = ["--url", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "check", "--max-dead", "5", "--max-oldest-age", "3600", *where)
    assert code == 0 and out.splitlines()[0].startswith("ok   default: ready 0, leased 0, "
                                                         "dead 2"), out
    code, out, _ = cli(capsys, "check", "--max-dead", "1", *where)
    assert code == 1 and "FAIL default: dead 2 > 1" in out and "ok   slow" in out
    code, out, _ = cli(capsys, "check", "-q", "slow", "--max-oldest-age", "0", *where)
    assert code == 1 and out.startswith("FAIL slow: oldest ready job waits"), out
    code, out, _ = cli(capsys, "check", "-q", "slow", "--max-ready", "0", *where)
    assert code == 1 and "ready 1 > 0" in out
    # Redis unreachable: non-zero too, one line
    code, _, err = cli(capsys, "check", "--url", "redis://127.0.0.1:1/0", "--prefix", prefix)
    assert code == 1 and err.startswith("error: Redis at redis://127.0.0.1:1/0 is unreachable")
