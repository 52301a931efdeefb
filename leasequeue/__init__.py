"""leasequeue: a Redis-native job queue. Workers pull and lease jobs; every
claim, renewal, reap and limiter slot is one Lua script on the server clock."""

from .app import App, JobRequest
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
    LimitKeyError,
    MalformedJob,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    RateLimited,
    RedisUnavailable,
    Retry,
    RunStopped,
    Timeout,
    TransientError,
    UnknownJob,
)
from .limiter import LocalLimiter, RedisLimiter
from .models import EnqueuedJob, JobRecord, JobState, QueueStats, RunLog
from .rate import Rate
from .registry import Defaults
from .runlog import RunLogs
from .worker import Worker

__all__ = [
    "App",
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
    "LimitKeyError",
    "LocalLimiter",
    "MalformedJob",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "QueueStats",
    "Rate",
    "RateLimited",
    "RedisLimiter",
    "RedisUnavailable",
    "Retry",
    "RunLog",
    "RunLogs",
    "RunStopped",
    "Timeout",
    "TransientError",
    "UnknownJob",
    "Worker",
    "exponential",
    "fixed",
]
__version__ = "0.1.0"
