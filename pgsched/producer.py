"""How a producer call becomes a named statement and its arguments, for `App` and `AsyncApp`.

The two producers differ only in how they run a statement (a connection or an async one);
what a call checks, which statement it runs and what it binds is decided here, once. A
parameter added to scheduling goes into `ScheduleOptions` and `schedule_call` (or
`RecurringOptions` and `recurring_call`), and both producers take it.

    call = schedule_call("send_email", {"to": "a@b.c"}, tenant_id="acme")
    row = conn.execute(query(call.name), call.params).fetchone()
    task = scheduled_task(row)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

from psycopg.types.json import Jsonb
from pydantic import ValidationError

from pgsched.cron import CronSchedule
from pgsched.errors import InvalidTaskError, ResultTimeoutError, TaskFailedError
from pgsched.retry import retry_delay_list
from pgsched.tasks import Batch, CancelCounts, CancelResult, ScheduledTask, TaskSpec

SCHEDULE_CHUNK = 20_000


@dataclass(frozen=True)
class Call:
    """A named statement (sql/queries.sql) and the arguments it binds."""

    name: str
    params: dict[str, Any]
    binary: bool = False


class ScheduleOptions(TypedDict, total=False):
    """The keyword arguments of `schedule` (App and AsyncApp), besides `conn`."""

    run_at: datetime | None
    tenant_id: str
    priority: int
    idempotency_key: str | None
    max_attempts: int
    lane: str | None
    metadata: Mapping[str, Any] | None
    scope: str
    product: str | None
    unique_for: float | timedelta | None
    debounce: float | timedelta | None
    traceparent: str | None
    retry_delays: Sequence[float | timedelta] | None
    depends_on: Sequence[int] | None
    on_parent_failure: str | None
    complete_by: datetime | None
    deadline_callback: str | None


class RecurringOptions(TypedDict, total=False):
    """The keyword arguments of `schedule_recurring` (App and AsyncApp), besides `conn`."""

    timezone: str
    payload: Any
    tenant_id: str
    priority: int
    idempotency_key: str | None
    misfire_policy: str
    catch_up_limit: int
    max_attempts: int
    lane: str | None
    metadata: Mapping[str, Any] | None
    scope: str
    product: str | None
    complete_within: float | timedelta | None
    deadline_callback: str | None


class CancelWhereOptions(TypedDict, total=False):
    """The filters and options of `cancel_where` (App and AsyncApp), besides `conn`."""

    task_type: str | None
    tenant_id: str | None
    idempotency_key: str | None
    due_from: datetime | None
    due_until: datetime | None
    reason: str
    actor: str | None
    dry_run: bool


def task_spec(value: TaskSpec | Mapping[str, Any], index: int | None = None) -> TaskSpec:
    """A task to schedule, checked; an InvalidTaskError names the field (and the caller's
    index in a batch)."""
    if isinstance(value, TaskSpec):
        return value
    try:
        return TaskSpec.model_validate(value)
    except ValidationError as exc:
        where = "" if index is None else f"tasks[{index}]: "
        raise InvalidTaskError(where + _first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "task"
    return f"{where}: {error['msg']}"


def schedule_call(
    task_type: str,
    payload: Any = None,
    *,
    run_at: datetime | None = None,
    tenant_id: str = "default",
    priority: int = 5,
    idempotency_key: str | None = None,
    max_attempts: int = 3,
    lane: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    scope: str = "tenant",
    product: str | None = None,
    unique_for: float | timedelta | None = None,
    debounce: float | timedelta | None = None,
    traceparent: str | None = None,
    retry_delays: Sequence[float | timedelta] | None = None,
    depends_on: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    complete_by: datetime | None = None,
    deadline_callback: str | None = None,
) -> Call:
    """One task: `task_schedule_one`, whose row `scheduled_task` reads. With
    `depends_on` (task ids) it waits until those tasks finish (`on_parent_failure`: what
    a parent going DEAD or CANCELLED does to it: hold, cancel or run)."""
    spec = task_spec(
        {
            "task_type": task_type,
            "payload": {} if payload is None else payload,
            "run_at": run_at,
            "tenant_id": tenant_id,
            "priority": priority,
            "idempotency_key": idempotency_key,
            "max_attempts": max_attempts,
            "lane": lane,
            "metadata": {} if metadata is None else metadata,
            "unique_for": unique_for,
            "debounce": debounce,
            "traceparent": traceparent,
        }
    )
    params = {
        "task_type": spec.task_type,
        "payload": Jsonb(spec.payload),
        "run_at": spec.run_at,
        "tenant_id": spec.tenant_id,
        "priority": spec.priority,
        "idempotency_key": spec.idempotency_key,
        "max_attempts": spec.max_attempts,
        "lane": spec.lane,
        "metadata": Jsonb(spec.metadata),
        "scope": scope,
        "product": product,
        "unique_for": spec.unique_for,
        "debounce": spec.debounce,
        "traceparent": spec.traceparent,
        "retry_delays": None if retry_delays is None else retry_delay_list(retry_delays),
        "depends_on": parent_ids(depends_on),
        "on_parent_failure": on_parent_failure,
        # Checked by the database (pgsched.deadline_problem), which knows the due time.
        "complete_by": complete_by,
        "deadline_callback": deadline_callback,
    }
    return Call("task_schedule_one", params)


def parent_ids(depends_on: Sequence[int] | None) -> list[int] | None:
    """`depends_on` as the list of task ids the database checks (each must exist, be
    of the same tenant or global, and not be cancelled)."""
    if depends_on is None:
        return None
    if isinstance(depends_on, str | bytes) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in depends_on
    ):
        raise InvalidTaskError("depends_on: a list of task ids (integers)")
    return list(depends_on)


def scheduled_task(row: Mapping[str, Any] | None) -> ScheduledTask:
    """The task a `task_schedule_one` row names (a dict row)."""
    if row is None:
        raise RuntimeError("statement 'task_schedule_one' returned no row")
    return ScheduledTask(row["task_id"], row["created"])


def task_specs(tasks: Iterable[TaskSpec | Mapping[str, Any]]) -> list[TaskSpec]:
    """The tasks of a `schedule_many` call, each checked (the first bad one is named)."""
    return [task_spec(task, index) for index, task in enumerate(tasks)]


def schedule_chunk_call(specs: list[TaskSpec]) -> Call:
    """One chunk of a `schedule_many`: `task_schedule_many`, arrays in binary; its rows
    (task_id, created, in input order) are read by column name."""

    def column(values: list[Any]) -> list[Any] | None:
        # An all-default column travels as NULL: less to send, same result.
        return None if all(v is None for v in values) else values

    params = {
        "task_types": [s.task_type for s in specs],
        "payloads": [Jsonb(s.payload) for s in specs],
        "run_ats": column([s.run_at for s in specs]),
        "tenant_ids": [s.tenant_id for s in specs],
        "priorities": [s.priority for s in specs],
        "idempotency_keys": column([s.idempotency_key for s in specs]),
        "max_attempts": [s.max_attempts for s in specs],
        "lanes": column([s.lane for s in specs]),
        "metadatas": [Jsonb(s.metadata) for s in specs],
        "unique_fors": column([s.unique_for for s in specs]),
        "debounces": column([s.debounce for s in specs]),
        "traceparents": column([s.traceparent for s in specs]),
    }
    return Call("task_schedule_many", params, binary=True)


_CHUNK_ROW = re.compile(r"pgsched: row (\d+) of the batch: (.*)", re.DOTALL)


def callers_row(error: Exception, start: int, chunk: int) -> Exception:
    """A refusal of one of a chunk's rows, renamed to the caller's index (as `task_spec`
    names it): the database numbers the rows of the chunk it was sent, from 1, and names
    no row in a chunk of one."""
    if not isinstance(error, InvalidTaskError):
        return error
    text = str(error)
    found = _CHUNK_ROW.fullmatch(text)
    if found:
        return InvalidTaskError(f"tasks[{start + int(found[1]) - 1}]: {found[2]}")
    if chunk == 1:
        return InvalidTaskError(f"tasks[{start}]: {text.removeprefix('pgsched: ')}")
    return error


@dataclass(frozen=True)
class RecurringCall:
    """A `schedule_recurring` call before its first fire time is known: that is read
    off the database's clock (`database_now`) on the connection that runs it."""

    clock: CronSchedule
    params: dict[str, Any]

    def at(self, database_now: datetime) -> Call:
        # By the database's clock, like every later fire time: by this host's, a clock
        # running behind would arm it in the database's past (it runs at once) and one
        # running ahead would skip the fire times in between.
        params = dict(self.params, first_fire_at=self.clock.next_fire(database_now))
        return Call("schedule_recurring", params)


def seconds_or_timedelta(name: str, value: float | timedelta | None) -> timedelta | None:
    """A duration given as seconds or a timedelta, as the database's interval."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskError(f"{name}: seconds or a timedelta, got {value!r}")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise InvalidTaskError(f"{name}: {value!r} seconds is out of range") from None


def recurring_call(
    task_type: str,
    cron_expression: str,
    *,
    timezone: str = "UTC",
    payload: Any = None,
    tenant_id: str = "default",
    priority: int = 5,
    idempotency_key: str | None = None,
    misfire_policy: str = "run_once",
    catch_up_limit: int = 10,
    max_attempts: int = 3,
    lane: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    scope: str = "tenant",
    product: str | None = None,
    complete_within: float | timedelta | None = None,
    deadline_callback: str | None = None,
) -> RecurringCall:
    """A recurring schedule; the statement's `schedule_id` column is the result."""
    from pgsched.cron import CronError, parse

    spec = task_spec(
        {
            "task_type": task_type,
            "payload": {} if payload is None else payload,
            "tenant_id": tenant_id,
            "priority": priority,
            "idempotency_key": idempotency_key,
            "max_attempts": max_attempts,
            "lane": lane,
            "metadata": {} if metadata is None else metadata,
        }
    )
    try:
        clock = parse(cron_expression, timezone)
    except CronError as exc:
        raise InvalidTaskError(str(exc)) from None
    params = {
        "task_type": spec.task_type,
        "cron_expression": cron_expression,
        "timezone": timezone,
        "payload": Jsonb(spec.payload),
        "tenant_id": spec.tenant_id,
        "priority": spec.priority,
        "idempotency_key": spec.idempotency_key,
        "misfire_policy": misfire_policy,
        "max_attempts": spec.max_attempts,
        "lane": spec.lane,
        "metadata": Jsonb(spec.metadata),
        "catch_up_limit": catch_up_limit,
        "first_fire_at": None,
        "scope": scope,
        "product": product,
        # Checked by the database (its range, a tenant's schedule, the callback's name).
        "complete_within": seconds_or_timedelta("complete_within", complete_within),
        "deadline_callback": deadline_callback,
    }
    return RecurringCall(clock, params)


def cancel_call(task_id: int, reason: str = "cancelled", actor: str | None = None) -> Call:
    """Cancel one task: `task_cancel`, whose row `cancel_result` reads."""
    return Call("task_cancel", {"task_id": task_id, "reason": reason, "actor": actor})


def cancel_result(task_id: int, row: Mapping[str, Any] | None) -> CancelResult:
    if row is None:
        raise RuntimeError("statement 'task_cancel' returned no row")
    return CancelResult(task_id, row["outcome"], row["detail"])


def cancel_where_call(
    *,
    task_type: str | None = None,
    tenant_id: str | None = None,
    idempotency_key: str | None = None,
    due_from: datetime | None = None,
    due_until: datetime | None = None,
    reason: str = "cancelled",
    actor: str | None = None,
    dry_run: bool = False,
) -> Call:
    """Cancel by filter: `task_cancel_where`, whose row `cancel_counts` reads."""
    params = {
        "task_type": task_type,
        "tenant_id": tenant_id,
        "idempotency_key": idempotency_key,
        "due_from": due_from,
        "due_until": due_until,
        "reason": reason,
        "actor": actor,
        "dry_run": dry_run,
    }
    return Call("task_cancel_where", params)


def cancel_counts(row: Mapping[str, Any] | None) -> CancelCounts:
    if row is None:
        raise RuntimeError("statement 'task_cancel_where' returned no row")
    return CancelCounts(int(row["cancelled"]), int(row["cancel_requested"]))


def dead_retry_call(
    task_id: int | None = None, *, task_type: str | None = None, all_tasks: bool = False
) -> Call:
    """Bring DEAD tasks back: `dead_retry`, one row (task_id) per task brought back."""
    return Call("dead_retry", {"task_id": task_id, "task_type": task_type, "all_tasks": all_tasks})


def dead_discard_call(task_id: int, reason: str = "discarded from the DEAD lane") -> Call:
    return Call("dead_discard", {"task_id": task_id, "reason": reason})


# -- workflows, batches and results (sql/code/workflows.sql) --------------------------------


class WorkflowParams(Protocol):
    """What `workflow_call` needs of a workflow (pgsched.workflows.WorkflowSteps)."""

    def params(self) -> dict[str, Any]: ...


def workflow_call(workflow: WorkflowParams) -> Call:
    """A workflow's steps in one call: `task_schedule_workflow`, one row (step, task_id,
    created) per step, read by `pgsched.workflows.workflow_tasks`."""
    return Call("task_schedule_workflow", workflow.params())


def batch_call(
    tasks: Iterable[TaskSpec | Mapping[str, Any]],
    on_complete: TaskSpec | Mapping[str, Any],
    tenant_id: str = "default",
) -> Call:
    """Members and a callback: `task_schedule_batch`, whose row `batch_result` reads. The
    members are checked as `schedule_many` checks them; all are of `tenant_id`."""
    members = task_specs(tasks)
    callback = task_spec(on_complete)
    if not members:
        raise InvalidTaskError("a batch needs at least one member")
    for index, spec in enumerate(members):
        if spec.tenant_id != tenant_id:
            raise InvalidTaskError(
                f"tasks[{index}]: tenant_id {spec.tenant_id!r}: a batch belongs to one tenant "
                f"({tenant_id!r})"
            )
    params = {
        "task_types": [s.task_type for s in members],
        "payloads": [Jsonb(s.payload) for s in members],
        "on_complete_type": callback.task_type,
        "on_complete_payload": Jsonb(callback.payload),
        "tenant_id": tenant_id,
        "priorities": [s.priority for s in members],
        "max_attempts": [s.max_attempts for s in members],
        "lanes": [s.lane for s in members],
        "metadatas": [Jsonb(s.metadata) for s in members],
        "on_complete_priority": callback.priority,
        "on_complete_max_attempts": callback.max_attempts,
        "on_complete_lane": callback.lane,
    }
    return Call("task_schedule_batch", params)


def batch_result(row: Mapping[str, Any] | None) -> Batch:
    if row is None:
        raise RuntimeError("statement 'task_schedule_batch' returned no row")
    return Batch(row["callback_id"], list(row["member_ids"]))


def result_timeout(timeout: float | None) -> float | None:
    """`result`'s timeout, checked: None (wait for ever) or 0 or more seconds."""
    if timeout is not None and not timeout >= 0:
        raise InvalidTaskError(f"timeout must be 0 or more seconds, got {timeout}")
    return timeout


class NotFinished:
    """`finished_result` of a task that has not finished: its status, to name in a timeout."""

    def __init__(self, status: str) -> None:
        self.status = status


def finished_result(task_id: int, row: Mapping[str, Any] | None) -> Any:
    """What a `task_outcome` row means for a caller of `result`: the handler's return value
    once COMPLETED, TaskFailedError once DEAD or CANCELLED, else a NotFinished."""
    if row is None:
        raise RuntimeError("statement 'task_outcome' returned no row")
    if row["status"] == "COMPLETED":
        return row["result"]
    if row["status"] in ("FAILED", "CANCELLED"):
        raise TaskFailedError(task_id, row["status"], row["reason"])
    return NotFinished(row["status"])


def result_timed_out(
    task_id: int, timeout: float | None, waiting: NotFinished
) -> ResultTimeoutError:
    return ResultTimeoutError(
        f"task {task_id} did not finish within {timeout}s (it is {waiting.status})"
    )
