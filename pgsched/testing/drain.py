"""`drain`: run the due tasks of an App in this process, through the worker's own runner.

Each task is claimed by the worker's claim function (`pgsched.task_claim_many`), run by
the worker's `TaskRunner` (validate, before_execute, execute, after_execute, timeouts,
retries with the handler's policy, the completed-work ledger) and its outcome written by
`pgsched.task_finish_many`, as a worker would, one task at a time in claim order. What is
left in the rows (status, attempts, last_error, events, the DEAD lane) is what a worker
would have left.

The clock: due-ness is the database's judgement. `as_of` is the time the claim judges
it by (and promotes cold tasks coming due by), so `drain(app, as_of=now + 1 day)` runs
what is due within a day; the rows are still written at the database's own time, so a
retry is due at the database's now plus its backoff, and a later pass of the same drain
(same `as_of`) runs it again if that is before `as_of`. Nothing is shifted in the rows.

What a worker does that this does not: heartbeats (the lease is long), handler processes
(plain steps run in a thread), concurrency, claim limits' waits, and the Redis hot tier.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgsched import tracing
from pgsched.claims import task_rows
from pgsched.errors import ConfigError
from pgsched.lanes import WORK_LANES
from pgsched.queries import query
from pgsched.tasks import TaskRow
from pgsched.worker.outcomes import Outcome, finish_params
from pgsched.worker.runner import ConnectionSource, TaskRunner

log = logging.getLogger("pgsched.testing")

WORKER_ID = "pgsched.testing.drain"
# Long enough that nothing rescues a task a test is still running.
LEASE = timedelta(hours=1)
# A handler that schedules its own successor would otherwise drain for ever.
DEFAULT_MAX_TASKS = 1000


@dataclass(frozen=True)
class Ran:
    """One attempt a drain ran: the task and the outcome written for it."""

    task_id: int
    task_type: str
    tenant_id: str
    attempt: int
    # COMPLETED | RETRY | FAILED (the DEAD lane, also a retry with no attempt left) |
    # RELEASED | CANCELLED
    outcome: str
    error: str | None
    applied: bool  # False: the database refused the report as stale


@dataclass
class DrainResult:
    """What a drain ran, in order; counts by outcome."""

    ran: list[Ran] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.ran if r.outcome == outcome)

    @property
    def completed(self) -> int:
        return self.count("COMPLETED")

    @property
    def retried(self) -> int:
        return self.count("RETRY")

    @property
    def failed(self) -> int:
        return self.count("FAILED")

    def __len__(self) -> int:
        return len(self.ran)


class _DrainConnections(ConnectionSource):
    """What the runner asks of the worker's connection pools, on the drain's connection:
    fan-out on it, and for a transactional handler a connection of its own (a savepoint
    on the caller's connection, when the drain runs on one)."""

    def __init__(self, conn: psycopg.Connection[Any], dsn: str | None) -> None:
        super().__init__(None, None)
        self._conn = conn
        self._dsn = dsn
        self._savepoints: dict[int, AbstractContextManager[Any]] = {}

    async def acquire(self, is_async: bool, tenant_id: str) -> Any:
        params = {"tenant_id": tenant_id}
        if self._dsn is None:
            if is_async:
                raise ConfigError(
                    "drain on a caller's connection cannot give an async transactional "
                    "handler an AsyncConnection in that transaction: drain on a database "
                    "(dsn=, or the pgsched_dsn fixture) instead"
                )
            savepoint = self._conn.transaction()
            savepoint.__enter__()
            self._savepoints[id(self._conn)] = savepoint
            self._conn.execute(query("transaction_tenant_set"), params)
            return self._conn
        if is_async:
            aconn = await psycopg.AsyncConnection.connect(self._dsn)
            await aconn.execute(query("transaction_tenant_set"), params)
            return aconn
        conn = psycopg.connect(self._dsn)
        conn.execute(query("transaction_tenant_set"), params)
        return conn

    async def release(self, conn: Any, is_async: bool, *, commit: bool) -> Exception | None:
        savepoint = self._savepoints.pop(id(conn), None) if conn is self._conn else None
        try:
            if savepoint is not None:
                if commit:
                    savepoint.__exit__(None, None, None)
                else:
                    rollback = _RollBack()
                    savepoint.__exit__(type(rollback), rollback, None)
            elif is_async:
                await (conn.commit() if commit else conn.rollback())
                await conn.close()
            else:
                conn.commit() if commit else conn.rollback()
                conn.close()
        except Exception as exc:
            return exc
        return None

    async def run_one(self, name: str, params: dict[str, Any]) -> Any:
        row = self._conn.execute(query(name), params).fetchone()
        return row[0] if row else None


class _RollBack(Exception):
    """Handed to a savepoint's exit so that it rolls back."""


def _lanes(lanes: str | Iterable[str] | None) -> list[str]:
    if lanes is None:
        return list(WORK_LANES)
    names = [lanes] if isinstance(lanes, str) else list(lanes)
    chosen = []
    for name in names:
        upper = name.strip().upper()
        if upper not in WORK_LANES:
            raise ConfigError(f"lanes: unknown lane {name!r} (one of {', '.join(WORK_LANES)})")
        chosen.append(upper)
    return chosen


@contextmanager
def _connection(dsn: str | None, conn: psycopg.Connection[Any] | None) -> Iterator[Any]:
    if conn is not None:
        yield conn
        return
    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as own:
        yield own


def drain(
    app: Any,
    *,
    lanes: str | Iterable[str] | None = None,
    until_empty: bool = True,
    as_of: datetime | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    dsn: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> DrainResult:
    """Run `app`'s due tasks in this process (see the module's docstring).

    lanes: the lanes to drain (all work lanes by default; DEAD never runs). until_empty:
    claim again until nothing is due (a retry due before `as_of` runs again); False: one
    claim per lane. as_of: the time due-ness is judged by (the database's now by default).
    max_tasks: stop after this many attempts (a handler that keeps scheduling more).
    dsn / conn: the database (app.dsn by default), or a connection whose open transaction
    the tasks are read and written in (the `pgsched_tx` fixture's).

    From async code, `await drain_async(...)`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigError("drain() runs its own event loop: from async code, await drain_async()")
    return asyncio.run(
        drain_async(
            app,
            lanes=lanes,
            until_empty=until_empty,
            as_of=as_of,
            max_tasks=max_tasks,
            dsn=dsn,
            conn=conn,
        )
    )


async def drain_async(
    app: Any,
    *,
    lanes: str | Iterable[str] | None = None,
    until_empty: bool = True,
    as_of: datetime | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    dsn: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> DrainResult:
    """`drain`, awaited (from an async test or an event loop already running)."""
    chosen = _lanes(lanes)
    if max_tasks < 1:
        raise ConfigError(f"max_tasks must be at least 1, got {max_tasks}")
    if as_of is not None and as_of.tzinfo is None:
        raise ConfigError("as_of must carry a time zone (a naive datetime is ambiguous)")
    if conn is None and dsn is None:
        dsn = app.dsn
    result = DrainResult()
    with _connection(dsn, conn) as c:
        recorded: list[Outcome] = []

        async def record_done(task_id: int, lease_token: Any) -> bool:
            params = {"task_ids": [task_id], "lease_tokens": [lease_token]}
            rows = c.execute(query("work_record_done_many"), params).fetchall()
            return bool(rows and rows[0][1])

        runner = TaskRunner(
            WORKER_ID,
            app.registry.get,
            record=recorded.append,
            written=lambda task_id: None,
            connections=_DrainConnections(c, None if conn is not None else dsn),
            record_done=record_done,
            dsn=dsn,
        )
        while len(result) < max_tasks:
            claimed_any = False
            c.execute(
                query("task_promote_due"), {"max_tasks": 10_000, "now": as_of, "within": None}
            )
            for lane in chosen:
                for task in _claim(c, lane, max_tasks - len(result), as_of):
                    claimed_any = True
                    await runner.run(task)
                    _write(c, task, recorded, result)
                    recorded.clear()
            if not claimed_any or not until_empty:
                break
    return result


def _claim(
    conn: psycopg.Connection[Any], lane: str, room: int, as_of: datetime | None
) -> list[TaskRow]:
    if room <= 0:
        return []
    params = {
        "lane": lane,
        "max_tasks": room,
        "worker": WORKER_ID,
        "lease": LEASE,
        "as_of": as_of,
        "not_before": None,
    }
    started = time.time_ns()
    with conn.cursor(row_factory=task_rows) as cur:
        tasks = cur.execute(query("task_claim_many"), params).fetchall()
    tracing.claimed(lane, tasks, started)
    return tasks


def _write(
    conn: psycopg.Connection[Any], task: TaskRow, recorded: list[Outcome], result: DrainResult
) -> None:
    """Write what the runner recorded for `task` (a transactional handler's completion is
    already written, in its own transaction), as the worker's outcome buffer does."""
    applied: set[int] = set()
    if recorded:
        rows = conn.execute(query("task_finish_many"), finish_params(recorded)).fetchall()
        applied = {task_id for task_id, ok in rows if ok}
    outcomes = recorded or [Outcome(task.id, task.lease_token, "COMPLETED")]
    for outcome in outcomes:
        kind = outcome.outcome
        if kind == "RETRY" and task.attempt >= task.max_attempts:
            # task_finish_many's rule: a retry with no attempt left is FAILED (DEAD lane).
            kind = "FAILED"
        ran = Ran(
            task.id,
            task.task_type,
            task.tenant_id,
            task.attempt,
            kind,
            outcome.error,
            not recorded or outcome.task_id in applied,
        )
        if not ran.applied:
            log.warning("task %s: the drain's report of %s was refused as stale", task.id, ran)
        result.ran.append(ran)
