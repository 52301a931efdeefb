"""Typed errors of leasequeue: one base class, then one class per failure.

Connection errors from redis-py keep their type when they are not wrapped in
``RedisUnavailable`` (which always names the URL)."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from .redact import redact, redact_url


class LeaseQueueError(Exception):
    """Base class of every error leasequeue raises on purpose."""


class ConfigError(LeaseQueueError):
    """A setting or a name that cannot work (bad queue name, unsafe Redis policy...)."""


class UnknownQueue(ConfigError):
    """A queue name that nothing uses: no handler of this App, no keys in
    Redis under this prefix (a typo, or the wrong --prefix)."""


class RedisUnavailable(LeaseQueueError, RedisConnectionError):
    """Redis could not be reached; the message names the URL. It is still a
    redis-py ConnectionError, so code that catches that keeps working."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        self.url = redact_url(url)  # never the password (see leasequeue/redact.py)
        detail = f": {redact(str(cause), url)}" if cause is not None else ""
        super().__init__(f"Redis at {self.url} is unreachable{detail}")


class AuthenticationFailed(RedisUnavailable):
    """Redis refused the user name or password of the URL (or the user is
    disabled). The message never holds the password."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        super().__init__(url, cause)
        self.args = (f"{self.args[0]} (Redis refused the credentials: check the user name and "
                     "password in the URL, and that the ACL user is on)",)


class TlsVerificationFailed(RedisUnavailable):
    """The server's TLS certificate could not be verified (signed by a CA the
    client does not trust, or issued for another host): the connection was
    refused before anything was sent. Name the CA in the URL with
    ``?ssl_ca_certs=/path/ca.pem``."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        super().__init__(url, cause)
        self.args = (f"{self.args[0]} (the server's TLS certificate could not be verified: "
                     "is it signed by a CA this client trusts? Name the CA in the URL with "
                     "?ssl_ca_certs=/path/ca.pem)",)


class PayloadError(LeaseQueueError):
    """A payload that cannot be stored; nothing was enqueued."""


class PayloadNotSerializable(PayloadError):
    """msgpack cannot encode the payload."""


class PayloadTooLarge(PayloadError):
    """The encoded payload is over the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"payload is {size} bytes, over the limit of {limit} bytes")


class UnknownJob(LeaseQueueError):
    """A job name that no handler is registered under."""


class JobNotFound(LeaseQueueError):
    """No job with that id exists (or it expired after its retention)."""


class MalformedJob(LeaseQueueError):
    """A job record in Redis that cannot be decoded (edited by hand, corrupted)."""


class ScriptError(LeaseQueueError):
    """A Lua script reported a broken invariant; carries the operation's name."""

    def __init__(self, operation: str, message: str) -> None:
        self.operation = operation
        super().__init__(f"{operation}: {message}")


class PermissionDenied(ScriptError):
    """The Redis user (ACL) may not run a command or touch a key an operation
    needs. The message names the operation, what Redis refused and, for a
    script, every key it declares: Redis checks read and write access on all
    of them before the script runs. ``leasequeue acl`` prints the ACL lines
    of each role (SECURITY.md). A ScriptError, so code that catches error
    replies keeps working."""

    def __init__(self, operation: str, message: str, keys: tuple[str, ...] = ()) -> None:
        self.refused = message
        self.keys = keys
        need = (f"; {operation} declares the keys {', '.join(keys)}, and the user needs read "
                "and write access to each (read access for a read-only script)"
                if keys and "key" in message else "")  # not when a command was refused
        super().__init__(operation, f"permission denied by the Redis ACL: {message}{need} "
                                    "(see SECURITY.md, `leasequeue acl --role ...`)")


class NotDurable(LeaseQueueError):
    """Durable mode: fewer replicas than asked acknowledged the writes in time.
    The writes are on the master; a failover now could lose them. Retrying an
    enqueue with the same job_id is safe (it is deduplicated)."""

    def __init__(self, operation: str, acked: int, wanted: int, reply: object = None) -> None:
        self.operation = operation
        self.acked = acked
        self.wanted = wanted
        self.reply = reply
        super().__init__(f"{operation}: {acked} of {wanted} replica(s) acknowledged in time")


class RunStopped(LeaseQueueError):
    """Raised by ``ctx.raise_if_stopping()`` once the run should stop; carries
    the stop reason (timeout, slot-lost, canceled, replaced, shutdown). The
    worker settles the run by that reason, not as a failure of the handler."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"run stopped: {reason}")


class LeaseLost(RunStopped):
    """Raised by ``ctx.raise_if_stopping()`` when the run's lease is gone
    (expired and reaped, or taken by another claim): its result would be
    refused by the fencing check, so the handler should stop."""

    def __init__(self, message: str) -> None:
        super().__init__("lease-lost")
        self.args = (message,)


# -- raised by handlers ------------------------------------------------------


class PermanentError(LeaseQueueError):
    """Raised by a handler: the job can never succeed; dead-letter it at once."""

    #: the dead reason recorded with the job (no '|'); subclasses name their own
    dead_reason = "permanent"


class TransientError(LeaseQueueError):
    """Raised by a handler: an infrastructure failure; retry under the infra budget."""


class Retry(LeaseQueueError):
    """Raised by a handler: retry this job after ``delay`` seconds (counts as an attempt)."""

    def __init__(self, delay: float | None = None, message: str = "retry requested") -> None:
        self.delay = delay
        super().__init__(message)


# -- the resilience kit (checkpoints, progress, sagas) ------------------------

class StateTooLarge(LeaseQueueError, ValueError):
    """A run's checkpoints or saga record would be over their size bound;
    nothing was written (the earlier value stands)."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.what, self.size, self.limit = what, size, limit
        super().__init__(f"{what} would be {size} bytes encoded, over the limit of {limit} bytes")


class NoRunState(LeaseQueueError):
    """Checkpoints, progress and sagas need a run of a Worker (a Context built
    elsewhere, e.g. in a unit test, has no store behind it)."""


class SagaCompensated(PermanentError):
    """A saga step failed and every step done before it was compensated: the
    job ends dead with reason ``saga-compensated``; ``step`` is the one that
    failed."""

    dead_reason = "saga-compensated"

    def __init__(self, step: str, error: str) -> None:
        self.step, self.error = step, error
        super().__init__(f"saga step {step!r} failed, the steps before it were compensated: "
                         f"{error}")


class CompensationFailed(PermanentError):
    """A saga compensation kept failing: the job ends dead with reason
    ``compensation-failed:<step>`` (never half-compensated and silent); the
    saga record in Redis says which steps are still done. A replay of the
    job resumes the compensation."""

    def __init__(self, step: str, error: str) -> None:
        self.step, self.error = step, error
        self.dead_reason = f"compensation-failed:{step}"
        super().__init__(f"compensation of saga step {step!r} kept failing: {error}")


class RateLimited(LeaseQueueError):
    """Raised by a handler (e.g. on an HTTP 429): the provider wants no more
    calls for ``retry_after`` seconds. The job's rate limit keys (or only the
    one named ``limit``) are pushed back for every worker that shares them,
    and this job goes back to wait for its turn: no attempt is spent, no
    failure counted."""

    def __init__(self, retry_after: float, limit: str | None = None,
                 message: str = "rate limited by the provider") -> None:
        self.retry_after = retry_after
        self.limit = limit
        super().__init__(message)


class LimitKeyError(LeaseQueueError):
    """A limit key template (or key function) could not render a key for a
    payload: a field it names is missing, or the key is not a valid limit
    key. The message names the template; the job dies as ``bad-limit-key``."""


# -- raised by the operator calls (App.wait, App.rerun) ----------------------


class Timeout(LeaseQueueError):
    """``App.wait`` gave up: the job had not ended within the timeout (it
    may still end later; waiting again is safe). Deliberately not a
    builtin TimeoutError, which a handler's failure treats as infrastructure."""

    def __init__(self, job_id: str, timeout: float) -> None:
        self.job_id = job_id
        self.timeout = timeout
        super().__init__(f"job {job_id} did not end within {timeout}s")


class JobFailed(LeaseQueueError):
    """``App.wait``: the job ended without a result; carries its final state,
    the dead reason and the text of its last error."""

    def __init__(self, job_id: str, state: str, reason: str | None, error: str | None) -> None:
        self.job_id = job_id
        self.state = state
        self.reason = reason
        self.error = error
        first = (error or "").split("\n", 1)[0]
        detail = f" ({reason})" if reason else ""
        super().__init__(f"job {job_id} ended {state}{detail}" + (f": {first}" if first else ""))


class JobDead(JobFailed):
    """``App.wait``: the job is dead (budget spent, PermanentError, ...)."""


class JobCanceled(JobFailed):
    """``App.wait``: the job was canceled."""


class JobNotFinished(LeaseQueueError):
    """``App.rerun``: only a finished job (succeeded, skipped, canceled, dead)
    can be re-run."""


# -- the resilience kit ----------------------------------------------------------


class BreakerOpen(LeaseQueueError):
    """A circuit breaker is open (``async with breaker:`` / ``breaker.guard``).
    Raised out of a handler, the worker puts the job back, its attempt
    refunded, due when the breaker half-opens (``retry_after`` seconds)."""

    def __init__(self, name: str, retry_after: float) -> None:
        self.name = name
        self.retry_after = retry_after
        super().__init__(f"circuit breaker {name!r} is open; ask again in {retry_after:.3f}s")


class ResourceBusy(TransientError):
    """``ctx.resource``: another run that is still live holds this resource
    key (or a reconciler is closing it). An infrastructure failure: the job is
    retried under its infra budget."""
