"""Backoff policies: pure functions from the attempt number (1 = first retry's
attempt that failed) to a delay in seconds. No I/O, no clocks."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Backoff = Callable[[int], float]
MAX_DELAY_S = 30 * 24 * 3600.0  # a retry more than 30 days away is a bug


@dataclass(frozen=True, slots=True)
class Fixed:
    seconds: float

    def __call__(self, attempt: int) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class Exponential:
    """base * 2^(attempt-1), capped; with jitter, uniform in [0, that] ("full jitter")."""

    base: float
    cap: float
    jitter: bool = False

    def __call__(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        if self.jitter:
            return float(random.uniform(0, ceiling))
        return ceiling


def fixed(seconds: float) -> Fixed:
    """Retry after the same delay every time: ``fixed(5)`` waits 5 s."""
    return Fixed(_non_negative(seconds))


def exponential(base: float = 1.0, cap: float = 300.0, jitter: bool = False) -> Exponential:
    """Retry after ``base * 2^(attempt-1)`` seconds, at most ``cap``; with
    ``jitter``, a uniform delay in [0, that] ("full jitter", so retries of
    many jobs that failed together spread out)."""
    return Exponential(_non_negative(base), _non_negative(cap), jitter)


def delay_ms(policy: Backoff, attempt: int) -> int:
    """Run a policy (custom ones included) and clamp its answer to whole ms >= 0."""
    seconds = float(policy(attempt))
    if seconds != seconds or seconds < 0:  # NaN or negative: retry at once
        seconds = 0.0
    return int(min(seconds, MAX_DELAY_S) * 1000)  # inf or absurd: capped


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"backoff seconds must be >= 0, got {value}")
    return float(value)
