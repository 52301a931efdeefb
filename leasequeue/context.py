"""Context: what a handler knows about its run (ids, attempt, a logger that
carries the ids on every line, and whether it should stop)."""

from __future__ import annotations

import time
from typing import Any

from .log import Log, get_log


class Context:
    __slots__ = (
        "_log", "_soft_deadline", "_stop_reason", "attempt", "correlation_id", "job_id",
        "name", "queue", "request_id", "token", "worker_id",
    )

    def __init__(self, *, job_id: str, name: str, queue: str, attempt: int, token: int,
                 worker_id: str, correlation_id: str, request_id: str,
                 soft_deadline: float) -> None:
        self.job_id = job_id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.token = token
        self.worker_id = worker_id
        self.correlation_id = correlation_id
        self.request_id = request_id
        self._soft_deadline = soft_deadline  # time.monotonic(); inf = no timeout
        self._stop_reason: str | None = None
        self._log: Log | None = None

    @property
    def log(self) -> Log:
        """A structured logger with job_id, run (job:token), correlation and request ids."""
        if self._log is None:
            self._log = get_log(
                "job", job_id=self.job_id, job=self.name, queue=self.queue,
                run=f"{self.job_id}:{self.token}", attempt=self.attempt,
                worker_id=self.worker_id, correlation_id=self.correlation_id,
                request_id=self.request_id,
            )
        return self._log

    def is_stopping(self) -> bool:
        """True once the run should wrap up: timeout reached, lease lost, cancel
        requested, or the worker shutting down. Long loops should check it."""
        return self._stop_reason is not None or time.monotonic() >= self._soft_deadline

    @property
    def stop_reason(self) -> str | None:
        if self._stop_reason is None and time.monotonic() >= self._soft_deadline:
            return "timeout"
        return self._stop_reason

    def _request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason

    def __repr__(self) -> str:
        return f"Context(job_id={self.job_id!r}, name={self.name!r}, attempt={self.attempt})"

    def fields(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job": self.name, "queue": self.queue,
                "run": f"{self.job_id}:{self.token}", "attempt": self.attempt,
                "correlation_id": self.correlation_id}
