"""The dashboard's ASGI app (Starlette): routes, rendering, and the guard in
front of every state change. Pages are Jinja2 templates with autoescape on;
no script runs in the browser (the Content-Security-Policy allows none).

Reads go through the App's operator API a page at a time; writes are the
App's pause, resume, replay, purge, cancel, rerun and schedule calls."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..app import App
from ..errors import ConfigError, JobNotFinished, JobNotFound, LeaseQueueError, RedisUnavailable
from ..log import get_log
from ..models import JobState
from ..schedule_spec import format_ms
from ..store.keys import DEFAULT_PREFIX, check_queue_name
from .data import (
    JOB_SECTIONS,
    RateBook,
    limit_names,
    limiter_state,
    pretty,
    queue_names,
    sync_shards,
)
from .security import CSRF_COOKIE, SESSION_COOKIE, SESSION_TTL_S, Guard, Identity, safe_next

FLASH_COOKIE = "lq_flash"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
MAX_FORM_BYTES = 64 * 1024
STATES = ("queued", "scheduled", "leased", "done", "dead")
REPLAY_ALL_LIMIT = 1000  # "replay oldest" replays at most this many per click
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


@dataclass(slots=True)
class DashboardConfig:
    """How the dashboard reaches Redis and who may change things.

    ``queues``: queue names to show besides those recorded in Redis;
    ``limits``: limit names to show besides ``queue.<q>`` for each queue and
    the App's own; ``limiter_prefix``: the RedisLimiter prefix (default
    ``<prefix>:limiter``)."""

    url: str = "redis://localhost:6379/0"
    prefix: str = DEFAULT_PREFIX
    queues: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()
    limiter_prefix: str | None = None
    page_size: int = 50
    guard: Guard = field(default_factory=Guard)
    # the Host names it answers to ("*": any). Loopback names only by default,
    # so a web page whose name was rebound to 127.0.0.1 cannot read it
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES


class SecurityHeaders:
    """Refuses a Host it does not answer to (DNS rebinding) and adds the
    security headers to every response (pure ASGI)."""

    def __init__(self, inner: ASGIApp, allowed_hosts: tuple[str, ...]) -> None:
        self.inner = inner
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = with_headers_of(send)
        if scope["type"] == "http" and not self._host_ok(scope):
            await PlainTextResponse("unknown Host header", 400)(scope, receive, send)
            return
        await self.inner(scope, receive, send)

    def _host_ok(self, scope: Scope) -> bool:
        if "*" in self.allowed_hosts:
            return True
        raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        try:
            name = urlsplit(f"//{raw}").hostname or ""
        except ValueError:
            return False
        return name in self.allowed_hosts


def with_headers_of(send: Send) -> Send:
    async def with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
        await send(message)

    return with_headers


Handler = Callable[[Request], Awaitable[Response]]


class Dashboard:
    """The pages and actions; one per ASGI app."""

    def __init__(self, config: DashboardConfig, app: App | None = None) -> None:
        self.config = config
        self.guard = config.guard
        self._app = app
        self._owns_app = app is None
        self.rates = RateBook()
        self.shard_counts: dict[str, int] = {}  # queue -> its recorded shard count
        self.log = get_log("dashboard")
        self.env = Environment(loader=PackageLoader("leasequeue.dashboard", "templates"),
                               autoescape=True, undefined=StrictUndefined)
        self.env.filters.update(ms=_format_ms, age=_format_age, rate=_format_rate,
                                pretty=pretty)
        self.env.globals.update(url=_url, local_time=format_ms)

    @property
    def app(self) -> App:
        if self._app is None:  # made in the server's event loop, on first use
            self._app = App(self.config.url, prefix=self.config.prefix)
        return self._app

    async def close(self) -> None:
        if self._owns_app and self._app is not None:
            await self._app.close()

    # -- rendering and gates ------------------------------------------------

    def render(self, request: Request, template: str, status: int = 200,
               **context: Any) -> Response:
        cookie = request.cookies.get(CSRF_COOKIE)
        new_cookie = cookie is None
        if cookie is None:
            cookie = self.guard.new_csrf_cookie()
        identity = self.guard.identify(request)
        flash = _unpack_flash(request.cookies.get(FLASH_COOKIE))
        html = self.env.get_template(template).render(
            request_path=request.url.path, back=_here(request), csrf=self.guard.csrf_token(cookie),
            identity=identity, writer=identity is not None and self.guard.writable,
            guard=self.guard, flash=flash, prefix=self.config.prefix, **context)
        response = HTMLResponse(html, status)
        if new_cookie:
            response.set_cookie(CSRF_COOKIE, cookie, httponly=True, samesite="strict")
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE)
        return response

    def challenge(self, request: Request, why: str) -> Response:
        """Ask who the caller is: basic auth's 401, else the sign-in page."""
        if self.guard.basic_user and not self.guard.token:
            return Response(why, 401, {"www-authenticate": 'Basic realm="leasequeue"'})
        if request.method == "GET":
            return RedirectResponse("/login?" + urlencode({"next": _here(request)}), 303)
        return self.render(request, "error.html", 401, title="Sign in first", message=why)

    def reads(self, handler: Handler) -> Handler:
        """A page: open on loopback unless reads need credentials too."""
        async def page(request: Request) -> Response:
            if self.guard.auth_reads and self.guard.identify(request) is None:
                return self.challenge(request, "this dashboard asks who you are for every page")
            return await self.guarded(request, handler)
        return page

    def writes(self, handler: Callable[[Request, dict[str, list[str]], Identity],
                                       Awaitable[Response]]) -> Handler:
        """An action: needs credentials, a dashboard that is not read-only,
        and (for browsers) the form's CSRF token."""
        async def action(request: Request) -> Response:
            if not self.guard.writable:
                why = ("this dashboard is read-only" if self.guard.read_only else
                       "this dashboard has no credentials configured, so it is read-only: "
                       "set LEASEQUEUE_DASHBOARD_TOKEN or LEASEQUEUE_DASHBOARD_BASIC_AUTH to act")
                return self.render(request, "error.html", 403, title="Read-only", message=why)
            identity = self.guard.identify(request)
            if identity is None:
                return self.challenge(request, "changing anything needs credentials")
            form = await read_form(request)
            if form is None:
                return self.render(request, "error.html", 413, title="Form too large",
                                   message=f"at most {MAX_FORM_BYTES} bytes")
            if not identity.bearer and not self.guard.csrf_ok(request, _one(form, "csrf")):
                return self.render(request, "error.html", 403, title="CSRF check failed",
                                   message="the form was not sent by this dashboard's page "
                                           "(reload the page and try again)")
            return await self.guarded(request, lambda r: handler(r, form, identity))
        return action

    async def guarded(self, request: Request, handler: Handler) -> Response:
        try:
            return await handler(request)
        except JobNotFound as exc:
            return self.render(request, "error.html", 404, title="Not found", message=str(exc))
        except (ConfigError, JobNotFinished) as exc:
            return self.render(request, "error.html", 400, title="Refused", message=str(exc))
        except RedisUnavailable as exc:
            return self.render(request, "error.html", 503, title="Redis unavailable",
                               message=str(exc))
        except LeaseQueueError as exc:
            return self.render(request, "error.html", 500, title="Error", message=str(exc))

    async def queue_name(self, name: str) -> str:
        """A checked queue name, its shards routed by the count recorded in Redis."""
        name = check_queue_name(name)
        await sync_shards(self.app, [name], self.shard_counts)
        return name

    def done(self, form: dict[str, list[str]], message: str, default: str) -> Response:
        """After an action: back to the page it came from, with a message."""
        response = RedirectResponse(safe_next(_one(form, "back") or default), 303)
        response.set_cookie(FLASH_COOKIE, _pack_flash(message), httponly=True,
                            samesite="strict")
        return response

    def audit(self, identity: Identity, action: str, **fields: Any) -> None:
        self.log.info("dashboard action", action=action, by=identity.who, **fields)

    # -- pages ----------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/queues", 303)

    async def queues(self, request: Request) -> Response:
        names = await queue_names(self.app, self.config.queues)
        await sync_shards(self.app, names, self.shard_counts)
        rows = []
        for name in names:
            stats = await self.app.stats(name)
            rows.append((stats, self.rates.add(stats)))
        return self.render(request, "queues.html", rows=rows,
                           refresh=_int(request.query_params.get("refresh"), 0, 0, 3600))

    async def queue(self, request: Request) -> Response:
        name = await self.queue_name(request.path_params["queue"])
        state = request.query_params.get("state") or "queued"
        if state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}")
        cursor = request.query_params.get("cursor") or None
        cid = request.query_params.get("cid") or None
        stats = await self.app.stats(name)
        records, next_cursor = await self.app.jobs(name, state, cursor, self.config.page_size,
                                                   correlation_id=cid)
        letters = await self.app.dead_letters(name, 10) if state == "dead" else []
        return self.render(request, "queue.html", queue=name, stats=stats, state=state,
                           states=STATES, records=records, cursor=cursor,
                           next_cursor=next_cursor, cid=cid or "", letters=letters,
                           rates=self.rates.add(stats), replay_limit=REPLAY_ALL_LIMIT)

    async def confirm(self, request: Request) -> Response:
        name = await self.queue_name(request.path_params["queue"])
        action = request.query_params.get("action")
        if action not in ("purge", "replay-all"):
            raise ConfigError("action must be purge or replay-all")
        stats = await self.app.stats(name)
        return self.render(request, "confirm.html", queue=name, action=action, stats=stats,
                           replay_limit=REPLAY_ALL_LIMIT)

    async def job(self, request: Request) -> Response:
        queue = await self.queue_name(request.query_params.get("queue", ""))
        job_id = request.query_params.get("id", "")
        record = await self.app.get_job(job_id, queue)
        sections = [s for s in JOB_SECTIONS if s.shown(record)]
        return self.render(request, "job.html", record=record, sections=sections,
                           terminal=JobState(record.state).terminal)

    async def search(self, request: Request) -> Response:
        """A job id in any queue (one lookup per queue), else links that
        filter each queue's pages by correlation id."""
        term = (request.query_params.get("q") or "").strip()
        names = await queue_names(self.app, self.config.queues)
        found = []
        if term:
            await sync_shards(self.app, names, self.shard_counts)
            for name in names:
                try:
                    found.append(await self.app.get_job(term, name))
                except JobNotFound:
                    pass
        if len(found) == 1:
            record = found[0]
            return RedirectResponse(_url("/job", queue=record.queue, id=record.id), 303)
        return self.render(request, "search.html", term=term, found=found, queues=names,
                           states=STATES)

    async def schedules(self, request: Request) -> Response:
        now_ms, records = await self.app.schedules.list()
        return self.render(request, "schedules.html", now_ms=now_ms, records=records)

    async def limits(self, request: Request) -> Response:
        names = await queue_names(self.app, self.config.queues)
        wanted = limit_names(self.app, names, self.config.limits)
        prefix, rows = await limiter_state(self.app, self.config.limiter_prefix, wanted)
        breakers = await self.app.breaker_states()  # bounded: one read per named breaker
        return self.render(request, "limits.html", limiter_prefix=prefix, rows=rows,
                           breakers=breakers)

    async def login_page(self, request: Request) -> Response:
        target = safe_next(request.query_params.get("next"))
        if self.guard.identify(request) is not None:
            return RedirectResponse(target, 303)
        if self.guard.basic_user and not self.guard.token:
            return Response("sign in", 401, {"www-authenticate": 'Basic realm="leasequeue"'})
        return self.render(request, "login.html", next=target, failed=False)

    async def login(self, request: Request) -> Response:
        form = await read_form(request) or {}
        target = safe_next(_one(form, "next"))
        if not self.guard.csrf_ok(request, _one(form, "csrf")):
            return self.render(request, "error.html", 403, title="CSRF check failed",
                               message="reload the sign-in page and try again")
        if not self.guard.check_token(_one(form, "token")):
            self.log.warning("dashboard sign-in refused")
            return self.render(request, "login.html", 403, next=target, failed=True)
        response = RedirectResponse(target, 303)
        response.set_cookie(SESSION_COOKIE, self.guard.new_session(), max_age=SESSION_TTL_S,
                            httponly=True, samesite="strict")
        return response

    async def logout(self, request: Request, form: dict[str, list[str]],
                     identity: Identity) -> Response:
        response = RedirectResponse("/queues", 303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # -- actions ----------------------------------------------------------------

    async def pause(self, request: Request, form: dict[str, list[str]],
                    identity: Identity) -> Response:
        name = await self.queue_name(request.path_params["queue"])
        resume = request.url.path.endswith("/resume")
        if resume:
            await self.app.resume(name)
        else:
            await self.app.pause(name)
        self.audit(identity, "resume" if resume else "pause", queue=name)
        return self.done(form, f"queue {name} {'resumed' if resume else 'paused'}", "/queues")

    async def replay(self, request: Request, form: dict[str, list[str]],
                     identity: Identity) -> Response:
        name = await self.queue_name(request.path_params["queue"])
        ids = [i for i in form.get("id", []) if i]
        if _one(form, "all") == "1":
            n = await self.app.replay(None, queue=name, limit=REPLAY_ALL_LIMIT)
        elif ids:
            n = await self.app.replay(ids, queue=name)
        else:
            raise ConfigError("nothing to replay: no job id given")
        self.audit(identity, "replay", queue=name, ids=ids[:20], replayed=n)
        return self.done(form, f"replayed {n} dead job(s) of {name}", f"/queues/{name}")

    async def purge(self, request: Request, form: dict[str, list[str]],
                    identity: Identity) -> Response:
        name = await self.queue_name(request.path_params["queue"])
        if _one(form, "confirm") != name:
            raise ConfigError(f"type the queue's name ({name}) to confirm the purge")
        n = await self.app.purge_dead(name)
        self.audit(identity, "purge", queue=name, purged=n)
        return self.done(form, f"purged {n} dead job(s) of {name}",
                         f"/queues/{name}?state=dead")

    async def job_action(self, request: Request, form: dict[str, list[str]],
                         identity: Identity) -> Response:
        action = request.path_params["action"]
        queue = await self.queue_name(_one(form, "queue"))
        job_id = _one(form, "id")
        back = _url("/job", queue=queue, id=job_id)
        if action == "cancel":
            status = await self.app.cancel(job_id, queue)
            message = f"cancel: {status}"
        elif action == "rerun":
            new_id = await self.app.rerun(job_id, queue)
            back = _url("/job", queue=queue, id=new_id)
            message = f"re-run as {new_id}"
        else:
            raise ConfigError(f"unknown job action {action!r}")
        self.audit(identity, action, queue=queue, job_id=job_id)
        return self.done({"back": [back]}, message, back)

    async def schedule_action(self, request: Request, form: dict[str, list[str]],
                              identity: Identity) -> Response:
        action = request.path_params["action"]
        name = _one(form, "name")
        if action == "pause":
            changed = await self.app.schedules.pause(name)
            message = f"schedule {name}: {'paused' if changed else 'was paused already'}"
        elif action == "resume":
            changed = await self.app.schedules.resume(name)
            message = f"schedule {name}: {'resumed' if changed else 'was not paused'}"
        elif action == "trigger":
            job = await self.app.schedules.trigger(name)
            message = f"schedule {name}: enqueued {job.id} on {job.queue}"
        else:
            raise ConfigError(f"unknown schedule action {action!r}")
        self.audit(identity, f"schedule-{action}", schedule=name)
        return self.done(form, message, "/schedules")


def create_app(config: DashboardConfig | None = None, app: App | None = None) -> ASGIApp:
    """The dashboard as an ASGI app. ``app``: an App to read and act through
    (its registry names more queues and limits); by default one is made from
    ``config.url`` and ``config.prefix`` on the first request."""
    config = config or DashboardConfig()
    d = Dashboard(config, app)
    r, w = d.reads, d.writes
    routes = [
        Route("/", r(d.home)),
        Route("/queues", r(d.queues)),
        Route("/queues/{queue}", r(d.queue)),
        Route("/queues/{queue}/confirm", r(d.confirm)),
        Route("/queues/{queue}/replay", w(d.replay), methods=["POST"]),
        Route("/queues/{queue}/purge", w(d.purge), methods=["POST"]),
        Route("/queues/{queue}/pause", w(d.pause), methods=["POST"]),
        Route("/queues/{queue}/resume", w(d.pause), methods=["POST"]),
        Route("/job", r(d.job)),
        Route("/job/{action:str}", w(d.job_action), methods=["POST"]),
        Route("/search", r(d.search)),
        Route("/schedules", r(d.schedules)),
        Route("/schedules/{action:str}", w(d.schedule_action), methods=["POST"]),
        Route("/limits", r(d.limits)),
        Route("/login", d.login_page),
        Route("/login", d.login, methods=["POST"]),
        Route("/logout", w(d.logout), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("leasequeue.dashboard", "static")]),
              name="static"),
    ]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await d.close()

    starlette = Starlette(routes=routes, lifespan=lifespan)
    starlette.state.dashboard = d
    return SecurityHeaders(starlette, config.allowed_hosts)


# -- helpers -----------------------------------------------------------------


async def read_form(request: Request) -> dict[str, list[str]] | None:
    """An urlencoded form of at most MAX_FORM_BYTES (None when larger: the
    rest is not read into memory)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    return parse_qs(body.decode(errors="replace"), keep_blank_values=True)


def _one(form: dict[str, list[str]], name: str) -> str:
    values = form.get(name)
    return values[0] if values else ""


def _url(path: str, **params: Any) -> str:
    """A link with its query escaped (job ids may hold any character)."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return f"{path}?{query}" if query else path


def _here(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(value))) if value else default
    except ValueError:
        return default


def _pack_flash(message: str) -> str:
    return base64.urlsafe_b64encode(message[:300].encode()).decode()


def _unpack_flash(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return base64.urlsafe_b64decode(value.encode()).decode()
    except ValueError:
        return None


def _format_ms(ms: int | None) -> str:
    if not ms:
        return "–"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _format_age(ms: int | None) -> str:
    if ms is None:
        return "–"
    seconds = ms / 1000
    if abs(seconds) < 60:
        return f"{seconds:.1f} s"
    if abs(seconds) < 3600:
        return f"{seconds / 60:.1f} min"
    if abs(seconds) < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _format_rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}/s"
