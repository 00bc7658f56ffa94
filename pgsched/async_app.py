"""`AsyncApp`: the producer API of `App` for asyncio code, on psycopg's async pool.

    app = AsyncApp("postgresql://localhost/mydb")
    task = await app.schedule("send_email", {"to": "a@b.c"}, tenant_id="acme")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO orders ...")
            await app.schedule("send_receipt", {"order": 7}, conn=conn)  # same transaction

Each call is the same as App's (the same checks, named statement and arguments, from
`pgsched.producer`), awaited. With `conn=` (a caller's `psycopg.AsyncConnection`) the task
is written inside the caller's transaction; without, a pooled connection runs it and it is
committed at once. `depends_on`, `workflow`, `batch` and `result` (which waits for a
task's return value on LISTEN) are App's too.

The pool opens on first use, so building an AsyncApp starts nothing (a web framework's
start-up hook need not know about it); `await app.close()` (or `async with AsyncApp(...)`)
closes it. A pool belongs to one event loop: a call from another loop (a test runner that
starts a loop per test) gets a pool of its own.

Handlers are registered on an `App`, which workers run; `AsyncApp.for_app(app)` schedules
into the same database. The Redis hot tier's post-commit push is App's alone: tasks an
AsyncApp schedules reach the Redis mirror on the sweep leader's next mirror pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Unpack

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgsched import producer, tracing
from pgsched.dsn import resolve_dsn
from pgsched.errors import ConfigError, translate
from pgsched.pooler import DEFAULT_PREPARE_THRESHOLD, parse_prepare_threshold
from pgsched.pools import PromptAsyncPool
from pgsched.producer import CancelWhereOptions, RecurringOptions, ScheduleOptions
from pgsched.queries import column_index, query
from pgsched.tasks import Batch, CancelCounts, CancelResult, ScheduledTask, TaskSpec
from pgsched.workflows import AsyncWorkflow, WorkflowSteps

AsyncConn = psycopg.AsyncConnection[Any]


class AsyncApp:
    """Holds the DSN and, once used, a connection pool; cheap to create."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        self._dsn = dsn
        self.prepare_threshold = parse_prepare_threshold(prepare_threshold, "prepare_threshold")
        if min_size < 0 or max_size < max(min_size, 1):
            raise ConfigError(
                f"pool sizes: need 0 <= min_size <= max_size and max_size >= 1, "
                f"got min_size={min_size}, max_size={max_size}"
            )
        self._min_size = min_size
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None

    @classmethod
    def for_app(cls, app: Any, **options: Any) -> AsyncApp:
        """An AsyncApp scheduling into `app`'s database (an App whose handlers run them)."""
        return cls(app.dsn, prepare_threshold=app.prepare_threshold, **options)

    @property
    def dsn(self) -> str:
        """Resolved lazily, as App's."""
        if self._dsn is None:
            self._dsn = resolve_dsn(None)
        return self._dsn

    async def __aenter__(self) -> AsyncApp:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the pool (a later call opens a new one)."""
        pool, loop = self._pool, self._pool_loop
        self._pool, self._pool_loop = None, None
        # A pool of another event loop cannot be closed from this one (its loop may be
        # closed already); its connections go with it.
        if pool is not None and loop is asyncio.get_running_loop():
            await pool.close()

    async def _the_pool(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._pool_loop is loop:
            return self._pool
        if self._opening is None or self._pool_loop is not loop:
            # A lock of this loop: one of another (closed) loop cannot be awaited here.
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None or self._pool_loop is not loop:
                # A pool of another loop is left behind: its loop is gone or not ours.
                pool = PromptAsyncPool(
                    self.dsn,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    kwargs={"autocommit": True, "prepare_threshold": self.prepare_threshold},
                    open=False,
                )
                await pool.open()
                self._pool, self._pool_loop = pool, loop
            return self._pool

    @asynccontextmanager
    async def _connection(self, conn: AsyncConn | None) -> AsyncIterator[AsyncConn]:
        if conn is not None:
            yield conn
            return
        pool = await self._the_pool()
        async with pool.connection() as own:
            yield own

    async def _one(self, call: producer.Call, conn: AsyncConn | None) -> dict[str, Any] | None:
        async with self._connection(conn) as c:
            try:
                async with c.cursor(row_factory=dict_row) as cur:
                    await cur.execute(query(call.name), call.params, binary=call.binary)
                    return await cur.fetchone()
            except psycopg.Error as exc:
                raise translate(exc) from exc

    async def schedule(
        self,
        task_type: str,
        payload: Any = None,
        *,
        conn: AsyncConn | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> ScheduledTask:
        """App.schedule, awaited; `conn` is a caller's AsyncConnection."""
        with tracing.scheduling(task_type, options) as traced:
            call = producer.schedule_call(task_type, payload, **options)
            scheduled = producer.scheduled_task(await self._one(call, conn))
            tracing.scheduled(traced, scheduled)
        return scheduled

    async def schedule_many(
        self,
        tasks: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        conn: AsyncConn | None = None,
        chunk_size: int = producer.SCHEDULE_CHUNK,
    ) -> list[ScheduledTask]:
        """App.schedule_many, awaited: in chunks, in one transaction (a savepoint of the
        caller's, on `conn`); one invalid task refuses the whole call."""
        specs = producer.task_specs(tasks)
        ids: list[ScheduledTask] = []
        with tracing.scheduling_many(specs) as traced:
            specs = tracing.traced_specs(traced, specs)
            await self._schedule_chunks(specs, chunk_size, conn, ids)
        return ids

    async def _schedule_chunks(
        self,
        specs: list[TaskSpec],
        chunk_size: int,
        conn: AsyncConn | None,
        ids: list[ScheduledTask],
    ) -> None:
        start = 0
        async with self._connection(conn) as c:
            try:
                async with c.transaction():
                    for start in range(0, len(specs), chunk_size):
                        call = producer.schedule_chunk_call(specs[start : start + chunk_size])
                        cur = await c.execute(query(call.name), call.params, binary=call.binary)
                        task_id = column_index(cur, "task_id")
                        created = column_index(cur, "created")
                        rows = await cur.fetchall()
                        ids.extend(ScheduledTask(row[task_id], row[created]) for row in rows)
            except psycopg.Error as exc:
                chunk = len(specs[start : start + chunk_size])
                raise producer.callers_row(translate(exc), start, chunk) from exc

    async def schedule_recurring(
        self,
        task_type: str,
        cron_expression: str,
        *,
        conn: AsyncConn | None = None,
        **options: Unpack[RecurringOptions],
    ) -> int:
        """App.schedule_recurring, awaited; the first fire time by the database's clock."""
        recurring = producer.recurring_call(task_type, cron_expression, **options)
        async with self._connection(conn) as c:
            try:
                cur = await c.execute(query("database_now"))
                now = await cur.fetchone()
                assert now is not None
                row = await self._one(recurring.at(now[0]), c)
            except psycopg.Error as exc:
                raise translate(exc) from exc
        if row is None:
            raise RuntimeError("statement 'schedule_recurring' returned no row")
        return int(row["schedule_id"])

    def workflow(self, key: str | None = None, *, tenant_id: str = "default") -> AsyncWorkflow:
        """App.workflow, awaited: build with `.step(name, task_type, payload, after=[...])`,
        write with `await wf.schedule()` (`conn=`: a caller's AsyncConnection), every step
        in one transaction. Under `key`, scheduling it again returns the same ids, created
        False. One tenant for the whole workflow."""
        return AsyncWorkflow(key, tenant_id, _run=self._schedule_workflow)

    async def _schedule_workflow(
        self, workflow: WorkflowSteps, conn: AsyncConn | None
    ) -> list[dict[str, Any]]:
        call = producer.workflow_call(workflow)
        async with self._connection(conn) as c:
            try:
                async with c.cursor(row_factory=dict_row) as cur:
                    await cur.execute(query(call.name), call.params)
                    return await cur.fetchall()
            except psycopg.Error as exc:
                raise translate(exc) from exc

    async def batch(
        self,
        tasks: Iterable[TaskSpec | Mapping[str, Any]],
        *,
        on_complete: TaskSpec | Mapping[str, Any],
        tenant_id: str = "default",
        conn: AsyncConn | None = None,
    ) -> Batch:
        """App.batch, awaited: members and a callback that runs once every member has
        finished (COMPLETED, DEAD or CANCELLED). One tenant for the whole batch."""
        call = producer.batch_call(tasks, on_complete, tenant_id)
        return producer.batch_result(await self._one(call, conn))

    async def result(self, task_id: int, *, timeout: float | None = None) -> Any:
        """App.result, awaited: wait for the task to finish and return its handler's return
        value. Raises TaskFailedError (DEAD or CANCELLED), ResultTimeoutError, or
        TaskNotFoundError. Waits on LISTEN pgsched_result on a connection of its own (not
        the pool's: a LISTEN must not outlive the call on a pooled session); nothing polls."""
        timeout = producer.result_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        token = uuid.uuid4()
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as c:
            await c.execute(query("task_result_listen"))
            try:
                while True:
                    async with c.cursor(row_factory=dict_row) as cur:
                        try:
                            await cur.execute(
                                query("task_outcome"), {"task_id": task_id, "wait_token": token}
                            )
                        except psycopg.Error as exc:
                            raise translate(exc) from exc
                        row = await cur.fetchone()
                    outcome = producer.finished_result(task_id, row)
                    if not isinstance(outcome, producer.NotFinished):
                        return outcome
                    left = None if deadline is None else deadline - loop.time()
                    if left is not None and left <= 0:
                        raise producer.result_timed_out(task_id, timeout, outcome)
                    await self._await_finish(c, task_id, left)
            finally:
                with contextlib.suppress(psycopg.Error):
                    await c.execute(query("task_result_unwait"), {"wait_token": token})

    @staticmethod
    async def _await_finish(c: AsyncConn, task_id: int, left: float | None) -> None:
        """Until a notification names the task, or `left` seconds pass."""
        wanted = str(task_id)
        loop = asyncio.get_running_loop()
        deadline = None if left is None else loop.time() + left
        while True:
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            notes = [n async for n in c.notifies(timeout=wait, stop_after=1)]
            if not notes or any(n.payload == wanted for n in notes):
                return

    async def cancel(
        self,
        task_id: int,
        reason: str = "cancelled",
        *,
        actor: str | None = None,
        conn: AsyncConn | None = None,
    ) -> CancelResult:
        """App.cancel, awaited."""
        row = await self._one(producer.cancel_call(task_id, reason, actor), conn)
        return producer.cancel_result(task_id, row)

    async def cancel_where(
        self, *, conn: AsyncConn | None = None, **filters: Unpack[CancelWhereOptions]
    ) -> CancelCounts:
        """App.cancel_where, awaited."""
        return producer.cancel_counts(await self._one(producer.cancel_where_call(**filters), conn))

    async def dead_retry(
        self,
        task_id: int | None = None,
        *,
        task_type: str | None = None,
        all_tasks: bool = False,
        conn: AsyncConn | None = None,
    ) -> list[int]:
        """App.dead_retry, awaited: DEAD tasks back (their attempts start over)."""
        call = producer.dead_retry_call(task_id, task_type=task_type, all_tasks=all_tasks)
        async with self._connection(conn) as c:
            try:
                cur = await c.execute(query(call.name), call.params)
                return [int(row[0]) for row in await cur.fetchall()]
            except psycopg.Error as exc:
                raise translate(exc) from exc

    async def dead_discard(
        self,
        task_id: int,
        reason: str = "discarded from the DEAD lane",
        *,
        conn: AsyncConn | None = None,
    ) -> int:
        """App.dead_discard, awaited."""
        await self._one(producer.dead_discard_call(task_id, reason), conn)
        return task_id
