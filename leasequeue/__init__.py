"""leasequeue: a Redis-native job queue. Workers pull and lease jobs; every
claim, renewal, reap and limiter slot is one Lua script on the server clock."""

from .app import App, JobRequest
from .audit import AuditEntry
from .backoff import exponential, fixed
from .context import Context
from .errors import (
    ConfigError,
    JobCanceled,
    JobDead,
    JobFailed,
    JobNotFinished,
    JobNotFound,
    LeaseLost,
    LeaseQueueError,
    MalformedJob,
    NotDurable,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    RedisUnavailable,
    Retry,
    RunStopped,
    Timeout,
    TransientError,
    UnknownJob,
    UnknownQueue,
)
from .limiter import LocalLimiter, RedisLimiter
from .models import EnqueuedJob, JobRecord, JobState, QueueStats, RunLog
from .registry import Defaults
from .runlog import RunLogs
from .store.settings import StoreSettings
from .sync import SyncApp
from .worker import Worker

__all__ = [
    "App",
    "AuditEntry",
    "ConfigError",
    "Context",
    "Defaults",
    "EnqueuedJob",
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
    "LocalLimiter",
    "MalformedJob",
    "NotDurable",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "QueueStats",
    "RedisLimiter",
    "RedisUnavailable",
    "Retry",
    "RunLog",
    "RunLogs",
    "RunStopped",
    "StoreSettings",
    "SyncApp",
    "Timeout",
    "TransientError",
    "UnknownJob",
    "UnknownQueue",
    "Worker",
    "exponential",
    "fixed",
]
__version__ = "0.1.0"
