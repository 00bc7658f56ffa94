"""What a caller hands pgsched to schedule, checked before it reaches the database.

The database checks everything again (other languages call it directly); this model adds
what only Python can see, above all a naive datetime, which psycopg would otherwise
silently read in the session's time zone.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

PLAIN_TASK_TYPE = r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$"
PLAIN_TENANT_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$"
# The due times the database accepts (pgsched.run_at_problem): every reading of them, in
# any time zone, stays inside what datetime can represent.
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_LIMIT = datetime(9999, 1, 1, tzinfo=UTC)
MAX_ATTEMPTS_LIMIT = 1000


class TaskSpec(BaseModel):
    """One task to schedule. `run_at` must carry a time zone; None means now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_type: str = Field(pattern=PLAIN_TASK_TYPE)
    payload: Any = Field(default_factory=dict)
    run_at: AwareDatetime | None = None
    tenant_id: str = "default"
    priority: int = Field(default=5, ge=0, le=10)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    lane: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # With idempotency_key: the key names its task only this long (seconds or a timedelta).
    unique_for: timedelta | None = None
    # With idempotency_key: a burst of calls is one task, due this long after the last call.
    debounce: timedelta | None = None
    # The W3C trace context of the request scheduling it, handed to the worker.
    traceparent: str | None = Field(default=None, max_length=100)

    @field_validator("tenant_id")
    @classmethod
    def _tenant_plain(cls, value: str) -> str:
        # The database's rule and words (pgsched.task_identity_problem): a leading "_" is
        # the engine's (a fan-out parent is "_all").
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value) or len(value) > 100:
            quoted = "'" + value.replace("'", "''") + "'"
            raise ValueError(
                f"tenant_id {quoted} is not a plain identifier (letters, digits, _, . and -, "
                "starting with a letter or digit, at most 100 characters)"
            )
        return value

    @field_validator("run_at")
    @classmethod
    def _run_at_in_range(cls, value: datetime | None) -> datetime | None:
        if value is not None and not RUN_AT_MIN <= value < RUN_AT_LIMIT:
            raise ValueError(
                f"run_at {value.isoformat()} is out of range "
                "(1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)"
            )
        return value

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: Any) -> Any:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload is not JSON-serialisable: {exc}") from None
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_is_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata is not JSON-serialisable: {exc}") from None
        return value

    @field_validator("lane")
    @classmethod
    def _lane_known(cls, value: str | None) -> str | None:
        if value is None:
            return None
        upper = value.strip().upper()
        if upper == "DEAD":
            raise ValueError("lane DEAD cannot be scheduled into: tasks reach it only by failing")
        if upper not in {"HIGH", "NORMAL", "LOW", "BATCH"}:
            raise ValueError(f"unknown lane {value!r} (one of HIGH, NORMAL, LOW, BATCH)")
        return upper


class ScheduledTask(int):
    """A scheduled task's id that also says whether this call created the task.

    `created` is False for an idempotent duplicate: the tenant's key already named a task,
    whose id this is, and nothing changed. It is an int, so code that only wants the id
    keeps working.
    """

    created: bool

    def __new__(cls, task_id: int, created: bool) -> ScheduledTask:
        scheduled = super().__new__(cls, task_id)
        scheduled.created = created
        return scheduled

    def __getnewargs__(self) -> tuple[int, bool]:  # type: ignore[override]
        return (int(self), self.created)

    def __str__(self) -> str:
        return int.__repr__(self)

    def __repr__(self) -> str:
        return f"ScheduledTask({int(self)}, created={self.created})"


@dataclass(frozen=True)
class CancelResult:
    """What cancelling one task did. `outcome`:

    - CANCELLED: it had not started; it is CANCELLED now.
    - CANCEL_REQUESTED: it is running; its worker was told to stop it (the task ends
      CANCELLED, or COMPLETED should the handler finish first).
    - FAN_OUT_CANCELLED: a fan-out's unfinished tenants were cancelled; `detail` names
      the tenants that had completed.
    """

    task_id: int
    outcome: str
    detail: str


@dataclass(frozen=True)
class Batch:
    """A scheduled batch: its callback task's id and its members' ids, in input order."""

    callback_id: int
    member_ids: list[int]


@dataclass(frozen=True)
class CancelCounts:
    """What cancelling by filter did (or, for a dry run, would do): tasks cancelled at
    once, and running tasks whose workers were asked to stop them."""

    cancelled: int
    cancel_requested: int

    @property
    def total(self) -> int:
        return self.cancelled + self.cancel_requested


@dataclass(frozen=True)
class TaskRow:
    """The claimed task, as the handler sees it. Field order = the claim query's columns."""

    id: int
    task_type: str
    tenant_id: str
    payload_json: str
    metadata_json: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    lane: str
    priority: int
    idempotency_key: str | None
    lease_token: Any
    schedule_id: int | None = None
    scope: str = "tenant"
    # Set when this (tenant, type, key) already completed: the run is a recorded no-op.
    done_by: int | None = None
    # The W3C trace context of the request that scheduled the task (tasks.traceparent).
    traceparent: str | None = None
    # The task's own retry schedule (tasks.retry_delays), before the handler's.
    retry_delays: list[timedelta] | None = None
    # How often it was snoozed so far (tasks.snoozes).
    snoozes: int = 0

    # Decoded on first use, then kept: a handler that never reads them costs nothing.
    @functools.cached_property
    def payload(self) -> Any:
        return None if self.payload_json is None else json.loads(self.payload_json)

    @functools.cached_property
    def metadata(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.metadata_json or "{}")
        return decoded


@dataclass(frozen=True)
class UndecodableRow:
    """A claimed row that cannot become a TaskRow; what its failure records."""

    id: int
    lease_token: Any
    reason: str


def describe_task(task: TaskRow | None) -> str:
    """How a log line names a task: id, type, lane and attempt."""
    if task is None:
        return "task ?"
    return f"task {task.id} (type {task.task_type}, lane {task.lane}, attempt {task.attempt})"
