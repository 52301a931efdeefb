"""Per-run log capture: what ``ctx.log`` writes during one run, kept as
capped text (lines and bytes per run) to be stored with the job when the run
settles. No Redis access here; the lines still go to stdlib logging."""

from __future__ import annotations

import logging
import threading
import time
from enum import StrEnum
from typing import Any

from .store.record import clean_log_text

DEFAULT_LINES = 100
DEFAULT_BYTES = 16 * 1024
MAX_BYTES = 64 * 1024  # the scripts cut a run's logs here too (LOG_RUN_MAX)


class RunLogs(StrEnum):
    """Which runs keep their captured lines (``@app.job(run_logs=...)``)."""

    NONE = "none"  # nothing is captured
    ERRORS = "errors"  # the runs that failed (work, infra, dead)
    ALL = "all"  # every run, succeeded, skipped and canceled too


class RunLogCapture:
    """The lines of one run, capped at ``max_lines`` and ``max_bytes``
    (UTF-8); what does not fit is counted and noted on a last line. Thread
    safe: a sync handler logs from its worker thread."""

    __slots__ = ("_bytes", "_dropped", "_lines", "_lock", "max_bytes", "max_lines", "min_level")

    def __init__(self, max_lines: int = DEFAULT_LINES, max_bytes: int = DEFAULT_BYTES,
                 min_level: int = logging.INFO) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.min_level = min_level
        self._lines: list[str] = []
        self._bytes = 0
        self._dropped = 0
        self._lock = threading.Lock()

    def add(self, level: int, msg: str, fields: dict[str, Any]) -> None:
        if level < self.min_level:
            return
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        line = clean_log_text(f"{stamp} {logging.getLevelName(level).lower()} {msg}{extra}")
        line = line.replace("\n", " ")
        size = len(line.encode()) + 1  # and its newline
        with self._lock:
            if len(self._lines) >= self.max_lines or self._bytes + size > self.max_bytes:
                self._dropped += 1
                return
            self._lines.append(line)
            self._bytes += size

    @property
    def empty(self) -> bool:
        return not self._lines and not self._dropped

    def text(self) -> str:
        """The captured lines joined by newlines ('' when nothing was logged)."""
        with self._lock:
            lines = list(self._lines)
            if self._dropped:
                lines.append(f"... {self._dropped} more line(s) dropped (cap: "
                             f"{self.max_lines} lines, {self.max_bytes} bytes per run)")
        return "\n".join(lines)
