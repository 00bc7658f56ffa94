"""The pieces a no-op task goes through, made cheaper per task, still doing what they did,
without a database: TaskRow's width check, the cancel flag whose Event is made only when
someone waits, the task's logger made on first use, a registration's steps looked up once,
a batch of outcomes as the completion's columns, the lease keeper's batches."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from pgsched.claims import task_row
from pgsched.handlers import CancelFlag, HandlerRegistry, TaskContext, TaskHandler, TaskRow
from pgsched.worker.leases import LeaseKeeper
from pgsched.worker.outcomes import Outcome, finish_params


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
        # No handler returned anything: no results column is sent.
        "results": None,
        "tenant": None,
    }
    with_result = finish_params([*batch, Outcome(4, "d", "COMPLETED", result='{"n": 1}')])
    assert with_result["results"] == [None, None, None, '{"n": 1}']
    assert finish_params([]) == {
        "task_ids": [],
        "lease_tokens": [],
        "outcomes": [],
        "errors": [],
        "retry_delays": [],
        "results": None,
        "tenant": None,
    }
    # A batch of one tenant (distributed mode writes tenant by tenant).
    assert finish_params(batch, "acme")["tenant"] == "acme"


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
