"""Who may do what on the dashboard: credentials (a bearer token, a session
cookie got by signing in with that token, or HTTP basic auth), CSRF tokens
for every form, and the safe defaults (read-only without credentials).

It never talks to Redis, and it never accepts a credential in a URL."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

SESSION_COOKIE = "lq_session"
CSRF_COOKIE = "lq_csrf"
SESSION_TTL_S = 12 * 3600  # a signed-in browser signs in again after 12 hours


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller; ``bearer`` callers are not browsers (a browser
    never adds an Authorization: Bearer header by itself), so their forms need
    no CSRF token."""

    who: str
    bearer: bool = False


@dataclass(slots=True)
class Guard:
    """The dashboard's credentials and secrets. ``secret`` signs the session
    and CSRF tokens; it is new for every process unless given (sessions end
    when the dashboard restarts)."""

    token: str | None = None
    basic_user: str | None = None
    basic_password: str | None = None
    read_only: bool = False
    auth_reads: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def has_credentials(self) -> bool:
        return bool(self.token) or bool(self.basic_user and self.basic_password)

    @property
    def writable(self) -> bool:
        """State changes are possible at all: credentials exist and the
        dashboard is not read-only. Without credentials it is read-only."""
        return self.has_credentials and not self.read_only

    # -- identity ----------------------------------------------------------

    def identify(self, request: Request) -> Identity | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.token and _same(value.strip(), self.token):
            return Identity("token", bearer=True)
        if scheme.lower() == "basic" and self.basic_user and self.basic_password:
            user = self._basic_user(value.strip())
            if user is not None:
                return Identity(f"basic:{user}")
        if self.token and self._session_ok(request.cookies.get(SESSION_COOKIE, "")):
            return Identity("session")
        return None

    def _basic_user(self, value: str) -> str | None:
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        assert self.basic_user is not None and self.basic_password is not None
        # compare both, always: no early exit on a wrong user name
        ok_user = _same(user, self.basic_user)
        ok_password = _same(password, self.basic_password)
        return user if sep and ok_user and ok_password else None

    def check_token(self, given: str) -> bool:
        return bool(self.token) and _same(given, self.token or "")

    def new_session(self) -> str:
        issued = str(int(time.time()))
        return f"{issued}.{self._sign('session', issued)}"

    def _session_ok(self, cookie: str) -> bool:
        issued, _, mac = cookie.partition(".")
        if not issued.isdigit() or not _same(mac, self._sign("session", issued)):
            return False
        return 0 <= time.time() - int(issued) < SESSION_TTL_S

    # -- CSRF (a random cookie, and a form field signed from it) ------------

    @staticmethod
    def new_csrf_cookie() -> str:
        return secrets.token_urlsafe(32)

    def csrf_token(self, cookie: str) -> str:
        return self._sign("csrf", cookie)

    def csrf_ok(self, request: Request, form_token: str) -> bool:
        """The form's token matches the browser's CSRF cookie, and a request
        that says where it comes from (Origin) comes from this dashboard."""
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not form_token or not _same(form_token, self.csrf_token(cookie)):
            return False
        origin = request.headers.get("origin")
        if origin is None or origin == "null":  # not told (or hidden): the token decides
            return True
        return urlsplit(origin).netloc == request.headers.get("host", "")

    def _sign(self, purpose: str, value: str) -> str:
        mac = hmac.new(self.secret, f"{purpose}:{value}".encode(), hashlib.sha256)
        return mac.hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def safe_next(target: str | None) -> str:
    """A redirect target after sign-in: a path of this site only."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
