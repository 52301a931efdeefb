"""The event loop a worker runs on (leasequeue/loops.py): `leasequeue worker
--loop` runs the worker on the loop it names, auto takes uvloop when it is
installed, a missing uvloop is one clear error, and the worker's start line
says which loop it got."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import anyio
import pytest
import uvloop

from leasequeue import App, ConfigError, loops
from tests.harness.redis_proc import RedisProcess
from tests.test_cli import _restore_logging  # noqa: F401 (autouse: main() sets up logging)
from tests.test_cli_newuser import _run_worker, cli


def test_uvloop_is_installed_where_the_tests_run() -> None:
    # the dev extra installs it: the auto case below must be uvloop's
    assert loops.has_uvloop()


@pytest.mark.parametrize(("flag", "module"), [
    ("uvloop", "uvloop"), ("auto", "uvloop"), ("asyncio", "asyncio.unix_events")])
def test_the_worker_command_runs_on_the_loop_it_is_given(redis_server: RedisProcess,
                                                         prefix: str, flag: str,
                                                         module: str) -> None:
    proc = _run_worker(redis_server, prefix, ["--url", redis_server.url, "--loop", flag], {})

    async def go() -> Any:
        async with App(redis_server.url, prefix=prefix) as app:
            job = await app.enqueue("which_loop")
            return await app.wait(job.id, timeout=30)

    try:
        assert anyio.run(go) == module
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    starts = [line for line in map(json.loads, err.decode().splitlines())
              if line.get("msg") == "worker starting"]
    assert [s["loop"] for s in starts] == [module.split(".")[0]]


def test_auto_is_asyncio_s_own_loop_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    assert loops.backend_options("auto") == {"use_uvloop": True}
    assert loops.backend_options("asyncio") == {}
    monkeypatch.setattr(loops, "has_uvloop", lambda: False)
    assert loops.backend_options("auto") == {}
    with pytest.raises(ConfigError, match=r"pip install 'leasequeue\[uvloop\]'"):
        loops.backend_options("uvloop")
    with pytest.raises(ConfigError, match="unknown event loop 'trio'"):
        loops.backend_options("trio")


def test_loop_uvloop_without_uvloop_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(loops, "has_uvloop", lambda: False)
    code, _out, err = cli(capsys, "worker", "tests.harness.apps.memory_app:app", "--loop",
                          "uvloop")
    assert code == 1
    assert err.strip() == ("error: --loop uvloop needs uvloop: "
                           "pip install 'leasequeue[uvloop]'")


def test_running_loop_names_the_loop_it_runs_on() -> None:
    async def go() -> str:
        return loops.running_loop()

    assert asyncio.run(go()) == "asyncio"
    assert uvloop.run(go()) == "uvloop"
