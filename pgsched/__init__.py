"""pgsched: a job scheduler engine on PostgreSQL. The row is the truth."""

from pgsched.app import App
from pgsched.async_app import AsyncApp
from pgsched.errors import (
    InvalidLimitError,
    InvalidTaskError,
    PgschedError,
    ResultTimeoutError,
    TaskCancelledError,
    TaskFailedError,
    TaskNotFoundError,
    TaskStateError,
)
from pgsched.handlers import BatchStatus, ParentResults, Snooze, TaskContext, TaskHandler
from pgsched.lanes import Lane
from pgsched.loop_local import LoopLocal
from pgsched.retry import RetryPolicy
from pgsched.tasks import CancelCounts, CancelResult, ScheduledTask, TaskSpec
from pgsched.workflows import AsyncWorkflow, Batch, Workflow

__version__ = "0.1.0"

__all__ = [
    "App",
    "AsyncApp",
    "AsyncWorkflow",
    "Batch",
    "BatchStatus",
    "CancelCounts",
    "CancelResult",
    "InvalidLimitError",
    "InvalidTaskError",
    "Lane",
    "LoopLocal",
    "ParentResults",
    "PgschedError",
    "ResultTimeoutError",
    "RetryPolicy",
    "ScheduledTask",
    "Snooze",
    "TaskCancelledError",
    "TaskContext",
    "TaskFailedError",
    "TaskHandler",
    "TaskNotFoundError",
    "TaskSpec",
    "TaskStateError",
    "Workflow",
]
