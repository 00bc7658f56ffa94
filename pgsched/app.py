"""`App`: the Python entry point for scheduling (and, with handlers, for running) tasks.

    app = App("postgresql://localhost/mydb")
    task_id = app.schedule("send_email", {"to": "a@b.c"}, run_at=tomorrow, tenant_id="acme")

Every call may take the caller's own psycopg connection (`conn=`): the task is then written
inside the caller's transaction, so it exists if and only if the caller's work commits.
Without one, pgsched opens a connection and commits at once.

With the Redis hot tier (`App(dsn, redis="redis://host:6379/0")`), tasks due soon are pushed
to its mirror right after their commit (best effort: see pgsched.hot_tier.feed). A task
written inside the caller's open transaction is left to the sweep leader's next mirror
pass, since pgsched does not see that commit.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgsched import producer, tracing
from pgsched.dsn import resolve_dsn
from pgsched.errors import (
    InvalidLimitError,
    translate,
)
from pgsched.handlers import (
    DEFAULT_MAX_SNOOZES,
    HandlerRegistry,
    Registration,
    TaskContext,
    TaskHandler,
)
from pgsched.hot_tier.config import HotTierConfig
from pgsched.lanes import WORK_LANES
from pgsched.pooler import DEFAULT_PREPARE_THRESHOLD, parse_prepare_threshold
from pgsched.producer import CancelWhereOptions, RecurringOptions, ScheduleOptions
from pgsched.queries import column_index, query
from pgsched.retry import RetryDecision, RetryPolicy
from pgsched.tasks import Batch, CancelCounts, CancelResult, ScheduledTask, TaskSpec
from pgsched.workflows import Workflow, WorkflowSteps

if TYPE_CHECKING:
    from pgsched.hot_tier.feed import ScheduleFeed


def _value(conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any], column: str) -> Any:
    """Run the named statement and return `column` of its one row."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query(name), params).fetchone()
    if row is None:
        raise RuntimeError(f"statement {name!r} returned no row")
    return row[column]


class App:
    """Holds the DSN and the handler registry; cheap to create."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        redis: str | HotTierConfig | None = None,
    ) -> None:
        self._dsn = dsn
        # None behind a transaction pooler, which cannot keep a prepared statement (see
        # pgsched.pooler); checked here so a wrong value fails at once, not at a call.
        self.prepare_threshold = parse_prepare_threshold(prepare_threshold, "prepare_threshold")
        self.registry = HandlerRegistry()
        # Checked here too (a ConfigError); nothing connects to Redis until a push.
        self._feed: ScheduleFeed | None = None
        if redis is not None:
            from pgsched.hot_tier.worker_side import schedule_feed

            self._feed = schedule_feed(HotTierConfig(redis) if isinstance(redis, str) else redis)

    def handler(
        self,
        task_type: str,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        transactional: bool = False,
        isolation: str | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        retry_delays: Sequence[float | timedelta] | RetryDecision | None = None,
    ) -> Callable[[Any], Any]:
        """Register a function (sync or async) or a TaskHandler class for a task type.

        `isolation` says where plain (`def`) steps run: "process" (a handler process of the
        lane, killed when the attempt must end: the default with a timeout) or "thread"
        (the lane's thread pool: the default without one). `max_snoozes` caps how often a
        task of this type may snooze (`ctx.snooze`); the next snooze is a failed attempt.
        `retry_delays` replaces the `retry` policy: the waits after failed attempts 1, 2, ...
        (seconds or timedeltas; the last repeats), or a function `(attempt, error) -> delay
        | None` (None: give up, the task goes to the DEAD lane). A task scheduled with its
        own `retry_delays` follows those."""

        def register(target: Any) -> Any:
            handler = target() if isinstance(target, type) else target
            self.register(
                task_type,
                handler,
                retry=retry,
                timeout=timeout,
                transactional=transactional,
                isolation=isolation,
                max_snoozes=max_snoozes,
                retry_delays=retry_delays,
            )
            return target

        return register

    def register(
        self,
        task_type: str,
        handler: TaskHandler | Callable[[TaskContext], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        transactional: bool = False,
        isolation: str | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        retry_delays: Sequence[float | timedelta] | RetryDecision | None = None,
    ) -> Registration:
        return self.registry.register(
            task_type,
            handler,
            retry=retry,
            timeout=timeout,
            transactional=transactional,
            isolation=isolation,
            max_snoozes=max_snoozes,
            retry_delays=retry_delays,
        )

    def run_worker(self, config: Any = None) -> None:
        """Run a worker in this process until SIGTERM / SIGINT (see pgsched.worker)."""
        import asyncio

        from pgsched.worker import Worker, WorkerConfig

        asyncio.run(Worker(self.dsn, self.registry, config or WorkerConfig()).run())

    @property
    def dsn(self) -> str:
        """Resolved lazily, so building an App never starts a database by itself."""
        if self._dsn is None:
            self._dsn = resolve_dsn(None)
        return self._dsn

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, prepare_threshold=self.prepare_threshold)

    @contextmanager
    def _connection(
        self, conn: psycopg.Connection[Any] | None
    ) -> Iterator[psycopg.Connection[Any]]:
        if conn is not None:
            yield conn
            return
        with self._connect() as own:
            yield own

    def _after_commit(
        self, c: psycopg.Connection[Any], own: bool, scheduled: list[ScheduledTask]
    ) -> None:
        """The scheduling path's post-commit hook: with Redis configured, the new tasks
        due soon go to the hot tier's mirror at once (best effort, never raises). On the
        caller's connection only if nothing is left uncommitted (autocommit, or its own
        transaction block ended); otherwise the leader's next mirror pass adds them."""
        if self._feed is None:
            return
        if own:
            c.commit()
        if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        self._feed.after_commit(c, [int(s) for s in scheduled if s.created])

    def schedule(
        self,
        task_type: str,
        payload: Any = None,
        *,
        conn: psycopg.Connection[Any] | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> ScheduledTask:
        """Schedule one task; returns its id, with `.created` False when the tenant's
        idempotency key already named a task (that task's id; nothing changed).

        Options (pgsched.producer.ScheduleOptions): run_at, tenant_id, priority,
        idempotency_key, max_attempts, lane, metadata, scope, product, unique_for, debounce,
        traceparent, retry_delays, depends_on, on_parent_failure, complete_by,
        deadline_callback. scope="product" (with product=...) or scope="global" runs
        it once for every active tenant of that product, or of all products, each tenant
        with its own outcome.

        With `idempotency_key`, `unique_for` (seconds or a timedelta) makes the key name its
        task only for that long: a call inside the window gets that task (`.created`
        False), a call after it a new one. `debounce` makes a burst of calls one task, due
        `debounce` after the last call, with the last call's payload (`.created` False for
        each call that replaced the waiting task's payload). `traceparent` is the W3C trace
        context of the request scheduling the task; `retry_delays` the waits after failed
        attempts 1, 2, ... (the last repeats), instead of the handler's. `complete_by` (an
        aware datetime) is the task's deadline: not COMPLETED by then, the sweeper records
        a miss and schedules `deadline_callback` (a task type), if given."""
        with tracing.scheduling(task_type, options) as traced:
            call = producer.schedule_call(task_type, payload, **options)
            with self._connection(conn) as c:
                try:
                    with c.cursor(row_factory=dict_row) as cur:
                        row = cur.execute(query(call.name), call.params).fetchone()
                except psycopg.Error as exc:
                    raise translate(exc) from exc
                scheduled = producer.scheduled_task(row)
                self._after_commit(c, conn is None, [scheduled])
            tracing.scheduled(traced, scheduled)
        return scheduled

    def schedule_many(
        self,
        tasks: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        conn: psycopg.Connection[Any] | None = None,
        chunk_size: int = producer.SCHEDULE_CHUNK,
    ) -> list[ScheduledTask]:
        """Schedule many tasks through the bulk SQL path, in chunks, in one transaction.

        Returns the task ids in input order, each with `.created` (False: an idempotent
        duplicate). One invalid task refuses the whole call.
        """
        specs = producer.task_specs(tasks)
        ids: list[ScheduledTask] = []
        start = 0
        with tracing.scheduling_many(specs) as traced:
            specs = tracing.traced_specs(traced, specs)
            with self._connection(conn) as c:
                try:
                    with c.transaction():
                        for start in range(0, len(specs), chunk_size):
                            chunk = specs[start : start + chunk_size]
                            ids.extend(self._schedule_chunk(c, chunk))
                except psycopg.Error as exc:
                    count = len(specs[start : start + chunk_size])
                    raise producer.callers_row(translate(exc), start, count) from exc
                self._after_commit(c, conn is None, ids)
        return ids

    @staticmethod
    def _schedule_chunk(
        conn: psycopg.Connection[Any], specs: list[TaskSpec]
    ) -> list[ScheduledTask]:
        call = producer.schedule_chunk_call(specs)
        cur = conn.execute(query(call.name), call.params, binary=call.binary)
        # By name, but without an object per row: a chunk is 20,000 rows on the bulk path.
        task_id = column_index(cur, "task_id")
        created = column_index(cur, "created")
        return [ScheduledTask(row[task_id], row[created]) for row in cur.fetchall()]

    def schedule_recurring(
        self,
        task_type: str,
        cron_expression: str,
        *,
        conn: psycopg.Connection[Any] | None = None,
        **options: Unpack[RecurringOptions],
    ) -> int:
        """Create a recurring schedule; its first occurrence is armed at once. Returns the
        schedule id (the existing one for a repeated key).

        Options (pgsched.producer.RecurringOptions): timezone, payload, tenant_id,
        priority, idempotency_key, misfire_policy, catch_up_limit, max_attempts, lane,
        metadata, scope, product, complete_within, deadline_callback. `complete_within`
        (seconds or a timedelta) gives each occurrence the deadline fire time + that ("the
        09:00 report done by 09:30": 1800); a miss schedules `deadline_callback`."""
        from pgsched.recurring import database_now

        recurring = producer.recurring_call(task_type, cron_expression, **options)
        with self._connection(conn) as c:
            try:
                call = recurring.at(database_now(c))
                return int(_value(c, call.name, call.params, "schedule_id"))
            except psycopg.Error as exc:
                raise translate(exc) from exc

    def history(self, **filters: Any) -> list[dict[str, Any]]:
        """Runs, newest first. Filters: task_type, tenant_id, task_id, since, until,
        outcome (COMPLETED, FAILED, QUEUED, PENDING, RUNNING), max_rows (default 100)."""
        params = {
            "task_type": None,
            "tenant_id": None,
            "task_id": None,
            "since": None,
            "until": None,
            "outcome": None,
            "max_rows": 100,
        }
        unknown = set(filters) - set(params)
        if unknown:
            raise TypeError(f"unknown history filters: {sorted(unknown)}")
        params.update(filters)
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            return cur.execute(query("history"), params).fetchall()

    def workflow(self, key: str | None = None, *, tenant_id: str = "default") -> Workflow:
        """A workflow to build with `.step(name, task_type, payload, after=[...])` and write
        with `.schedule()`: every step in one transaction, each waiting for the steps it
        names (`pgsched.schedule_workflow`). Under `key`, scheduling it again returns the
        same ids, created False. One tenant for the whole workflow."""
        return Workflow(key, tenant_id, _run=self._schedule_workflow)

    def _schedule_workflow(
        self, workflow: WorkflowSteps, conn: psycopg.Connection[Any] | None
    ) -> list[dict[str, Any]]:
        call = producer.workflow_call(workflow)
        with self._connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            try:
                return cur.execute(query(call.name), call.params).fetchall()
            except psycopg.Error as exc:
                raise translate(exc) from exc

    def batch(
        self,
        tasks: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        on_complete: TaskSpec | Mapping[str, Any],
        tenant_id: str = "default",
        conn: psycopg.Connection[Any] | None = None,
    ) -> Batch:
        """Schedule members and a callback (`on_complete`, a task spec) that runs exactly
        once when every member has finished, COMPLETED, DEAD or CANCELLED; in it,
        `ctx.batch` counts them and lists their ids. Its wait is a counter: a batch of a
        million members costs no scan. One tenant (`tenant_id`) for the whole batch."""
        call = producer.batch_call(tasks, on_complete, tenant_id)
        with self._connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            try:
                row = cur.execute(query(call.name), call.params).fetchone()
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return producer.batch_result(row)

    def result(self, task_id: int, *, timeout: float | None = None) -> Any:
        """Wait for the task to finish and return its handler's return value (None when it
        returned nothing). Raises TaskFailedError when it ends DEAD or CANCELLED (naming
        which, and why), ResultTimeoutError when `timeout` seconds pass first,
        TaskNotFoundError for an unknown id. Waits on LISTEN pgsched_result: the task
        finishing wakes it, nothing polls."""
        timeout = producer.result_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        token = uuid.uuid4()
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(query("task_result_listen"))
            try:
                while True:
                    with c.cursor(row_factory=dict_row) as cur:
                        try:
                            row = cur.execute(
                                query("task_outcome"), {"task_id": task_id, "wait_token": token}
                            ).fetchone()
                        except psycopg.Error as exc:
                            raise translate(exc) from exc
                    outcome = producer.finished_result(task_id, row)
                    if not isinstance(outcome, producer.NotFinished):
                        return outcome
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise producer.result_timed_out(task_id, timeout, outcome)
                    self._await_finish(c, task_id, left)
            finally:
                with contextlib.suppress(psycopg.Error):
                    c.execute(query("task_result_unwait"), {"wait_token": token})

    @staticmethod
    def _await_finish(c: psycopg.Connection[Any], task_id: int, left: float | None) -> None:
        """Until a notification names the task, or `left` seconds pass."""
        wanted = str(task_id)
        deadline = None if left is None else time.monotonic() + left
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            notes = list(c.notifies(timeout=wait, stop_after=1))
            if not notes or any(n.payload == wanted for n in notes):
                return

    def cancel(
        self,
        task_id: int,
        reason: str = "cancelled",
        *,
        actor: str | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> CancelResult:
        """Cancel a task: one not started is CANCELLED at once; a running one is stopped
        by its worker (see CancelResult). A finished one raises TaskStateError, an unknown
        id TaskNotFoundError. `actor` is recorded with the database role."""
        call = producer.cancel_call(task_id, reason, actor)
        with self._connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            try:
                row = cur.execute(query(call.name), call.params).fetchone()
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return producer.cancel_result(task_id, row)

    def cancel_where(
        self,
        *,
        conn: psycopg.Connection[Any] | None = None,
        **filters: Unpack[CancelWhereOptions],
    ) -> CancelCounts:
        """Cancel every unfinished task matching the filters (at least one of task_type,
        tenant_id, idempotency_key, due_from, due_until; the due time in [due_from,
        due_until)); `reason`, `actor`. `dry_run` only counts them."""
        call = producer.cancel_where_call(**filters)
        with self._connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            try:
                row = cur.execute(query(call.name), call.params).fetchone()
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return producer.cancel_counts(row)

    def lane_summary(self) -> list[dict[str, Any]]:
        """Per lane: cold, queued, due now, processing, dead, oldest lateness (seconds)."""
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            return cur.execute(query("lane_summary")).fetchall()

    def dead_list(self, max_rows: int = 100) -> list[dict[str, Any]]:
        """The DEAD lane, newest failure first."""
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            return cur.execute(query("dead_list"), {"max_rows": max_rows}).fetchall()

    def dead_retry(
        self, task_id: int | None = None, *, task_type: str | None = None, all_tasks: bool = False
    ) -> list[int]:
        """Bring DEAD tasks back (their attempts start over); returns their ids."""
        call = producer.dead_retry_call(task_id, task_type=task_type, all_tasks=all_tasks)
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            try:
                return [int(r["task_id"]) for r in cur.execute(query(call.name), call.params)]
            except psycopg.Error as exc:
                raise translate(exc) from exc

    def dead_discard(self, task_id: int, reason: str = "discarded from the DEAD lane") -> int:
        """Give up on a DEAD task for good (CANCELLED, with the reason recorded)."""
        call = producer.dead_discard_call(task_id, reason)
        with self._connect() as c:
            try:
                c.execute(query(call.name), call.params)
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return task_id

    def tenant_add(
        self, tenant_id: str, product: str, metadata: Mapping[str, Any] | None = None
    ) -> str:
        """Register (or update and re-activate) a tenant of a product."""
        with self._connect() as c:
            try:
                c.execute(
                    query("tenant_add"),
                    {
                        "tenant_id": tenant_id,
                        "product": product,
                        "metadata": Jsonb(dict(metadata or {})),
                    },
                )
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return tenant_id

    def tenant_set_active(self, tenant_id: str, active: bool) -> str:
        with self._connect() as c:
            try:
                c.execute(query("tenant_set_active"), {"tenant_id": tenant_id, "active": active})
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return tenant_id

    def tenants(self) -> list[dict[str, Any]]:
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            return cur.execute(query("tenant_list")).fetchall()

    # -- limits and fairness (sql/code/limits_fairness.sql) --------------------------------

    def _limits_call(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._connect() as c, c.cursor(row_factory=dict_row) as cur:
            try:
                return cur.execute(query(name), params).fetchall()
            except psycopg.errors.InvalidParameterValue as exc:
                raise InvalidLimitError(exc.diag.message_primary or str(exc)) from exc
            except psycopg.Error as exc:
                raise translate(exc) from exc

    def limit_set(
        self,
        scope: str,
        key: str,
        *,
        max_processing: int | None = None,
        rate: int | None = None,
        per: str = "second",
    ) -> dict[str, Any]:
        """Limit a task type (`scope="task_type"`) or a tenant (`scope="tenant"`) across
        every worker: at most `max_processing` PROCESSING at once and/or at most `rate`
        claims per `per` ("second" or "minute"). Replaces that key's limits; applies to
        the next claim of every worker. Raises InvalidLimitError (nothing written)."""
        params = {
            "scope": scope,
            "key": key,
            "max_processing": max_processing,
            "rate": rate,
            "per": per,
        }
        return self._limits_call("limit_set", params)[0]

    def limit_clear(self, scope: str, key: str) -> bool:
        """Remove the limits of a task type or tenant; False if it had none."""
        rows = self._limits_call("limit_clear", {"scope": scope, "key": key})
        return bool(rows[0]["cleared"])

    def limits(self) -> list[dict[str, Any]]:
        """Every limit, with how many tasks are PROCESSING under it now."""
        return self._limits_call("limit_list", {})

    def lane_set_fairness(self, lane: str, fair: bool) -> None:
        """Turn fair claims across tenants on (the default) or off for one lane."""
        name = lane.strip().upper()
        if name not in WORK_LANES:
            known = ", ".join(WORK_LANES)
            raise InvalidLimitError(f"lane must be one of {known}, got {lane!r}")
        self._limits_call("lane_set_fairness", {"lane": name, "fair": fair})

    def lane_fairness(self) -> dict[str, bool]:
        """Each lane: whether its claims are fair across tenants."""
        return {row["lane"]: row["fair"] for row in self._limits_call("lane_fairness", {})}
