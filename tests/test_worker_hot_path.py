"""The pieces a no-op task goes through, made cheaper per task, still doing what they did:
claimed rows become frozen TaskRows equal to TaskRow(*values); a cancel flag whose Event is
made only when someone waits still wakes a waiter set from another thread; the task's
logger, made on first use, still carries the task's fields; a registration's steps are
looked up once; a batch of outcomes becomes the completion's columns and is written."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsched.handlers import CancelFlag, HandlerRegistry, TaskContext, TaskHandler, TaskRow
from pgsched.queries import query
from pgsched.worker.cancels import CancelRequests
from pgsched.worker.claims import TASK_FIELDS, _claimed_rows, claim_many, task_row
from pgsched.worker.leases import LeaseKeeper
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


def test_task_row_refuses_a_row_of_the_wrong_width() -> None:
    with pytest.raises(ValueError):
        task_row((1, "t"))


def test_cancel_flag_set_from_another_thread_wakes_a_waiter() -> None:
    flag = CancelFlag()
    assert not flag.is_set()
    assert flag.wait(0.01) is False
    threading.Timer(0.05, flag.set).start()
    started = time.monotonic()
    assert flag.wait(10) is True
    assert time.monotonic() - started < 5
    assert flag.is_set()


def test_cancel_flag_set_before_anyone_waits() -> None:
    flag = CancelFlag()
    flag.set()
    assert flag.is_set()
    # The Event made by this first wait starts set.
    assert flag.wait(0) is True


def test_cancel_flag_many_waiters_and_a_racing_set() -> None:
    # Waiters making the Event while the setter runs: none may miss the set.
    for _ in range(50):
        flag = CancelFlag()
        woke: list[bool] = []
        waiters = [
            threading.Thread(target=lambda f=flag, w=woke: w.append(f.wait(10))) for _ in range(4)
        ]
        for w in waiters:
            w.start()
        flag.set()
        for w in waiters:
            w.join(15)
        assert woke == [True] * 4


def a_row(**changes: Any) -> TaskRow:
    values: dict[str, Any] = {
        "id": 41,
        "task_type": "hot_path",
        "tenant_id": "acme",
        "payload_json": "{}",
        "metadata_json": "{}",
        "attempt": 2,
        "max_attempts": 5,
        "scheduled_for": None,
        "lane": "NORMAL",
        "priority": 5,
        "idempotency_key": None,
        "lease_token": None,
    }
    return TaskRow(**(values | changes))


def test_task_logger_carries_the_task_fields(caplog: pytest.LogCaptureFixture) -> None:
    ctx = TaskContext(a_row(), "w-test")
    with caplog.at_level(logging.INFO, logger="pgsched.task.hot_path"):
        ctx.logger.info("hello")
    assert ctx.logger is ctx.logger  # made once
    (record,) = [r for r in caplog.records if r.getMessage() == "hello"]
    assert record.name == "pgsched.task.hot_path"
    assert (record.task_id, record.tenant_id, record.attempt) == (41, "acme", 2)  # type: ignore[attr-defined]


def test_registration_looks_its_steps_up_once() -> None:
    class Mixed(TaskHandler):
        async def validate(self, ctx: TaskContext) -> None:
            return None

        def execute(self, ctx: TaskContext) -> None:
            return None

    async def plain_async(ctx: TaskContext) -> None:
        return None

    registry = HandlerRegistry()
    mixed = registry.register("mixed", Mixed())
    assert mixed.steps["before_execute"] is None and mixed.steps["after_execute"] is None
    assert mixed.steps["validate"] is not None and mixed.steps["execute"] is not None
    assert mixed.async_steps == {"validate"}
    assert not mixed.is_async
    fn = registry.register("fn", plain_async)
    assert fn.async_steps == {"execute"} and fn.is_async
    assert fn.step("execute") is plain_async and fn.step("validate") is None


def test_finish_params_are_the_batchs_columns() -> None:
    batch = [
        Outcome(1, "a", "COMPLETED"),
        Outcome(2, "b", "RETRY", "boom\x00", timedelta(seconds=3)),
        Outcome(3, "c", "FAILED", "bad"),
    ]
    assert finish_params(batch) == {
        "task_ids": [1, 2, 3],
        "lease_tokens": ["a", "b", "c"],
        "outcomes": ["COMPLETED", "RETRY", "FAILED"],
        "errors": [None, "boom\\x00", "bad"],
        "retry_delays": [None, timedelta(seconds=3), None],
    }
    assert finish_params([]) == {
        "task_ids": [],
        "lease_tokens": [],
        "outcomes": [],
        "errors": [],
        "retry_delays": [],
    }


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


def test_lease_keeper_holds_and_drops_a_batch() -> None:
    keeper = LeaseKeeper("postgresql:///unused", 30.0)
    keeper.hold_many([(1, "a"), (2, "b"), (3, "c")])
    keeper.hold(4, "d")
    assert keeper._held == {1: "a", 2: "b", 3: "c", 4: "d"}
    keeper._missed[2] = 1
    keeper._cancel_told.add(3)
    keeper.drop_many(iter([1, 2, 3, 99]))
    assert keeper._held == {4: "d"}
    assert keeper._missed == {} and keeper._cancel_told == set()


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
                {"lane": "NORMAL", "max_tasks": 5, "worker": "w-test", "lease": timedelta(60)},
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
