"""Structured logging: one JSON object per line, with the ids bound to a
logger (job, run, correlation) on every line. Built on the stdlib logging
module so applications keep their own handlers and levels."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Protocol

ROOT = "leasequeue"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class Sink(Protocol):
    """Also receives a logger's lines (a run's log capture, see runlog.py)."""

    def add(self, level: int, msg: str, fields: dict[str, Any]) -> None: ...


class Log:
    """A logger with bound fields: ``log.info("sent", order_id=...)``. With a
    sink, each line also goes there (the bound fields left out), whatever the
    stdlib level lets through."""

    __slots__ = ("_fields", "_logger", "_sink")

    def __init__(self, logger: logging.Logger, fields: dict[str, Any],
                 sink: Sink | None = None) -> None:
        self._logger = logger
        self._fields = fields
        self._sink = sink

    def bind(self, **fields: Any) -> Log:
        return Log(self._logger, {**self._fields, **fields}, self._sink)

    def _log(self, level: int, msg: str, fields: dict[str, Any], exc_info: bool = False) -> None:
        if self._sink is not None:
            self._sink.add(level, msg, fields)
        if self._logger.isEnabledFor(level):
            self._logger.log(level, msg, extra={"fields": {**self._fields, **fields}},
                             exc_info=exc_info)

    def debug(self, msg: str, **fields: Any) -> None:
        self._log(logging.DEBUG, msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._log(logging.INFO, msg, fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self._log(logging.WARNING, msg, fields)

    def error(self, msg: str, exc_info: bool = False, **fields: Any) -> None:
        self._log(logging.ERROR, msg, fields, exc_info)

    def enabled(self, level: int) -> bool:
        return self._logger.isEnabledFor(level)


def get_log(name: str = "", sink: Sink | None = None, **fields: Any) -> Log:
    return Log(logging.getLogger(f"{ROOT}.{name}" if name else ROOT), fields, sink)


def configure(level: int | str = logging.INFO, stream: Any = None) -> None:
    """JSON lines on stderr for the leasequeue loggers (the CLI calls this)."""
    logger = logging.getLogger(ROOT)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
