"""Retry schedules in real worker processes: a handler's list, a handler's function (in a
thread and in a handler process) that may give up, a task's own list from SQL, and a
function that fails. The wait chosen is read off each retry's event: the task was due
again (scheduled_for) that long after the failure (occurred_at)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.worker_helpers import Workers, events, schedule, task, wait_until

APP = "tests.apps.lifecycle:app"


def dead(conn: psycopg.Connection, task_id: int) -> dict[str, Any] | None:
    row = task(conn, task_id)
    return row if row["status"] == "FAILED" else None


def waits(conn: psycopg.Connection, task_id: int) -> list[float]:
    """The wait after each failed attempt that was retried, in seconds."""
    return [
        round((e["scheduled_for"] - e["occurred_at"]).total_seconds(), 3)
        for e in events(conn, task_id)
        if (e["from_status"], e["to_status"]) == ("PROCESSING", "QUEUED")
    ]


def test_a_handlers_list_sets_each_wait_and_repeats_its_last(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "retry_listed", max_attempts=4)
    workers.start("W1", app=APP)
    row = wait_until(lambda: dead(conn, task_id), 60, what="the task to go DEAD")
    assert row["attempts"] == 4
    assert waits(conn, task_id) == [0.2, 1.5, 1.5]


def test_a_tasks_own_list_wins_over_its_handlers(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(
        conn, "retry_listed", max_attempts=3, retry_delays=["0.3 seconds", "0.4 seconds"]
    )
    workers.start("W1", app=APP)
    wait_until(lambda: dead(conn, task_id), 60, what="the task to go DEAD")
    assert waits(conn, task_id) == [0.3, 0.4]


@pytest.mark.parametrize("task_type", ["retry_decided", "retry_decided_process"])
def test_a_handlers_function_chooses_the_wait_or_gives_up(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    flaky = schedule(conn, task_type, max_attempts=3)
    permanent = schedule(conn, task_type, '{"permanent": true}', max_attempts=3)
    w = workers.start("W1", app=APP)
    wait_until(lambda: dead(conn, flaky), 60, what="the flaky task to go DEAD")
    row = wait_until(lambda: dead(conn, permanent), 60, what="the permanent one to go DEAD")
    assert waits(conn, flaky) == [0.1, 0.2]
    # Given up at once: one attempt of three, DEAD, saying why.
    assert row["attempts"] == 1 and waits(conn, permanent) == []
    assert row["last_error"].startswith(
        "given up by the handler's retry_delays after attempt 1: ValueError: permanent"
    )
    w.wait_log(f"task {permanent}")
    assert "task DEAD" in w.log()


def test_a_failing_function_leaves_the_policy_to_decide(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "retry_broken_rule", max_attempts=2)
    w = workers.start("W1", app=APP)
    row = wait_until(lambda: dead(conn, task_id), 60, what="the task to go DEAD")
    # The default policy's first wait: 2 s +/- 20 %.
    assert row["attempts"] == 2 and 1.6 <= waits(conn, task_id)[0] <= 2.4
    w.wait_log("its handler's retry_delays function failed (KeyError")
    assert f"task {task_id}: its handler's retry_delays function failed" in w.log()
