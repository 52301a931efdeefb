"""The web dashboard through its ASGI app (httpx, no browser): pages, the
safe defaults (read-only without credentials, auth for every change, CSRF
on every form, escaping of everything shown), actions, and paging a queue of
a million jobs without a scan. The browser test is test_dashboard_browser.py."""

from __future__ import annotations

import argparse
import base64
import logging
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from leasequeue import App, ConfigError, Context, PermanentError, RedisLimiter
from leasequeue.cli import _parser, main
from leasequeue.dashboard.data import JOB_SECTIONS, RateBook, Section, limit_names
from leasequeue.dashboard.run import (
    BASIC_ENV,
    MIN_TOKEN_CHARS,
    TOKEN_ENV,
    allowed_hosts,
    config_from,
    guard_from,
)
from leasequeue.dashboard.security import Guard, is_loopback
from leasequeue.dashboard.server import (
    MAX_FORM_BYTES,
    DashboardConfig,
    create_app,
)
from leasequeue.models import QueueStats
from leasequeue.store.keys import limit_keys
from tests.harness.redis_proc import RedisProcess
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-0123456789"
EVIL = "<script>alert('x')</script>"
BASE = "http://127.0.0.1:8080"


@asynccontextmanager
async def dashboard(app: App, page_size: int = 50,
                    **guard: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = DashboardConfig(url=app.url, prefix=app.prefix, guard=Guard(**guard),
                             page_size=page_size)
    asgi = create_app(config, app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url=BASE) as client:
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient) -> None:
    page = await client.get("/login")
    reply = await client.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text),
                                              "next": "/queues"})
    assert reply.status_code == 303 and "lq_session" in reply.cookies


async def dead_job(app: App, job_id: str, message: str = "boom", **extra: Any) -> None:
    """Run a job that dies at once (PermanentError) through a real worker."""
    @app.job(queue="q", run_logs="all")
    async def doomed(ctx: Context, **payload: Any) -> None:
        ctx.log.warning(f"about to fail {EVIL}")
        raise PermanentError(message)

    await app.enqueue("doomed", {"html": EVIL, **extra}, job_id=job_id,
                      correlation_id=f"corr {EVIL}")
    async with worker_running(app, queues=["q"]):
        await eventually(lambda: _state(app, job_id, "q", "dead"), what="the job died")


async def _state(app: App, job_id: str, queue: str, state: str) -> bool:
    return (await app.get_job(job_id, queue)).state == state


# -- pages and escaping -----------------------------------------------------------


async def test_every_page_escapes_payloads_ids_errors_and_logs(real_app: App) -> None:
    job_id = f"id-{EVIL}"
    await dead_job(real_app, job_id, message=f"failed with {EVIL}")
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        pages = {
            "queues": await client.get("/queues"),
            "dead list": await client.get("/queues/q", params={"state": "dead"}),
            "job": await client.get("/job", params={"queue": "q", "id": job_id}),
            "search": await client.get("/search", params={"q": f"corr {EVIL}"}),
            "confirm": await client.get("/queues/q/confirm", params={"action": "purge"}),
        }
    for what, page in pages.items():
        assert page.status_code == 200, what
        assert "<script" not in page.text.lower(), f"{what} shows a raw <script>"
        # every response forbids scripts outright (defence in depth)
        assert "default-src 'none'" in page.headers["content-security-policy"], what
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"
    job = pages["job"].text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in job  # payload, id, error, log
    for section in ("summary", "errors", "logs", "payload"):
        assert f'<section id="{section}">' in job
    assert "failed with &lt;script&gt;" in job and "about to fail &lt;script&gt;" in job
    assert "&lt;script&gt;" in pages["dead list"].text


async def test_job_page_sections_come_from_a_list(real_app: App) -> None:
    await real_app.enqueue("later", {"n": 1}, job_id="j1", queue="q")
    extra = Section("extra", "Extra section", "sections/payload.html", lambda r: True)
    JOB_SECTIONS.append(extra)
    try:
        async with dashboard(real_app) as client:
            page = await client.get("/job", params={"queue": "q", "id": "j1"})
    finally:
        JOB_SECTIONS.remove(extra)
    assert page.status_code == 200
    assert '<section id="extra">' in page.text and "Extra section" in page.text
    # a queued job has no error history and no result to show
    assert '<section id="errors">' not in page.text
    assert '<section id="result">' not in page.text


async def test_unknown_job_and_bad_queue_are_404_and_400(real_app: App) -> None:
    async with dashboard(real_app) as client:
        missing = await client.get("/job", params={"queue": "q", "id": "nope"})
        bad = await client.get("/queues/q", params={"state": "nonsense"})
    assert missing.status_code == 404 and "nope" in missing.text
    assert bad.status_code == 400


async def test_queues_page_lists_recorded_queues_with_depth_and_pause(real_app: App) -> None:
    for i in range(3):
        await real_app.enqueue("work", {"i": i}, queue="emails")
    await real_app.pause("emails")
    async with dashboard(real_app) as client:
        page = await client.get("/queues")
    assert page.status_code == 200
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', page.text, re.S)
    assert row, "the queue recorded by the producer's first enqueue is listed"
    assert ">3</a>" in row.group(1) and "paused" in row.group(1)
    assert await real_app.recorded_queues() == ["emails"]


async def test_a_worker_boot_records_its_queues(real_app: App) -> None:
    @real_app.job(queue="booted")
    async def nothing(ctx: Context) -> None: ...

    async with worker_running(real_app, queues=["booted"]):
        await eventually(lambda: _recorded(real_app, "booted"), what="the queue recorded")


async def _recorded(app: App, queue: str) -> bool:
    return queue in await app.recorded_queues()


async def test_rates_come_from_counter_samples() -> None:
    book = RateBook()

    def stats(now_ms: int, enqueued: int) -> QueueStats:
        return QueueStats("q", now_ms, 0, 0, 0, 0, 0, None, None,
                          {"enqueued": enqueued, "succeeded": 0})

    assert book.add(stats(10_000, 5))["enqueued"] is None  # one sample: no rate yet
    assert book.add(stats(12_000, 25))["enqueued"] == pytest.approx(10.0)
    assert book.add(stats(14_000, 45))["enqueued"] == pytest.approx(10.0)


async def test_paging_follows_the_cursor(real_app: App) -> None:
    for i in range(120):
        await real_app.enqueue("work", {"i": i}, job_id=f"job-{i:03d}", queue="q")
    seen: list[str] = []
    async with dashboard(real_app, page_size=50) as client:
        url: str | None = "/queues/q?state=queued"
        while url:
            page = await client.get(url)
            seen += re.findall(r'<tr data-job-id="([^"]+)">', page.text)
            nxt = re.search(r'<a class="next" href="([^"]+)">', page.text)
            url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert seen == [f"job-{i:03d}" for i in range(120)]


async def test_a_million_jobs_page_without_scanning() -> None:
    """A queue of 1,000,000 ready jobs (in the line, as priority-0 jobs
    wait): the queues page, the first page and the next page of its jobs
    cost Redis under 50 ms of server time in all (a walk of the line would
    cost far more), and no SCAN or KEYS is sent."""
    with RedisProcess() as server:
        app = App(server.url, prefix="big")
        try:
            job = await app.enqueue("work", {"n": 1}, job_id="seed", queue="big")
            qk = app.keys("big")
            raw = await app.redis.hget(qk.jobs, job.id)  # its payload inside
            for start in range(1, 1_000_001, 25_000):  # seeded server-side, 25k a call
                await app.redis.eval(
                    "for i = tonumber(ARGV[2]), tonumber(ARGV[2]) + 24999 do "
                    "local id = 'j' .. i; redis.call('HSET', KEYS[1], id, ARGV[1]); "
                    "redis.call('RPUSH', KEYS[2], id) end return 1",
                    2, qk.jobs, qk.line, raw, start)
            assert await app.redis.llen(qk.line) == 1_000_001
            await app.redis.config_resetstat()
            async with dashboard(app) as client:
                queues = await client.get("/queues")
                first = await client.get("/queues/big?state=queued")
                nxt = re.search(r'<a class="next" href="([^"]+)">', first.text)
                assert nxt
                second = await client.get(nxt.group(1).replace("&amp;", "&"))
            assert queues.status_code == first.status_code == second.status_code == 200
            assert "1000001" in queues.text
            assert len(re.findall(r"<tr data-job-id=", first.text)) == 50
            assert len(re.findall(r"<tr data-job-id=", second.text)) == 50
            stats = await app.redis.info("commandstats")
            assert not {"cmdstat_scan", "cmdstat_keys"} & set(stats)
            server_us = sum(int(v["usec"]) for v in stats.values())
            assert server_us < 50_000, stats
        finally:
            await app.close()


# -- safe by default ------------------------------------------------------------------


async def test_without_credentials_it_is_read_only(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app) as client:
        page = await client.get("/queues")
        assert "Read-only" in page.text and "<form class=\"inline\"" not in page.text
        refused = await client.post("/queues/q/pause", data={})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert not await real_app.paused("q")


async def test_read_only_flag_refuses_even_a_valid_token(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app, token=TOKEN, read_only=True) as client:
        refused = await client.post("/queues/q/pause",
                                    headers={"authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 403
    assert not await real_app.paused("q")


async def test_actions_need_credentials(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app, token=TOKEN) as client:
        page = await client.get("/queues")
        assert "Sign in" in page.text and "Pause</button>" not in page.text
        anonymous = await client.post("/queues/q/pause", data={"csrf": csrf_of(
            (await client.get("/login")).text)})
        wrong = await client.post("/queues/q/pause",
                                  headers={"authorization": "Bearer not-the-token-at-all"})
        client.cookies.set("lq_session", f"{int(time.time())}.{'0' * 64}")  # forged
        forged = await client.post("/queues/q/pause")
    assert anonymous.status_code == wrong.status_code == forged.status_code == 401
    assert not await real_app.paused("q")


async def test_signed_in_forms_need_their_csrf_token(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        page = await client.get("/queues")
        token = csrf_of(page.text)
        missing = await client.post("/queues/q/pause", data={})
        wrong = await client.post("/queues/q/pause", data={"csrf": "0" * 64})
        other_site = await client.post("/queues/q/pause", data={"csrf": token},
                                       headers={"origin": "http://evil.example"})
        assert not await real_app.paused("q")
        ok = await client.post("/queues/q/pause", data={"csrf": token, "back": "/queues"})
    assert missing.status_code == wrong.status_code == other_site.status_code == 403
    assert "CSRF" in missing.text
    assert ok.status_code == 303 and ok.headers["location"] == "/queues"
    assert await real_app.paused("q")


async def test_a_bearer_token_needs_no_csrf(real_app: App,
                                           caplog: pytest.LogCaptureFixture) -> None:
    await real_app.enqueue("work", {}, queue="q")
    caplog.set_level(logging.INFO, logger="leasequeue")
    async with dashboard(real_app, token=TOKEN) as client:
        ok = await client.post("/queues/q/pause",
                               headers={"authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 303
    assert await real_app.paused("q")
    # every action is logged with who did it (never the credential)
    (line,) = [r for r in caplog.records if r.getMessage() == "dashboard action"]
    assert TOKEN not in str(line.__dict__)
    assert "pause" in str(line.__dict__) and "token" in str(line.__dict__)


async def test_sharded_queues_are_routed_by_their_recorded_count(redis_server: RedisProcess,
                                                                 prefix: str) -> None:
    async with App(redis_server.url, prefix=prefix, queue_shards={"hot": 3}) as producer:
        for i in range(30):
            await producer.enqueue("work", {"i": i}, job_id=f"h{i}", queue="hot")
    async with App(redis_server.url, prefix=prefix) as plain:  # configured with no shards
        async with dashboard(plain) as client:
            # a fresh dashboard's first request: the job page routes by the recorded count
            job = await client.get("/job", params={"queue": "hot", "id": "h7"})
            page = await client.get("/queues")
    row = re.search(r'<tr data-queue="hot">(.*?)</tr>', page.text, re.S)
    assert row and "state=queued\">30</a>" in row.group(1)
    assert job.status_code == 200


async def test_basic_auth(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")

    def basic(password: str) -> dict[str, str]:
        return {"authorization": "Basic " + base64.b64encode(
            f"ops:{password}".encode()).decode()}

    async with dashboard(real_app, basic_user="ops", basic_password="hunter2-long") as client:
        challenge = await client.post("/queues/q/pause")
        wrong = await client.post("/queues/q/pause", headers=basic("wrong"))
        page = await client.get("/queues", headers=basic("hunter2-long"))
        no_csrf = await client.post("/queues/q/pause", headers=basic("hunter2-long"))
        assert not await real_app.paused("q")
        ok = await client.post("/queues/q/pause", headers=basic("hunter2-long"),
                               data={"csrf": csrf_of(page.text)})
    assert challenge.status_code == wrong.status_code == 401
    assert challenge.headers["www-authenticate"].startswith("Basic")
    assert no_csrf.status_code == 403  # a browser resends basic auth by itself: CSRF applies
    assert ok.status_code == 303
    assert await real_app.paused("q")


async def test_auth_reads_asks_before_every_page(real_app: App) -> None:
    async with dashboard(real_app, token=TOKEN, auth_reads=True) as client:
        page = await client.get("/queues")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert (await client.get("/static/style.css")).status_code == 200
        await sign_in(client)
        assert (await client.get("/queues")).status_code == 200


async def test_wrong_token_and_open_redirects_are_refused(real_app: App) -> None:
    async with dashboard(real_app, token=TOKEN) as client:
        page = await client.get("/login")
        wrong = await client.post("/login", data={"token": "nope", "csrf": csrf_of(page.text)})
        assert wrong.status_code == 403 and "lq_session" not in wrong.cookies
        ok = await client.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text),
                                                "next": "//evil.example/x"})
    assert ok.status_code == 303 and ok.headers["location"] == "/"


async def test_a_rebound_host_name_is_refused(real_app: App) -> None:
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1
    must not read the dashboard (its reads are open on loopback)."""
    async with dashboard(real_app) as client:
        rebound = await client.get("/queues", headers={"host": "evil.example:8080"})
        local = await client.get("/queues", headers={"host": "localhost:8080"})
    assert rebound.status_code == 400 and "content-security-policy" in rebound.headers
    assert local.status_code == 200


async def test_a_form_over_the_limit_is_refused_unread(real_app: App) -> None:
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app, token=TOKEN) as client:
        big = await client.post("/queues/q/pause", content=b"x" * (MAX_FORM_BYTES + 1),
                                headers={"authorization": f"Bearer {TOKEN}"})
    assert big.status_code == 413
    assert not await real_app.paused("q")


async def test_an_app_names_its_limits_and_their_capacity() -> None:
    app = App("memory://limits-names", prefix="ln", queue_limits={"pdf": 4})

    @app.job(queue="pdf", max_concurrent=1)
    async def render(ctx: Context) -> None: ...

    names = limit_names(app, ["pdf", "mail"], ["custom.one"])
    assert names == {"queue.pdf": 4, "queue.mail": None, "job.render": 1, "custom.one": None}
    config = config_from(options("--queue", "extra"), app)
    assert (config.url, config.prefix, config.queues) == ("memory://limits-names", "ln",
                                                          ("extra",))
    await app.close()


def test_without_the_extra_the_command_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "leasequeue.dashboard.run", None)  # not importable
    assert main(["dashboard"]) == 1
    assert "pip install 'leasequeue[dashboard]'" in capsys.readouterr().err


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")


# -- actions ----------------------------------------------------------------------------


async def test_replay_one_dead_job(real_app: App) -> None:
    await dead_job(real_app, "d1")
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        page = await client.get("/queues/q?state=dead")
        assert '<tr data-job-id="d1">' in page.text and "Replay</button>" in page.text
        reply = await client.post("/queues/q/replay", data={
            "csrf": csrf_of(page.text), "id": "d1", "back": "/queues/q?state=dead"})
        assert reply.status_code == 303
        after = await client.get(reply.headers["location"])
    assert "replayed 1 dead job(s) of q" in after.text
    assert (await real_app.get_job("d1", "q")).state == "queued"


async def test_purge_needs_the_queue_name_typed(real_app: App) -> None:
    await dead_job(real_app, "d1")
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        confirm = await client.get("/queues/q/confirm?action=purge")
        token = csrf_of(confirm.text)
        refused = await client.post("/queues/q/purge", data={"csrf": token, "confirm": "x"})
        assert refused.status_code == 400
        assert (await real_app.stats("q")).dead == 1
        ok = await client.post("/queues/q/purge", data={"csrf": token, "confirm": "q"})
    assert ok.status_code == 303
    assert (await real_app.stats("q")).dead == 0


async def test_cancel_and_rerun_from_the_job_page(real_app: App) -> None:
    await real_app.enqueue("work", {}, job_id="c1", queue="q")
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        page = await client.get("/job?queue=q&id=c1")
        token = csrf_of(page.text)
        cancel = await client.post("/job/cancel", data={"csrf": token, "queue": "q", "id": "c1"})
        assert cancel.status_code == 303
        assert (await real_app.get_job("c1", "q")).state == "canceled"
        rerun = await client.post("/job/rerun", data={"csrf": token, "queue": "q", "id": "c1"})
    assert rerun.status_code == 303 and "c1%3Arerun%3A1" in rerun.headers["location"]
    assert (await real_app.get_job("c1:rerun:1", "q")).rerun_of == "c1"


async def test_search_by_id_goes_to_the_job(real_app: App) -> None:
    await real_app.enqueue("work", {}, job_id="find/me?#", queue="q")
    async with dashboard(real_app) as client:
        hit = await client.get("/search", params={"q": "find/me?#"})
        miss = await client.get("/search", params={"q": "corr-7"})
    assert hit.status_code == 303
    assert hit.headers["location"] == "/job?queue=q&id=find%2Fme%3F%23"
    assert miss.status_code == 200 and "cid=corr-7" in miss.text


async def test_schedules_pause_and_run_now(real_app: App) -> None:
    @real_app.job(queue="q")
    async def tick(ctx: Context) -> None: ...

    real_app.schedule("tick-hourly", "tick", cron="0 * * * *")
    await real_app.schedules.record()
    async with dashboard(real_app, token=TOKEN) as client:
        await sign_in(client)
        page = await client.get("/schedules")
        assert '<tr data-schedule="tick-hourly">' in page.text
        token = csrf_of(page.text)
        paused = await client.post("/schedules/pause", data={"csrf": token,
                                                             "name": "tick-hourly"})
        trigger = await client.post("/schedules/trigger", data={"csrf": token,
                                                                "name": "tick-hourly"})
    assert paused.status_code == trigger.status_code == 303
    _now, (record,) = await real_app.schedules.list()
    assert record.paused
    assert (await real_app.stats("q")).ready == 1  # run now works while paused


async def test_limits_page_shows_holders(real_app: App) -> None:
    limiter = RedisLimiter(prefix=f"{real_app.prefix}:limiter", redis=real_app.redis)
    holder = f'["{real_app.prefix}", "q", "held-job", 7, "worker-1"]'
    assert (await limiter.acquire("queue.q", 2, holder, False)).taken
    await real_app.enqueue("work", {}, queue="q")
    async with dashboard(real_app) as client:
        page = await client.get("/limits")
    assert page.status_code == 200
    assert "queue.q" in page.text and "held-job</a> #7 on worker-1" in page.text
    assert limit_keys(f"{real_app.prefix}:limiter", "queue.q").limit in (
        await limiter_keys_in(real_app))


async def limiter_keys_in(app: App) -> list[str]:
    return [k.decode() async for k in app.redis.scan_iter(match="{" + app.prefix + ":limiter*")]


# -- the command line's safe defaults ----------------------------------------------------


def options(*argv: str) -> argparse.Namespace:
    args: argparse.Namespace = _parser().parse_args(["dashboard", *argv])
    return args


def test_command_line_defaults_bind_loopback_and_stay_read_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(BASIC_ENV, raising=False)
    args = options()
    assert (args.host, args.port, args.page_size) == ("127.0.0.1", 8080, 50)
    guard = guard_from(args)
    assert not guard.writable and not guard.auth_reads
    assert allowed_hosts(args) == ("127.0.0.1", "localhost", "::1")
    # another address without credentials does not start at all
    with pytest.raises(ConfigError, match="not a loopback address"):
        guard_from(options("--host", "0.0.0.0"))


def test_command_line_credentials_come_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(BASIC_ENV, "ops:hunter2-long")
    guard = guard_from(options("--host", "0.0.0.0"))
    assert guard.writable and guard.auth_reads  # reachable from elsewhere: every page asks
    assert guard.basic_user == "ops" and guard.token == TOKEN
    assert allowed_hosts(options("--host", "0.0.0.0")) == ("*",)
    assert allowed_hosts(options("--host", "0.0.0.0", "--allowed-host", "ops.example")) == (
        "ops.example",)
    assert not guard_from(options("--read-only")).writable
    monkeypatch.setenv(TOKEN_ENV, "short")
    with pytest.raises(ConfigError, match=f"at least {MIN_TOKEN_CHARS}"):
        guard_from(options())
    monkeypatch.delenv(TOKEN_ENV)
    monkeypatch.setenv(BASIC_ENV, "no-colon")
    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        guard_from(options())
    monkeypatch.delenv(BASIC_ENV)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert guard_from(options("--token-file", str(token_file))).token == TOKEN



async def test_job_page_shows_progress_checkpoints_and_the_limits_page_breakers(
        real_app: App) -> None:
    """The resilience kit on the dashboard: a job's progress, checkpoints and
    saga record on its page (escaped like the rest), breakers on the limits page."""
    app = real_app
    job = await app.enqueue("work", {}, queue="q", job_id="kit-job")
    qk = app.keys("q")
    from leasequeue import codec
    await app.redis.hset(qk.runstate, mapping={
        "c:kit-job": codec.encode_state({"transcoded": {"sha": "<b>abc</b>"}}, "checkpoints"),
        "p:kit-job": "1764412801532\x1f0.4\x1fhalfway <i>there</i>",
    })
    app.breaker("payments-api")
    await app.force_breaker("payments-api", "open")
    async with dashboard(app) as client:
        page = await client.get("/job", params={"queue": "q", "id": job.id})
        limits = await client.get("/limits")
    assert page.status_code == 200
    assert "Checkpoints" in page.text and "transcoded" in page.text
    assert "&lt;b&gt;abc&lt;/b&gt;" in page.text and "<b>abc</b>" not in page.text
    assert "Progress" in page.text and "40%" in page.text
    assert "halfway &lt;i&gt;there&lt;/i&gt;" in page.text
    assert limits.status_code == 200
    assert "payments-api" in limits.text and "open (forced)" in limits.text
