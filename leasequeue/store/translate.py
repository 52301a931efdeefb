"""The one place where redis-py's errors become leasequeue's: connection and
timeout errors (and a cluster that is re-forming) become RedisUnavailable
naming the URL (its password redacted); an ACL refusal becomes
PermissionDenied; any other error reply becomes ScriptError naming the
operation. Every component that talks to Redis goes through here."""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Sequence
from types import TracebackType
from typing import NoReturn, TypeVar

from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoPermissionError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import (
    AuthenticationFailed,
    PermissionDenied,
    RedisUnavailable,
    ScriptError,
    TlsVerificationFailed,
)
from ..redact import redact

T = TypeVar("T")

# the slot moved or the cluster is re-forming (a failover): retry later
TOPOLOGY_ERRORS = (MovedError, AskError, ClusterDownError, TryAgainError, SlotNotCoveredError)
# every error meaning "Redis cannot be reached right now" (OSError: a socket
# error redis-py did not wrap, e.g. while connecting)
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, *TOPOLOGY_ERRORS, RedisClusterException,
               ClusterError, OSError)


# what Redis 7 answers when the ACL refuses: NOPERM for a command sent by the
# client (including a script whose declared KEYS the user may not read and
# write), and these texts for a redis.call inside a script
_ACL_REFUSALS = ("NOPERM", "The user executing the script can't",
                 "No permissions to access", "no permissions to run")


def permission_refused(exc: BaseException) -> bool:
    """True for an error reply of the ACL (not a wrong password: that is
    AuthenticationError, raised while connecting)."""
    text = str(exc)
    return isinstance(exc, NoPermissionError) or (
        isinstance(exc, ResponseError) and any(r in text for r in _ACL_REFUSALS))


def tls_refused(exc: BaseException) -> bool:
    """True when the server's TLS certificate failed verification (redis-py
    wraps the ssl error into a ConnectionError's text)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or (
                "CERTIFICATE_VERIFY_FAILED" in str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class redis_errors:  # lower case: a context manager used as a function
    """Run a block of Redis calls; its failures come out as leasequeue errors.
    ``keys``: the keys a script declares (text or bytes), named by
    PermissionDenied. A class, not a generator: every script call enters
    one, and a @contextmanager cost about 1.9 us to enter and leave, this
    about 0.3."""

    __slots__ = ("keys", "operation", "url")

    def __init__(self, url: str, operation: str, keys: Sequence[str | bytes] = ()) -> None:
        self.url = url
        self.operation = operation
        self.keys = keys

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            return
        error = translated(self.url, self.operation, exc, self.keys)
        if error is not None:
            raise error from exc


def translated(url: str, operation: str, exc: BaseException,
               keys: Sequence[str | bytes] = ()) -> BaseException | None:
    """The leasequeue error for ``exc``, raised by a Redis call of
    ``operation``, or None when it stays as it is: redis_errors' rule, for a
    hot path's ``except``, which costs nothing when no error comes (a with
    block of redis_errors makes an instance and two calls per call)."""
    if isinstance(exc, RedisUnavailable):
        return None
    if isinstance(exc, AuthenticationError):  # a wrong password or user name
        return AuthenticationFailed(url, exc)
    if isinstance(exc, UNAVAILABLE):
        if tls_refused(exc):
            return TlsVerificationFailed(url, exc)
        return RedisUnavailable(url, exc)
    if isinstance(exc, ResponseError):
        if permission_refused(exc):
            names = tuple(k.decode() if isinstance(k, bytes) else k for k in keys)
            return PermissionDenied(operation, redact(str(exc), url), names)
        return ScriptError(operation, redact(str(exc), url))
    if closed_under_a_call(exc):
        return RedisUnavailable(url, RedisConnectionError(str(exc)))
    return None


def reraise(url: str, operation: str, exc: BaseException,
            keys: Sequence[str | bytes] = ()) -> NoReturn:
    """Raise ``exc``, caught from a Redis call of ``operation``, as
    redis_errors would have let it out: translated(), or as it is."""
    error = translated(url, operation, exc, keys)
    if error is None:
        raise exc
    raise error from exc


_REDIS_PY = f"{os.sep}redis{os.sep}"


def closed_under_a_call(exc: BaseException) -> bool:
    """A redis-py connection closed by another task while a call used it:
    redis-py's cluster client, refreshing its slot map in a failover,
    disconnects the connections of a node that commands of other tasks are
    using, and those fail inside redis-py (before 8.2, which checks the
    writer first) with ``'NoneType' object has no
    attribute 'writelines'`` (seen in a worker in
    test_master_failover_loses_no_durably_acknowledged_job: the starter's
    task died of it and the worker stopped), or, on uvloop, with uvloop's
    RuntimeError for a write on a closed transport (closed_transport). The
    connection is gone, so the call is unavailable, as for any lost
    connection. Any other AttributeError or RuntimeError is a bug and rises
    as it is."""
    if isinstance(exc, RuntimeError):
        return closed_transport(exc)
    if not isinstance(exc, AttributeError):
        return False
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return (last is not None and _REDIS_PY in last.tb_frame.f_code.co_filename
            and str(exc).startswith("'NoneType' object has no attribute"))


def closed_transport(exc: RuntimeError) -> bool:
    """uvloop's error for a write on a transport that is already closed
    (asyncio's own loop raises ConnectionResetError, an OSError, for the
    same): ``unable to perform operation on <TCPTransport closed=True ...>;
    the handler is closed``. Seen in a worker on uvloop in
    test_master_failover_loses_no_durably_acknowledged_job (CI of 8b04270):
    redis-py's cluster client wrote a claim on a connection the failover had
    closed, and the claimer's task died of it, the worker with it."""
    text = str(exc)
    return text.startswith("unable to perform operation on <") and text.endswith(
        "the handler is closed")


async def translate_errors(url: str, operation: str, call: Awaitable[T],
                           keys: Sequence[str | bytes] = ()) -> T:
    """Await one call under redis_errors()."""
    with redis_errors(url, operation, keys):
        return await call


def unavailable(exc: BaseException) -> bool:
    """True for an error that means Redis cannot be reached right now (a
    redis-py connection closed under the call included)."""
    return isinstance(exc, UNAVAILABLE) or closed_under_a_call(exc)


__all__ = ["TOPOLOGY_ERRORS", "UNAVAILABLE", "closed_transport", "closed_under_a_call",
           "redis_errors", "reraise", "translate_errors", "translated", "unavailable"]

