"""Rate limits as declared (``lq.Rate``) and limit keys rendered from a
payload (``key="stripe:{account_id}"`` or a function). Pure data and checks:
counting happens in lua/rate.lua, called by runtime/rates.py."""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, LimitKeyError
from .store.keys import check_job_name, check_limit_key

KeyFunction = Callable[[Mapping[str, Any]], str]
MIN_INTERVAL_US = 1  # at most 1,000,000 starts a second per key


@dataclass(frozen=True, slots=True)
class LimitKey:
    """Renders the key of a limit from a job's payload: a template whose
    ``{fields}`` are payload fields, or a function payload -> str."""

    source: str | KeyFunction
    fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, option: str, value: Any) -> LimitKey:
        if callable(value):
            return cls(value)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{option} must be a key template such as 'stripe:{{account_id}}' "
                              f"or a function payload -> str, got {value!r}")
        names = []
        try:
            parsed = list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ConfigError(f"{option}: bad key template {value!r}: {exc}") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if not name.isidentifier() or spec or conversion:
                raise ConfigError(f"{option}: key template {value!r} may only name payload "
                                  f"fields as {{field}}, got {{{name}}}")
            names.append(name)
        if not names:
            raise ConfigError(f"{option}: key template {value!r} names no payload field; "
                              "for one budget shared by every job, leave the key out")
        return cls(value, tuple(names))

    @property
    def text(self) -> str:
        """The template, or the function's name: what logs and errors show."""
        if isinstance(self.source, str):
            return self.source
        return f"<function {getattr(self.source, '__qualname__', repr(self.source))}>"

    def render(self, payload: Mapping[str, Any]) -> str:
        """The key for this payload; LimitKeyError naming the template when a
        field is missing or the key is not a valid limit key."""
        if isinstance(self.source, str):
            missing = [f for f in self.fields if f not in payload]
            if missing:
                raise LimitKeyError(f"limit key template {self.source!r} names "
                                    f"{', '.join(missing)}, missing from the payload")
            key = self.source.format_map(payload)
        else:
            try:
                key = self.source(payload)
            except Exception as exc:
                raise LimitKeyError(f"limit key function {self.text} raised "
                                    f"{type(exc).__name__}: {exc}") from exc
        try:
            return check_limit_key(key)
        except ConfigError as exc:
            raise LimitKeyError(f"limit key {self.text} rendered a bad key: {exc}") from None


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` starts per ``per`` seconds, with up to ``burst``
    at once (default: ``limit``), counted in Redis on the server clock (GCRA)
    under the limiter prefix, so every service with the same limiter prefix
    shares the budget. ``key``: a template over the payload
    (``"stripe:{account_id}"``) or a function payload -> str, for one budget
    per key (tenant). ``name``: a named limit that several jobs share (declare
    the same numbers on each); without it the limit belongs to the job (or
    the queue) it is declared on."""

    limit: int
    per: float = 1.0
    burst: int | None = None
    key: str | KeyFunction | None = None
    name: str | None = None
    limit_key: LimitKey | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigError(f"Rate: limit must be an int >= 1 (starts per window), "
                              f"got {self.limit!r}")
        if (isinstance(self.per, bool) or not isinstance(self.per, int | float)
                or not math.isfinite(self.per) or self.per <= 0):
            raise ConfigError(f"Rate: per must be a finite number of seconds > 0, "
                              f"got {self.per!r}")
        if self.interval_us < MIN_INTERVAL_US:
            raise ConfigError(f"Rate: {self.limit} per {self.per}s is over 1,000,000 a second")
        if self.burst is not None and (isinstance(self.burst, bool)
                                       or not isinstance(self.burst, int) or self.burst < 1):
            raise ConfigError(f"Rate: burst must be an int >= 1, got {self.burst!r}")
        if self.name is not None:
            check_job_name(self.name)
        if self.key is not None:
            object.__setattr__(self, "limit_key", LimitKey.of("Rate key", self.key))

    @property
    def interval_us(self) -> int:
        """One start per this many microseconds."""
        return round(self.per * 1_000_000 / self.limit)

    @property
    def tolerance_us(self) -> int:
        """How far ahead of its interval a start may come: (burst - 1) intervals, in us."""
        return (self.effective_burst - 1) * self.interval_us

    @property
    def effective_burst(self) -> int:
        """The burst: as declared, else the limit (one period's starts at once)."""
        return self.burst if self.burst is not None else self.limit

    def same_numbers(self, other: Rate) -> bool:
        """Whether ``other`` declares the same limit, period and burst."""
        return (self.limit, self.per, self.effective_burst) == (
            other.limit, other.per, other.effective_burst)

    def describe(self) -> str:
        """A one-line description for logs and stats (e.g. '100/1s burst 10')."""
        text = f"{self.limit}/{self.per:g}s burst {self.effective_burst}"
        if self.name is not None:
            text = f"{self.name}: {text}"
        if self.limit_key is not None:
            text += f" per key {self.limit_key.text}"
        return text


def check_rates(option: str, value: Any) -> tuple[Rate, ...]:
    """A Rate or a sequence of them (a job may obey several, e.g. its own
    and a named provider limit)."""
    if value is None:
        return ()
    rates = (value,) if isinstance(value, Rate) else value
    if not isinstance(rates, tuple | list) or not all(isinstance(r, Rate) for r in rates):
        raise ConfigError(f"{option} must be an lq.Rate (or a list of them), got {value!r}")
    return tuple(rates)
