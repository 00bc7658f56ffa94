"""The errors pgsched raises. Each carries the database's own explanation."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors


class PgschedError(Exception):
    """Base class of everything pgsched raises on purpose."""


class InvalidTaskError(PgschedError, ValueError):
    """The task's input was refused; nothing was written."""


class InvalidLimitError(PgschedError, ValueError):
    """A limit or fairness setting was refused (the message names the field); nothing was
    written."""


class ConfigError(PgschedError, ValueError):
    """A process was configured with a value it cannot run with (the message names the
    option); it refused to start."""


class TaskNotFoundError(PgschedError, LookupError):
    """No task has that id."""


class TaskStateError(PgschedError):
    """The task is not in a state that allows the operation; nothing was changed."""


class TaskCancelledError(PgschedError):
    """Raised in a handler by `ctx.raise_if_cancelled()`: the task was asked to stop, and
    its attempt ends CANCELLED."""


class TaskFailedError(PgschedError):
    """The task ended without a result: DEAD (`status` FAILED) or CANCELLED; `reason` says
    why (`App.result`)."""

    def __init__(self, task_id: int, status: str, reason: str | None) -> None:
        shown = "DEAD" if status == "FAILED" else status
        super().__init__(f"task {task_id} is {shown}: {reason or 'no reason recorded'}")
        self.task_id = task_id
        self.status = status
        self.reason = reason


class ResultTimeoutError(PgschedError, TimeoutError):
    """`App.result` waited its timeout and the task had not finished."""


class SchemaMismatchError(PgschedError):
    """The database's schema is not the one this pgsched needs; the message says what to run."""


def translate(exc: psycopg.Error) -> Exception:
    """Map a database refusal to the pgsched error a caller can catch."""
    message = exc.diag.message_primary or str(exc)
    if isinstance(exc, pg_errors.InvalidParameterValue | pg_errors.InvalidTextRepresentation):
        return InvalidTaskError(message)
    if isinstance(exc, pg_errors.NoDataFound):
        return TaskNotFoundError(message)
    if isinstance(exc, pg_errors.ObjectNotInPrerequisiteState | pg_errors.CheckViolation):
        return TaskStateError(message)
    return exc
