"""One task through its handler's lifecycle, ending in exactly one outcome.

    validate        raises -> FAILED (DEAD lane), no retries: the work can never succeed
    before_execute  raises -> a failed attempt (RETRY with backoff, DEAD when exhausted)
    execute         raises or times out -> a failed attempt
    after_execute   runs only after execute succeeded; if it raises, the task still
                    completes (the work is done) and the error is kept on the record

A handler registered with `transactional=True` gets `ctx.connection`, a pooled connection
in an open transaction; the task's completion is written in that same transaction, so the
handler's writes and the completion commit together or not at all (a lost lease rolls both
back). Every other outcome goes to the batched buffer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from pgsched import tracing
from pgsched.handlers import CancelFlag, Registration, Snooze, TaskContext, call_step
from pgsched.observability.logs import (
    attempt_started,
    error_class,
    log_attempt_failed,
    task_fields,
)
from pgsched.queries import query
from pgsched.retry import RetryPolicy, RetrySchedule
from pgsched.tasks import TaskRow, describe_task
from pgsched.worker.handler_processes import (
    HandlerProcessDied,
    HandlerProcessPool,
    HandlerRaised,
    JsonText,
    ProcessRun,
)
from pgsched.worker.outcomes import Outcome, finish_params
from pgsched.worker.progress import ProgressWriter
from pgsched.worker.threads import RaisedInThread, running_task

log = logging.getLogger("pgsched.worker.runner")

MAX_ERROR_CHARS = 4000

# How long a plain transactional handler waits for a connection from a pool the server has
# never given one (no slot for it), rather than the pool's timeout.
NEVER_CONNECTED_WAIT_SECONDS = 2.0

# What a handler may raise and still only fail its attempt. Not CancelledError: that is the
# worker cancelling the task (shutdown). SystemExit, KeyboardInterrupt and GeneratorExit
# raised by handler code are faults of that code; only a signal delivered to the process
# stops the worker (its handlers are installed on the event loop and raise nothing).
HandlerFault = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)


def describe(exc: BaseException) -> str:
    """The error and a short traceback summary, for last_error and the event."""
    if isinstance(exc, HandlerRaised):
        return exc.description
    if isinstance(exc, HandlerProcessDied):
        # The worker's own frames say nothing about the handler: the death says it all.
        return f"HandlerProcessDied: {exc}"
    if isinstance(exc, RaisedInThread):
        exc = exc.original
    frames = traceback.format_tb(exc.__traceback__, limit=-3)
    return (f"{type(exc).__name__}: {exc}\n" + "".join(frames))[:MAX_ERROR_CHARS]


def result_json(value: Any) -> str | None:
    """A handler's return value as the JSON text stored with its task (None: nothing
    returned). A handler process sends it encoded already (`JsonText`)."""
    if value is None or isinstance(value, JsonText):
        return value
    return json.dumps(value, allow_nan=False)


def retry_outcome(
    task: TaskRow,
    rule: RetryPolicy | RetrySchedule,
    error: str,
    cls: str | None = None,
    shown: str | None = None,
    exc: BaseException | None = None,
) -> Outcome:
    """A failed attempt: retried after the task's own retry_delays, else its handler's
    schedule or policy; FAILED (the DEAD lane) when a handler's function gives up."""
    schedule = rule if isinstance(rule, RetrySchedule) else RetrySchedule(rule)
    cls = cls or error_class(error)
    try:
        delay = schedule.delay(
            task.attempt, exc if exc is not None else RuntimeError(error), task.retry_delays
        )
    except Exception as bad:
        # The handler's own function failed: the policy decides, and the log says why.
        log.error(
            "task %s: its handler's retry_delays function failed (%s); its retry policy "
            "decides instead",
            task.id,
            describe(bad).splitlines()[0],
            extra=task_fields(task, error_class=error_class(bad)),
        )
        delay = schedule.policy.delay(task.attempt)
    if delay is None:
        error = f"given up by the handler's retry_delays after attempt {task.attempt}: {error}"
        log_attempt_failed(task, "FAILED", error, cls, None, shown)
        return Outcome(task.id, task.lease_token, "FAILED", error)
    log_attempt_failed(task, "RETRY", error, cls, delay.total_seconds(), shown)
    return Outcome(task.id, task.lease_token, "RETRY", error, delay)


class NoConnectionYet(Exception):
    """The plain transactional handlers' pool has never had a connection (the server has
    had no slot for it): the task is given back, not failed, for a worker that can run it."""


class ConnectionSource:
    """Hands transactional handlers a pooled connection in an open transaction and takes
    it back. A connection that failed on the way (killed backend, idle timeout, network)
    is closed before it goes back, so the pool discards it and never hands it out again."""

    def __init__(self, async_pool: Any, sync_pool: Any | None) -> None:
        self._async_pool = async_pool
        # Made once at start by the worker, when a plain transactional handler exists.
        self._sync_pool = sync_pool
        # Connections on their way back from acquires whose task was cancelled.
        self._giving_back: set[asyncio.Future[Any]] = set()

    async def acquire(self, is_async: bool, tenant_id: str) -> Any:
        """A connection in an open transaction whose `pgsched.tenant_id` setting is the
        task's tenant, so row-level security on the user's tables applies."""
        params = {"tenant_id": tenant_id}
        if is_async:
            conn = await self._async_pool.getconn()
            try:
                # The pool's connections are autocommit; this one holds a transaction.
                await conn.set_autocommit(False)
                await conn.execute(query("transaction_tenant_set"), params)
            except BaseException:
                await conn.close()
                await self._async_pool.putconn(conn)
                raise
            return conn
        pool = self._sync_pool
        if pool is None:
            raise RuntimeError("no connection pool for plain transactional handlers")

        def acquire_sync() -> Any:
            # A pool the server has never given a connection (no slot for it since the
            # start): waiting out the pool's timeout would keep the task, and a worker slot,
            # from workers that can run it, and this worker's next claim could take it
            # again. Give up soon; the retry lets any worker take it.
            if pool.has_connected:
                conn = pool.getconn()
            else:
                try:
                    conn = pool.getconn(NEVER_CONNECTED_WAIT_SECONDS)
                except PoolTimeout as exc:
                    raise NoConnectionYet(str(exc)) from exc
            try:
                conn.execute(query("transaction_tenant_set"), params)
            except BaseException:
                conn.close()
                pool.putconn(conn)
                raise
            return conn

        acquiring = asyncio.ensure_future(asyncio.to_thread(acquire_sync))
        try:
            return await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            # The task is gone (lease lost, shutdown) but the thread waiting in the pool
            # cannot be stopped: whatever connection it still gets goes back.
            acquiring.add_done_callback(self._give_back)
            raise

    def _give_back(self, acquiring: asyncio.Future[Any]) -> None:
        if acquiring.cancelled() or acquiring.exception() is not None:
            return
        giving_back = asyncio.ensure_future(self.release(acquiring.result(), False, commit=False))
        self._giving_back.add(giving_back)
        giving_back.add_done_callback(self._giving_back.discard)

    def progress_writer(self) -> ProgressWriter:
        """A writer of ctx.progress reports on this pool (pgsched/worker/progress.py)."""
        return ProgressWriter(self._async_pool)

    async def run_one(self, name: str, params: dict[str, Any]) -> Any:
        """Run one named statement in its own short transaction; returns the first column."""
        async with self._async_pool.connection() as conn:
            cur = await conn.execute(query(name), params)
            row = await cur.fetchone()
        return row[0] if row else None

    async def release(self, conn: Any, is_async: bool, *, commit: bool) -> Exception | None:
        """Commit (or roll back) and give the connection back; returns the error when
        ending the transaction failed (the connection is then discarded)."""
        if is_async:
            failure: Exception | None = None
            try:
                await (conn.commit() if commit else conn.rollback())
                await conn.set_autocommit(True)
            except Exception as exc:
                failure = exc
                await conn.close()
            await self._async_pool.putconn(conn)
            return failure
        pool = self._sync_pool
        assert pool is not None  # acquire would have failed without it

        def finish() -> Exception | None:
            failure: Exception | None = None
            try:
                conn.commit() if commit else conn.rollback()
            except Exception as exc:
                failure = exc
                conn.close()
            pool.putconn(conn)
            return failure

        return await asyncio.to_thread(finish)


class TaskRunner:
    def __init__(
        self,
        worker_id: str,
        registration_for: Callable[[str], Registration | None],
        record: Callable[[Outcome], None],
        written: Callable[[int], None],
        connections: ConnectionSource,
        record_done: Callable[[int, Any], Awaitable[bool]],
        dsn: str | None = None,
        executor: Executor | None = None,
        released_for_slots: Callable[[], None] | None = None,
        processes: HandlerProcessPool | None = None,
    ) -> None:
        self._processes = processes
        self._executor = executor
        self._released_for_slots = released_for_slots
        self._record_done = record_done
        self._dsn = dsn
        self._worker_id = worker_id
        self._registration_for = registration_for
        self._record = tracing.recording(record)
        self._written = written
        self._connections = connections
        # ctx.progress reports, written in batches on this runner's loop (bound at the first
        # run); a runner without a pool of its own keeps them on the context only.
        self._writer = (
            connections.progress_writer() if isinstance(connections, ConnectionSource) else None
        )
        self._progress = None if self._writer is None else self._writer.report
        self._bound = self._writer is None

    async def run(self, task: TaskRow, cancel: CancelFlag | None = None) -> None:
        """Run `task` to exactly one outcome, whatever fails on the way. `cancel` is set
        when the task is asked to stop (pgsched/worker/cancels.py)."""
        with tracing.executing(task):
            await self._run_once(task, cancel)

    async def _run_once(self, task: TaskRow, cancel: CancelFlag | None) -> None:
        if not self._bound:
            assert self._writer is not None
            self._writer.bind(asyncio.get_running_loop())
            self._bound = True
        running_task.set(task)
        attempt_started.set(time.monotonic())
        cancel = cancel if cancel is not None else CancelFlag()
        cancel.started = True
        if cancel.is_set():
            # Asked to stop between its claim and this first step.
            log.warning(
                "%s: cancelled: %s",
                describe_task(task),
                cancel.ending,
                extra=task_fields(task, outcome="cancelled"),
            )
            self._record(Outcome(task.id, task.lease_token, "CANCELLED", cancel.ending))
            return
        try:
            await self._run(task, cancel)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # Stopped because it was asked to (and nothing else, a shutdown, wants it
            # stopped too): its outcome is CANCELLED. Any other cancellation goes on.
            if not cancel.is_set() or current is None or current.uncancel() > 0:
                raise
            log.warning(
                "%s: cancelled: %s",
                describe_task(task),
                cancel.ending,
                extra=task_fields(task, outcome="cancelled"),
            )
            self._record(Outcome(task.id, task.lease_token, "CANCELLED", cancel.ending))
        except Exception as exc:
            # A fault outside the handler's steps (the worker's own code, a connection):
            # the task still ends in an outcome. Should one have been recorded already,
            # this second report is refused by the lease's compare-and-set as stale.
            log.error(
                "task %s: worker fault: %r; retrying later",
                task.id,
                exc,
                exc_info=exc,
                extra=task_fields(task, error_class=error_class(exc)),
            )
            self._record(retry_outcome(task, RetryPolicy(), "worker fault: " + describe(exc)))

    async def _run(self, task: TaskRow, cancel: CancelFlag) -> None:
        if task.scope != "tenant":
            await self._fan_out(task)
            return
        if task.done_by is not None:
            # The ledger says this work is done: do not run it again, say why.
            self._record(
                Outcome(
                    task.id,
                    task.lease_token,
                    "COMPLETED",
                    f"no-op: the work for key {task.idempotency_key!r} was already completed "
                    f"by task {task.done_by}; execute not called",
                )
            )
            return
        registration = self._registration_for(task.task_type)
        if registration is None:
            # Retried, not dropped: a deploy that adds the handler will run it.
            error = f"no handler for task type {task.task_type!r} in worker {self._worker_id}"
            self._record(retry_outcome(task, RetryPolicy(), error, "no_handler"))
            return
        if registration.in_process and self._processes is not None:
            await self._run_in_process(registration, task, cancel)
            return
        if not registration.transactional:
            ctx = TaskContext(
                task, self._worker_id, dsn=self._dsn, cancel=cancel, progress=self._progress
            )
            self._record(await self._lifecycle(registration, ctx))
            return
        await self._run_transactional(registration, task, cancel)

    async def _run_in_process(
        self, registration: Registration, task: TaskRow, cancel: CancelFlag
    ) -> None:
        assert self._processes is not None
        try:
            child = await ProcessRun.start(
                self._processes,
                registration,
                task,
                self._worker_id,
                self._dsn,
                cancel,
                self._progress,
            )
        except Exception as exc:
            self._retry_for_want_of("handler process", task, registration, exc)
            return
        try:
            ctx = TaskContext(
                task, self._worker_id, dsn=self._dsn, cancel=cancel, progress=self._progress
            )
            outcome = await self._lifecycle(registration, ctx, child)
        finally:
            child.end()
        self._record(outcome)

    def _retry_for_want_of(
        self, what: str, task: TaskRow, registration: Registration, exc: Exception
    ) -> None:
        """The handler could not be given what it runs in: a failed attempt, retried."""
        log.warning(
            "task %s: no %s (%s); retrying",
            task.id,
            what,
            exc,
            extra=task_fields(task, error_class=error_class(exc)),
        )
        self._record(
            retry_outcome(
                task,
                registration.schedule or registration.retry,
                f"no {what}: " + describe(exc),
                exc=exc,
            )
        )

    async def _run_transactional(
        self, registration: Registration, task: TaskRow, cancel: CancelFlag
    ) -> None:
        try:
            conn = await self._connections.acquire(registration.is_async, task.tenant_id)
        except NoConnectionYet as exc:
            log.warning(
                "task %s: no connection for its transaction (%s); released for another worker "
                "(connection slots short)",
                task.id,
                exc,
                extra=task_fields(task, error_class="no_connection_slot"),
            )
            # Not run: the attempt is given back and the task is due at once for any worker.
            reason = "released: no connection for its transaction (connection slots short)"
            self._record(Outcome(task.id, task.lease_token, "RELEASED", reason))
            if self._released_for_slots is not None:
                self._released_for_slots()
            return
        except Exception as exc:
            self._retry_for_want_of(
                "connection for the handler's transaction", task, registration, exc
            )
            return
        committed = False
        try:
            ctx = TaskContext(
                task, self._worker_id, conn, dsn=self._dsn, cancel=cancel, progress=self._progress
            )
            outcome = await self._lifecycle(registration, ctx)
            if outcome.outcome == "COMPLETED":
                committed = await self._complete_in(conn, registration, task, outcome)
            else:
                self._record(outcome)
        finally:
            failure = await self._connections.release(conn, registration.is_async, commit=committed)
        if failure is not None and committed:
            # The work and its completion may or may not have committed: a retry's report
            # is refused as stale if they did; if not, the work runs again.
            log.warning(
                "task %s: commit failed (%s); retrying",
                task.id,
                failure,
                extra=task_fields(task, error_class=error_class(failure)),
            )
            self._record(
                retry_outcome(
                    task,
                    registration.schedule or registration.retry,
                    "commit failed: " + describe(failure),
                    exc=failure,
                )
            )
        elif committed:
            self._written(task.id)

    async def _fan_out(self, task: TaskRow) -> None:
        """A product/global task: one child task per active tenant, parent completed."""
        try:
            tenants = await self._connections.run_one(
                "task_fan_out", {"task_id": task.id, "lease_token": task.lease_token}
            )
        except psycopg.Error as exc:
            log.error(
                "task %s: fan-out failed: %s",
                task.id,
                exc,
                extra=task_fields(task, error_class=error_class(exc)),
            )
            self._record(retry_outcome(task, RetryPolicy(), describe(exc)))
            return
        if tenants is None:
            log.warning(
                "%s: lease lost before fan-out; not fanned out",
                describe_task(task),
                extra=task_fields(task, outcome="lease_lost"),
            )
            # Recorded as the stale report it is; once written, the lease is no longer held
            # (nor heartbeated).
            self._record(Outcome(task.id, task.lease_token, "RELEASED", "lease lost"))
            return
        log.info(
            "task %s fanned out to %s tenants",
            task.id,
            tenants,
            extra=task_fields(task, count=tenants),
        )
        self._written(task.id)

    async def _complete_in(
        self, conn: Any, registration: Registration, task: TaskRow, outcome: Outcome
    ) -> bool:
        """Write the completion in the handler's transaction; True when it should commit."""
        params = finish_params([outcome], task.tenant_id)
        try:
            if registration.is_async:
                rows = await (await conn.execute(query("task_finish_many"), params)).fetchall()
            else:
                rows = await asyncio.to_thread(
                    lambda: conn.execute(query("task_finish_many"), params).fetchall()
                )
        except psycopg.Error as exc:
            log.error(
                "task %s: completion failed, rolling back its work: %s",
                outcome.task_id,
                exc,
                extra=task_fields(task, error_class=error_class(exc)),
            )
            self._record(
                retry_outcome(
                    task, registration.schedule or registration.retry, describe(exc), exc=exc
                )
            )
            return False
        applied = bool(rows and rows[0][1])
        if not applied:
            # Lease lost: someone else owns the task now. Roll our writes back; the stale
            # report itself cannot be recorded in a transaction we are rolling back.
            log.warning(
                "task %s: lease lost before completion; work rolled back",
                outcome.task_id,
                extra=task_fields(task, outcome="lease_lost"),
            )
            self._record(Outcome(outcome.task_id, outcome.lease_token, "COMPLETED"))
        return applied

    async def _step(
        self,
        registration: Registration,
        name: str,
        ctx: TaskContext,
        child: ProcessRun | None,
    ) -> Any:
        step = registration.steps[name]
        assert step is not None
        if name in registration.async_steps:
            # On the event loop: a cancel stops it with CancelledError (in_thread stays
            # False, as it is between steps).
            return await step(ctx)
        # Where the step runs decides how a cancel stops it (pgsched/worker/cancels.py).
        ctx.cancel_flag.in_thread = True
        try:
            if child is not None:
                return await child.step(name)
            return await call_step(step, ctx, self._executor)
        finally:
            ctx.cancel_flag.in_thread = False

    async def _lifecycle(
        self, registration: Registration, ctx: TaskContext, child: ProcessRun | None = None
    ) -> Outcome:
        task = ctx.task
        steps = registration.steps
        if steps["validate"] is not None:
            try:
                await self._step(registration, "validate", ctx, child)
            except asyncio.CancelledError:
                raise
            except Snooze as snooze:
                return self._snoozed(registration, task, snooze)
            except HandlerFault as exc:
                if ctx.cancelled:
                    return self._stopped(ctx, exc)
                error = "validate refused: " + describe(exc)
                log_attempt_failed(task, "FAILED", error, "validate_refused", None, repr(exc))
                return Outcome(task.id, task.lease_token, "FAILED", error)
        deadline: asyncio.Timeout | None = None
        try:
            if steps["before_execute"] is not None:
                await self._step(registration, "before_execute", ctx, child)
            if registration.timeout is None:
                returned = await self._step(registration, "execute", ctx, child)
            else:
                async with asyncio.timeout(registration.timeout) as deadline:
                    returned = await self._step(registration, "execute", ctx, child)
        except asyncio.CancelledError:
            raise
        except Snooze as snooze:
            return self._snoozed(registration, task, snooze)
        except HandlerFault as exc:
            if ctx.cancelled:
                # Asked to stop, it stopped by raising (ctx.raise_if_cancelled, or any
                # error): the attempt is cancelled, not failed.
                return self._stopped(ctx, exc)
            if isinstance(exc, TimeoutError) and deadline is not None and deadline.expired():
                error = f"timed out after {registration.timeout}s"
                if child is not None:
                    # Stopped for real: nothing of it runs on.
                    error += " (its handler process was killed)"
                return retry_outcome(
                    task, registration.schedule or registration.retry, error, "timeout", exc=exc
                )
            # Any other error (a client library's own TimeoutError too): a failed attempt.
            return retry_outcome(
                task,
                registration.schedule or registration.retry,
                describe(exc),
                error_class(exc),
                repr(exc),
                exc,
            )
        ctx.cancel_flag.work_done = True
        try:
            result = result_json(returned)
        except (TypeError, ValueError) as exc:
            # The work is done but its result cannot be kept: a failed attempt, saying why.
            error = f"execute returned a value that is not JSON: {type(exc).__name__}: {exc}"
            return retry_outcome(task, registration.retry, error, "result_not_json")
        if task.idempotency_key is not None and not registration.transactional:
            # Before the (batched) completion: a worker dying now leaves a ledger entry,
            # and the retry becomes a recorded no-op instead of a second effect.
            try:
                await self._record_done(task.id, task.lease_token)
            except Exception as exc:
                ctx.logger.warning("could not record the work as done yet: %s", exc)
        if steps["after_execute"] is not None:
            try:
                await self._step(registration, "after_execute", ctx, child)
            except asyncio.CancelledError:
                raise
            except HandlerFault as exc:
                log.error(
                    "%s: after_execute failed (the task is complete): %r",
                    describe_task(task),
                    exc,
                    extra=task_fields(task, error_class=error_class(exc)),
                )
                error = "after_execute failed: " + describe(exc)
                return Outcome(task.id, task.lease_token, "COMPLETED", error, None, result)
        if ctx.cancelled:
            log.info(
                "%s: asked to stop, but its handler finished first: it completes",
                describe_task(task),
                extra=task_fields(task, outcome="completed_before_cancel"),
            )
        return Outcome(task.id, task.lease_token, "COMPLETED", None, None, result)

    def _snoozed(self, registration: Registration, task: TaskRow, snooze: Snooze) -> Outcome:
        """The outcome of a handler that snoozed: due again later, no attempt spent; past
        its handler's cap, a failed attempt."""
        if task.snoozes >= registration.max_snoozes:
            error = (
                f"{snooze.describe()}, but the task has snoozed {task.snoozes} times, the cap "
                f"of its handler (max_snoozes={registration.max_snoozes}): counted as a failed "
                "attempt"
            )
            return retry_outcome(
                task, registration.schedule or registration.retry, error, "snooze_cap"
            )
        log.info(
            "%s: %s",
            describe_task(task),
            snooze.describe(),
            extra=task_fields(
                task, outcome="snoozed", next_retry_in_s=snooze.delay.total_seconds()
            ),
        )
        return Outcome(task.id, task.lease_token, "SNOOZED", snooze.describe(), snooze.delay)

    def _stopped(self, ctx: TaskContext, exc: BaseException) -> Outcome:
        """The outcome of a handler that raised after its task was asked to stop."""
        task = ctx.task
        current = asyncio.current_task()
        if ctx.cancel_flag.task_cancelled and current is not None:
            # An async handler turned our CancelledError into an error of its own: the
            # cancellation was delivered, so it is no longer pending on this task.
            current.uncancel()
        ending = f"the handler stopped: {type(exc).__name__}: {exc}"
        log.warning(
            "%s: cancelled: %s",
            describe_task(task),
            ending,
            extra=task_fields(task, outcome="cancelled"),
        )
        return Outcome(task.id, task.lease_token, "CANCELLED", ending)
