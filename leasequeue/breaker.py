"""Circuit breakers: one per external dependency, shared by every worker and
service that uses the same Redis and limiter prefix, decided on the server
clock (lua/breaker_*.lua). Infrastructure failures trip a breaker; while it
is open, jobs that need it are not started; half-open lets one probe
through. This module holds the public Breaker; the worker's side (holding
runs back, reporting outcomes) is runtime/breakers.py. It never runs jobs."""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis

from .errors import BreakerOpen, ConfigError, RedisUnavailable, ScriptError
from .log import get_log
from .store.keys import BreakerKeys, breaker_keys, check_prefix
from .store.scripts import Scripts
from .store.settings import StoreSettings
from .store.specs import BreakerCheckReply, BreakerForceReply, BreakerRecordReply

T = TypeVar("T")

DEFAULT_FAILURES = 5
DEFAULT_WINDOW = 60.0
DEFAULT_COOLDOWN = 30.0
MAX_COOLDOWN_FACTOR = 16  # default max_cooldown: the cooldown doubled four times
DEFAULT_PROBE_LEASE = 60.0

# the holders of `async with breaker:` blocks open in this task (innermost last)
_held: ContextVar[tuple[tuple[int, str, bool], ...]] = ContextVar("lq_breaker_held", default=())


class Admission:
    """The answer of a breaker check: go (``probe`` when this caller is the
    half-open probe), or wait ``wait`` seconds."""

    __slots__ = ("go", "probe", "wait")

    def __init__(self, code: BreakerCheckReply, wait_ms: int) -> None:
        self.go = code is not BreakerCheckReply.OPEN
        self.probe = code is BreakerCheckReply.PROBE
        self.wait = wait_ms / 1000


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One breaker as Redis holds it, read on the server clock."""

    name: str
    state: str  # closed | open | half-open
    forced: bool  # forced open by an operator
    failures: int  # counted within the window (closed only)
    open_for_ms: int | None  # open: until the cooldown ends (None otherwise)
    cooldown_ms: int  # the cooldown of the current (or last) opening
    probe: str | None  # half-open: who probes
    trips: int  # how often it opened
    changed_ms: int  # server instant of the last transition (0 = never)


def _seconds(option: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(f"breaker {option} must be a finite number of seconds > 0, "
                          f"got {value!r}")
    return float(value)


class Breaker:
    """A circuit breaker for one dependency, e.g.
    ``lq.Breaker("payments-api", failures=20, window=30, cooldown=10)``.

    ``failures`` infrastructure failures within ``window`` seconds open it;
    it stays open ``cooldown`` seconds, then lets one probe through
    (half-open). The probe's success closes it; its failure re-opens it with
    the cooldown doubled, up to ``max_cooldown``. A probe that neither
    succeeds nor fails within ``probe_lease`` seconds (it crashed) lets the
    next one through. Attach it to jobs (``@app.job(breakers=[b])``) or use it
    in a handler (``async with b:`` / ``await b.guard(fn, ...)``) once the
    App knows it (``app.breaker(...)`` or a job that lists it)."""

    def __init__(self, name: str, *, failures: int = DEFAULT_FAILURES,
                 window: float = DEFAULT_WINDOW, cooldown: float = DEFAULT_COOLDOWN,
                 max_cooldown: float | None = None, probe_lease: float = DEFAULT_PROBE_LEASE,
                 prefix: str | None = None) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise ConfigError(f"breaker failures must be an int >= 1, got {failures!r}")
        self.name = name
        self.failures = failures
        self.window = _seconds("window", window)
        self.cooldown = _seconds("cooldown", cooldown)
        self.max_cooldown = _seconds("max_cooldown", max_cooldown if max_cooldown is not None
                                     else self.cooldown * MAX_COOLDOWN_FACTOR)
        if self.max_cooldown < self.cooldown:
            raise ConfigError(f"breaker max_cooldown ({self.max_cooldown}) is below its "
                              f"cooldown ({self.cooldown})")
        self.probe_lease = _seconds("probe_lease", probe_lease)
        self.prefix = check_prefix(prefix) if prefix is not None else None
        breaker_keys(self.prefix or "lq", name)  # checks the name now (ConfigError)
        self._scripts: Scripts | None = None
        self._keys: BreakerKeys | None = None
        self._log = get_log("breaker", breaker=name)

    def __repr__(self) -> str:
        return (f"Breaker({self.name!r}, failures={self.failures}, window={self.window}, "
                f"cooldown={self.cooldown}, max_cooldown={self.max_cooldown})")

    def describe(self) -> dict[str, Any]:
        """The breaker's settings, as the worker's boot log shows them."""
        return {"breaker": self.name, "failures": self.failures, "window": self.window,
                "cooldown": self.cooldown, "max_cooldown": self.max_cooldown,
                "probe_lease": self.probe_lease,
                "prefix": self._keys.limiter_prefix if self._keys else self.prefix}

    # -- binding ------------------------------------------------------------------

    def bind(self, redis: Redis, url: str, limiter_prefix: str) -> None:
        """Called by the App with its connection and limiter prefix (a
        ``prefix`` given to the Breaker wins). A second bind is a no-op."""
        if self._scripts is not None:
            return
        self._scripts = Scripts(redis, url, StoreSettings())
        self._keys = breaker_keys(self.prefix or limiter_prefix, self.name)

    @property
    def bound(self) -> bool:
        """Whether the breaker knows its Redis (App.breaker / add_breaker, or a worker)."""
        return self._scripts is not None

    def _ready(self) -> tuple[Scripts, BreakerKeys]:
        if self._scripts is None or self._keys is None:
            raise RuntimeError(f"breaker {self.name!r} used before the App knows it: create it "
                               "with app.breaker(...) or list it in @app.job(breakers=[...])")
        return self._scripts, self._keys

    # -- the operations (one script each) -------------------------------------------

    async def check(self, holder: str, probe_lease: float | None = None) -> Admission:
        """May ``holder`` pass now? (Go, go as the probe, or wait.)"""
        scripts, keys = self._ready()
        lease = probe_lease if probe_lease is not None else self.probe_lease
        code, wait_ms = await scripts.breaker_check(keys, holder, int(lease * 1000),
                                                    int(self.cooldown * 1000))
        if code is BreakerCheckReply.PROBE:
            self._log.info("breaker half-open: probing", probe=holder)
        return Admission(code, wait_ms)

    async def record(self, holder: str, outcome: str) -> BreakerRecordReply:
        """Report a passed call: ``failure`` (an infrastructure failure),
        ``success``, or ``release`` (the probe gives its turn back unused)."""
        scripts, keys = self._ready()
        code, detail = await scripts.breaker_record(
            keys, holder, outcome, self.failures, int(self.window * 1000),
            int(self.cooldown * 1000), int(self.max_cooldown * 1000))
        if code is BreakerRecordReply.OPENED:
            self._log.warning("breaker opened", failures=self.failures, window_s=self.window,
                              cooldown_ms=int(detail), by=holder)
        elif code is BreakerRecordReply.REOPENED:
            self._log.warning("breaker re-opened: the probe failed", cooldown_ms=int(detail),
                              probe=holder)
        elif code is BreakerRecordReply.CLOSED:
            self._log.info("breaker closed: the probe succeeded", probe=holder)
        return code

    async def force(self, mode: str, who: str = "operator") -> bool:
        """Force it ``open`` (no probe until forced closed) or ``closed`` (back
        to normal, failures forgotten). True when that changed something."""
        if mode not in ("open", "closed"):
            raise ConfigError(f"force mode must be 'open' or 'closed', got {mode!r}")
        scripts, keys = self._ready()
        code = await scripts.breaker_force(keys, mode, int(self.cooldown * 1000), who)
        self._log.warning(f"breaker forced {mode}", who=who,
                          changed=code is BreakerForceReply.CHANGED)
        return code is BreakerForceReply.CHANGED

    async def state(self) -> BreakerState:
        """The breaker's state as Redis holds it, read on the server clock."""
        scripts, keys = self._ready()
        now, failures, h = await scripts.breaker_state(keys, int(self.window * 1000))
        return state_from(self.name, now, failures, h)

    # -- inside a handler -----------------------------------------------------------

    async def __aenter__(self) -> Breaker:
        holder = f"call:{uuid.uuid4().hex[:16]}"
        admission = await self.check(holder)
        if not admission.go:
            raise BreakerOpen(self.name, admission.wait)
        _held.set((*_held.get(), (id(self), holder, admission.probe)))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        stack = _held.get()
        mine = next(i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == id(self))
        _, holder, probe = stack[mine]
        _held.set(stack[:mine] + stack[mine + 1:])
        outcome = outcome_of(exc)
        if outcome == "failure" or probe:
            try:
                await self.record(holder, outcome)
            except (RedisUnavailable, ScriptError) as error:
                # a probe's turn lapses with its lease; one failure less counted
                self._log.warning("breaker outcome not recorded", outcome=outcome,
                                  error=str(error))

    async def guard(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` through the breaker (BreakerOpen when open)."""
        async with self:
            return await fn(*args, **kwargs)


def outcome_of(exc: BaseException | None) -> str:
    """What a call's exception tells the breaker: an infrastructure failure
    counts; any other ending means the dependency answered (success); a
    cancellation says nothing (release)."""
    from .runtime.handler import INFRA_ERRORS  # the one list of infra errors

    if exc is None:
        return "success"
    if isinstance(exc, BreakerOpen):  # another breaker held the call back
        return "release"
    if isinstance(exc, INFRA_ERRORS):
        return "failure"
    if not isinstance(exc, Exception):  # cancelled, KeyboardInterrupt...
        return "release"
    return "success"


def state_from(name: str, now: int, failures: int, h: dict[str, str]) -> BreakerState:
    state = h.get("state") or "closed"
    forced = h.get("forced") == "open"
    until = int(h.get("until_ms") or 0)
    return BreakerState(
        name=name, state=state, forced=forced,
        failures=failures if state == "closed" else 0,
        open_for_ms=max(0, until - now) if state == "open" and not forced else None,
        cooldown_ms=int(h.get("cooldown_ms") or 0), probe=h.get("probe") or None,
        trips=int(h.get("trips") or 0), changed_ms=int(h.get("changed_ms") or 0))
