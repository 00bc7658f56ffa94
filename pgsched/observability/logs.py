"""Log set-up and the JSON formatter.

Log lines carry their facts as fields (`extra=`), not only in the message: the text format
shows the message, the JSON format writes one object per line with stable keys, so a log
pipeline can filter on task_id, lane or tenant without parsing prose.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pgsched.tasks import TaskRow, describe_task

LOG_FORMATS = ("text", "json")

# The keys a record may carry through `extra=`; written in this order when present.
FIELDS = (
    "task_id",
    "task_type",
    "lane",
    "tenant",
    "attempt",
    "max_attempts",
    "duration_ms",
    "error_class",
    "error",
    "next_retry_in_s",
    "outcome",
    "worker_id",
    "schedule_id",
    "count",
    "event",
)

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, then the fields it carries."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                data[key] = value
        extra = record.__dict__.get("fields")
        if isinstance(extra, dict):
            data.update(extra)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def start_logging(level: str, log_format: str = "text") -> None:
    """Configure the root logger once for a process (`--log-level`, `--log-format`)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def task_fields(task: TaskRow | None, **more: Any) -> dict[str, Any]:
    """The `extra=` of a log line about a task."""
    if task is None:
        return more
    return {
        "task_id": task.id,
        "task_type": task.task_type,
        "lane": task.lane,
        "tenant": task.tenant_id,
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        **more,
    }


def error_class(error: str | BaseException | None) -> str | None:
    """The class name an operator groups failures by."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        # A handler process's error carries the class name of what it raised there.
        reported = getattr(error, "error_class", None)
        return reported if isinstance(reported, str) else type(error).__name__
    return error.split(":", 1)[0].split("(", 1)[0].strip() or None


def masked_database(conninfo: str) -> str:
    """host:port/dbname of a conninfo, for a start-up line: never its password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(conninfo)
    except Exception:
        return "?"
    host = parts.get("host") or "local"
    port = parts.get("port") or "5432"
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or '?'}"


_attempts_log = logging.getLogger("pgsched.worker.attempts")

# When the running task's attempt started (time.monotonic()): set by the task runner in
# the task's own context, read by the lines about how the attempt ended.
attempt_started: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "pgsched_attempt_started", default=None
)


def attempt_duration_ms() -> float | None:
    """Milliseconds since the current task's attempt started (None outside a task)."""
    started = attempt_started.get()
    return None if started is None else round((time.monotonic() - started) * 1000, 1)


def log_attempt_failed(
    task: TaskRow,
    outcome: str,
    error: str,
    cls: str | None,
    retry_in: float | None,
    shown: str | None = None,
) -> None:
    """The one line of a failed attempt: retried (when, attempt / max) or gone DEAD."""
    dead = outcome == "FAILED" or task.attempt >= task.max_attempts
    fields = task_fields(
        task, error_class=cls, error=error[:2000], duration_ms=attempt_duration_ms()
    )
    text = shown or (error.splitlines()[0] if error else "")
    if dead:
        _attempts_log.error(
            "%s: attempt failed: %s; attempt %d/%d, task DEAD",
            describe_task(task),
            text,
            task.attempt,
            task.max_attempts,
            extra={**fields, "outcome": "dead"},
        )
    else:
        _attempts_log.warning(
            "%s: attempt failed: %s; attempt %d/%d, retry in %.1fs",
            describe_task(task),
            text,
            task.attempt,
            task.max_attempts,
            retry_in or 0.0,
            extra={**fields, "outcome": "retried", "next_retry_in_s": retry_in},
        )


class Reachability:
    """One line when the database stops answering a process, one when it answers again
    (with how long it was gone), instead of a line per failed statement only."""

    def __init__(
        self,
        process: str,
        logger: logging.Logger,
        on_back: Callable[[], object] | None = None,
    ) -> None:
        self._process = process
        self._log = logger
        self._down_since: float | None = None
        # Told when the database answers again (the lane's pools reconnect at once).
        self._on_back = on_back

    def failed(self, exc: BaseException) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        self._log.warning(
            "%s: the database is unreachable (%s)",
            self._process,
            text,
            extra={"event": "database_unreachable", "error": text},
        )

    def answered(self) -> None:
        if self._down_since is None:
            return
        down = time.monotonic() - self._down_since
        self._down_since = None
        self._log.info(
            "%s: the database answers again after %.1fs",
            self._process,
            down,
            extra={"event": "database_back", "fields": {"down_s": round(down, 1)}},
        )
        if self._on_back is not None:
            self._on_back()
