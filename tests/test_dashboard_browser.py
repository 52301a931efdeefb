"""The dashboard in a real browser: headless Chromium (the system's, driven by
Playwright) against `leasequeue dashboard` and a worker process on a real
redis-server. An operator opens the queue page, finds a dead job, signs in,
replays it and watches it succeed.

Chromium and Playwright come from the dev setup (.ci/run installs chromium);
without them this test is skipped on a developer's machine and FAILS in CI
(CI=1). With LQ_DASHBOARD_SCREENSHOTS=DIR it saves the README's screenshots."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis as redis_sync

from leasequeue import App
from leasequeue.store.keys import queue_keys
from leasequeue.store.record import parse_record
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess, env_with_path, free_port

TOKEN = "browser-test-token-0123456789"
PREFIX = "dash"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing: CI must run the dashboard's browser test "
                    "(.ci/run installs chromium; playwright is in the dev extra)")
    pytest.skip(f"{what} is not installed")


def _chromium() -> str:
    for candidate in (os.environ.get("LQ_CHROMIUM"), shutil.which("chromium"),
                      "/usr/bin/chromium"):
        if candidate and Path(candidate).exists():
            return candidate
    _missing("chromium")
    raise AssertionError("unreachable")


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package")
    path = _chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def redis_proc() -> Iterator[RedisProcess]:
    with RedisProcess() as server:
        yield server


@pytest.fixture
def dashboard_url(redis_proc: RedisProcess, tmp_path: Path) -> Iterator[str]:
    """`leasequeue dashboard` as a process, on a free port of 127.0.0.1."""
    port = free_port()
    env = env_with_path()
    env["LEASEQUEUE_DASHBOARD_TOKEN"] = TOKEN
    log = open(tmp_path / "dashboard.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasequeue.cli", "dashboard", "--url", redis_proc.url,
         "--prefix", PREFIX, "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, timeout=20, what="the dashboard to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def state_of(client: redis_sync.Redis, queue: str, job_id: str) -> str | None:
    raw = client.hget(queue_keys(PREFIX, queue).jobs, job_id)
    return None if raw is None else str(parse_record(raw)["state"])


def enqueue(url: str, *jobs: tuple[str, str, dict[str, Any], str | None]) -> None:
    async def go() -> None:
        async with App(url, prefix=PREFIX) as app:
            for name, job_id, payload, queue in jobs:
                await app.enqueue(name, payload, job_id=job_id, queue=queue,
                                  correlation_id=f"checkout-{job_id}")
    # Playwright's sync API keeps an event loop on this thread: enqueue on another
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, go).result(timeout=30)


def test_find_a_dead_job_replay_it_and_see_it_succeed(
        browser: Any, redis_proc: RedisProcess, dashboard_url: str, tmp_path: Path) -> None:
    shots = os.environ.get("LQ_DASHBOARD_SCREENSHOTS")
    client = redis_sync.Redis(port=redis_proc.port)
    fail_key = f"{PREFIX}:test:fail"
    with WorkerProcs(redis_proc.url, PREFIX, tmp_path) as workers:
        workers.start("w1", app="tests.harness.apps.dashboard_app:app")
        enqueue(redis_proc.url, *[("flaky", f"order-{i}", {"order": f"A-{i}"}, "default")
                                  for i in range(1, 6)])
        wait_for(lambda: all(state_of(client, "default", f"order-{i}") == "succeeded"
                             for i in range(1, 6)), timeout=30, what="the first orders")
        client.set(fail_key, 1)  # the payment provider is down: the next order dies
        enqueue(redis_proc.url, ("flaky", "order-42", {"order": "A-42"}, "default"),
                *[("send_email", f"mail-{i}", {"to": f"user{i}@example.com"}, "emails")
                  for i in range(7)])
        wait_for(lambda: state_of(client, "default", "order-42") == "dead", timeout=30,
                 what="order-42 to die")

        page = browser.new_page(viewport={"width": 1280, "height": 720})
        # the queues page: the dead job is counted on its queue's row
        page.goto(f"{dashboard_url}/queues")
        dead_link = page.locator('tr[data-queue="default"] a.dead-count')
        assert dead_link.inner_text() == "1"
        if shots:
            page.set_viewport_size({"width": 1280, "height": 300})
            page.screenshot(path=f"{shots}/dashboard-queues.png", full_page=True)
            page.set_viewport_size({"width": 1280, "height": 720})
        dead_link.click()
        page.wait_for_url("**/queues/default?state=dead")
        row = page.locator('tr[data-job-id="order-42"]')
        assert "payment provider down" in row.inner_text()
        assert row.locator("button.replay").count() == 0  # not signed in: no actions

        # its page shows why it died: the error history with the traceback
        row.locator("a.job-link").click()
        page.wait_for_url("**/job?queue=default&id=order-42")
        errors = page.locator("section#errors").inner_text()
        assert "payment provider down for order A-42" in errors
        assert "Traceback (most recent call last)" in errors
        if shots:
            page.screenshot(path=f"{shots}/dashboard-job-dead.png", full_page=True)
        page.go_back()

        # sign in with the token, land back on the dead list
        page.get_by_role("link", name="Sign in").click()
        page.fill('input[name="token"]', TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/queues/default?state=dead")
        if shots:
            page.screenshot(path=f"{shots}/dashboard-dead.png", full_page=True)

        client.delete(fail_key)  # the provider is back
        row.locator("button.replay").click()
        page.wait_for_url("**/queues/default?state=dead")
        assert "replayed 1 dead job(s) of default" in page.locator(".flash").inner_text()

        # find it by id and watch it succeed
        page.fill('nav input[name="q"]', "order-42")
        page.get_by_role("button", name="Find").click()
        page.wait_for_url("**/job?queue=default&id=order-42")
        deadline = 30.0
        waited = 0.0
        while page.locator("#job-state").inner_text() != "succeeded":
            assert waited < deadline, "the replayed job did not succeed"
            page.wait_for_timeout(200)
            waited += 0.2
            page.reload()
        assert '"charged": "yes"' in page.locator("section#result").inner_text()
        # replay cleared its error history; the run logs keep the run that died
        assert page.locator("section#errors").count() == 0
        logs = page.locator("section#logs").inner_text()
        assert "attempt 1: dead" in logs and "payment provider down" in logs
        assert "attempt 1: succeeded" in logs
        if shots:
            page.screenshot(path=f"{shots}/dashboard-job.png", full_page=True)
    assert state_of(client, "default", "order-42") == "succeeded"
    client.close()
