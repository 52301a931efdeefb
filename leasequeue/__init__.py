"""leasequeue: a Redis-native job queue. Workers pull and lease jobs; every
claim, renewal, reap and limiter slot is one Lua script on the server clock."""

from .app import App, JobRequest
from .backoff import exponential, fixed
from .context import Context
from .errors import (
    CompensationFailed,
    ConfigError,
    JobCanceled,
    JobDead,
    JobFailed,
    JobNotFinished,
    JobNotFound,
    LeaseLost,
    LeaseQueueError,
    MalformedJob,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    RedisUnavailable,
    Retry,
    RunStopped,
    SagaCompensated,
    StateTooLarge,
    Timeout,
    TransientError,
    UnknownJob,
)
from .limiter import LocalLimiter, RedisLimiter
from .models import EnqueuedJob, JobRecord, JobState, Progress, QueueStats, RunLog
from .registry import Defaults
from .runlog import RunLogs
from .saga import Step, run_saga
from .worker import Worker

__all__ = [
    "App",
    "CompensationFailed",
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
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "Progress",
    "QueueStats",
    "RedisLimiter",
    "RedisUnavailable",
    "Retry",
    "RunLog",
    "RunLogs",
    "RunStopped",
    "SagaCompensated",
    "StateTooLarge",
    "Step",
    "Timeout",
    "TransientError",
    "UnknownJob",
    "Worker",
    "exponential",
    "fixed",
    "run_saga",
]
__version__ = "0.1.0"
