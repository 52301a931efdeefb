"""leasequeue: a Redis-native job queue. Workers pull and lease jobs; every
claim, renewal, reap and limiter slot is one Lua script on the server clock."""

from .app import App, JobRequest
from .audit import AuditEntry
from .backoff import exponential, fixed
from .breaker import Breaker, BreakerState
from .context import Context
from .errors import (
    AuthenticationFailed,
    BreakerOpen,
    CompensationFailed,
    ConfigError,
    JobCanceled,
    JobDead,
    JobFailed,
    JobNotFinished,
    JobNotFound,
    LeaseLost,
    LeaseQueueError,
    LimitKeyError,
    MalformedJob,
    NotDurable,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    PermissionDenied,
    RateLimited,
    RedisUnavailable,
    ResourceBusy,
    Retry,
    RunStopped,
    SagaCompensated,
    StateTooLarge,
    Timeout,
    TlsVerificationFailed,
    TransientError,
    UnknownJob,
    UnknownQueue,
)
from .hooks import EnqueueInfo, Hooks, Returned, RunEnd, RunInfo, Settled
from .limiter import LocalLimiter, RedisLimiter
from .models import EnqueuedJob, JobRecord, JobState, Progress, QueueStats, RunLog
from .rate import Rate
from .registry import Defaults
from .runlog import RunLogs
from .saga import Step, run_saga
from .store.settings import StoreSettings
from .sync import SyncApp
from .worker import Worker

__all__ = [
    "App",
    "AuditEntry",
    "AuthenticationFailed",
    "Breaker",
    "BreakerOpen",
    "BreakerState",
    "CompensationFailed",
    "ConfigError",
    "Context",
    "Defaults",
    "EnqueueInfo",
    "EnqueuedJob",
    "Hooks",
    "JobCanceled",
    "JobDead",
    "JobFailed",
    "JobNotFinished",
    "JobNotFound",
    "JobRecord",
    "JobRequest",
    "JobState",
    "LeaseLost",
    "LeaseQueueError",
    "LimitKeyError",
    "LocalLimiter",
    "MalformedJob",
    "NotDurable",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "PermissionDenied",
    "Progress",
    "QueueStats",
    "Rate",
    "RateLimited",
    "RedisLimiter",
    "RedisUnavailable",
    "ResourceBusy",
    "Retry",
    "Returned",
    "RunEnd",
    "RunInfo",
    "RunLog",
    "RunLogs",
    "RunStopped",
    "SagaCompensated",
    "Settled",
    "StateTooLarge",
    "Step",
    "StoreSettings",
    "SyncApp",
    "Timeout",
    "TlsVerificationFailed",
    "TransientError",
    "UnknownJob",
    "UnknownQueue",
    "Worker",
    "exponential",
    "fixed",
    "run_saga",
]
__version__ = "0.1.0"
