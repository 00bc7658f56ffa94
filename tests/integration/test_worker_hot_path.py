"""The hot path against a real database: claimed rows come back as frozen TaskRows bound by
column name (a missing column is named), a claimed batch's outcomes are written, and a
cancel that lands before the task starts ends it CANCELLED."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from pgsched.claims import TASK_FIELDS, _claimed_rows, claim_many
from pgsched.handlers import HandlerRegistry, TaskContext, TaskRow
from pgsched.queries import query
from pgsched.worker.cancels import CancelRequests
from pgsched.worker.outcomes import Outcome, finish_params
from pgsched.worker.runner import ConnectionSource, TaskRunner


def scheduled(conn: psycopg.Connection, n: int) -> list[int]:
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks("
        " task_types => array_fill('hot_path'::text, ARRAY[%s]),"
        " payloads => array_fill('{\"k\": 1}'::jsonb, ARRAY[%s]))",
        (n, n),
    ).fetchall()
    return [r[0] for r in rows]


def claimed(db_dsn: str, n: int) -> list[TaskRow]:
    async def go() -> list[TaskRow]:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as conn:
            tasks, undecodable = await claim_many(conn, "NORMAL", n, "w-test", timedelta(60))
        assert undecodable == []
        return tasks

    return asyncio.run(go())


def test_claimed_rows_are_frozen_task_rows(conn: psycopg.Connection, db_dsn: str) -> None:
    ids = scheduled(conn, 3)
    tasks = claimed(db_dsn, 3)
    assert sorted(t.id for t in tasks) == sorted(ids)
    for t in tasks:
        assert type(t) is TaskRow
        # The same object TaskRow(*values) makes: equal, same hash and repr.
        again = TaskRow(*(getattr(t, f.name) for f in dataclasses.fields(TaskRow)))
        assert t == again and hash(t) == hash(again) and repr(t) == repr(again)
        assert t.payload == {"k": 1} and t.metadata == {}
        assert t.task_type == "hot_path" and t.lane == "NORMAL" and t.attempt == 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            t.id = 0  # type: ignore[misc]


def test_a_claimed_batchs_outcomes_are_written(conn: psycopg.Connection, db_dsn: str) -> None:
    scheduled(conn, 3)
    tasks = sorted(claimed(db_dsn, 3), key=lambda t: t.id)
    batch = [
        Outcome(tasks[0].id, tasks[0].lease_token, "COMPLETED"),
        Outcome(tasks[1].id, tasks[1].lease_token, "FAILED", "no\x00good"),
        Outcome(tasks[2].id, tasks[2].lease_token, "RETRY", "later", timedelta(seconds=60)),
    ]
    rows = conn.execute(query("task_finish_many"), finish_params(batch)).fetchall()
    assert sorted(rows) == [(t.id, True) for t in tasks]
    got: dict[int, str] = dict(
        conn.execute(
            "SELECT id, status FROM pgsched.tasks WHERE id = ANY(%s)", ([t.id for t in tasks],)
        ).fetchall()
    )
    assert got == {tasks[0].id: "COMPLETED", tasks[1].id: "FAILED", tasks[2].id: "QUEUED"}
    error = conn.execute(
        "SELECT last_error FROM pgsched.tasks WHERE id = %s", (tasks[1].id,)
    ).fetchone()
    assert error == ("no\\x00good",)


def claimed_through(db_dsn: str, columns: str) -> list[TaskRow]:
    """A claim whose result has `columns` (of the claim's own), through the worker's
    decoding."""
    statement = sql.SQL("SELECT {} FROM ({}) AS c").format(
        sql.SQL(columns), query("task_claim_many")
    )

    async def go() -> list[TaskRow]:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as conn:
            cur = await conn.execute(
                statement,
                {
                    "lane": "NORMAL",
                    "max_tasks": 5,
                    "worker": "w-test",
                    "lease": timedelta(60),
                    "as_of": None,
                    "not_before": None,
                },
            )
            tasks, undecodable = await _claimed_rows(conn, cur)
        assert undecodable == []
        return tasks

    return asyncio.run(go())


def test_claimed_columns_are_bound_by_name_in_any_order(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    ids = scheduled(conn, 2)
    # Reversed, with a column TaskRow does not have in front.
    columns = "'extra' AS extra, " + ", ".join(reversed(TASK_FIELDS))
    tasks = claimed_through(db_dsn, columns)
    assert sorted(t.id for t in tasks) == sorted(ids)
    for t in tasks:
        assert (t.task_type, t.lane, t.attempt, t.scope) == ("hot_path", "NORMAL", 1, "tenant")
        assert t.payload == {"k": 1} and t.done_by is None


def test_a_claim_missing_a_column_says_which(conn: psycopg.Connection, db_dsn: str) -> None:
    scheduled(conn, 1)
    columns = ", ".join(f for f in TASK_FIELDS if f != "lease_token")
    with pytest.raises(LookupError, match="no column lease_token"):
        claimed_through(db_dsn, columns)


def test_a_cancel_landing_before_the_task_starts_ends_it_cancelled(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    """A cancel request (its notification, or the heartbeat's check) handled in the loop
    iteration between a claim starting a task and the task's first step: the task must
    still end in an outcome. Cancelling its asyncio task then would stop the coroutine
    before its first line: no outcome, and the lease renewed for good."""
    (task_id,) = scheduled(conn, 1)
    (task,) = claimed(db_dsn, 1)
    # Asked to stop while PROCESSING: what the worker hears of by notification.
    conn.execute("SELECT pgsched.cancel_task(%s, 'stop it')", (task_id,))
    calls: list[int] = []

    async def handler(ctx: TaskContext) -> None:
        calls.append(ctx.task.id)

    registry = HandlerRegistry()
    registry.register("hot_path", handler)
    recorded: list[Outcome] = []

    async def go() -> None:
        runner = TaskRunner(
            "w-test",
            registry.get,
            record=recorded.append,
            written=lambda task_id: None,
            connections=ConnectionSource(None, None),
            record_done=lambda task_id, token: asyncio.sleep(0, True),
        )
        cancels = CancelRequests(1.0)
        flag = cancels.track(task.id)
        handle = asyncio.get_running_loop().create_task(runner.run(task, flag))
        cancels.request(task, handle)  # before the task's first step
        await asyncio.gather(handle, return_exceptions=True)

    asyncio.run(go())
    assert calls == []  # asked to stop before it began: the handler is not called
    assert [(o.task_id, o.outcome) for o in recorded] == [(task_id, "CANCELLED")]
    rows = conn.execute(query("task_finish_many"), finish_params(recorded)).fetchall()
    assert rows == [(task_id, True)]
    status = conn.execute("SELECT status FROM pgsched.tasks WHERE id = %s", (task_id,))
    assert status.fetchone() == ("CANCELLED",)
