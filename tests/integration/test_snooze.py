"""Snooze: a handler puts its task back to be due later without spending an attempt, in a
thread, in a handler process and on the event loop; a cap ends a task that would snooze
forever. Real worker processes against real Postgres."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.worker_helpers import Workers, events, schedule, task, wait_until

APP = "tests.apps.lifecycle:app"


def finished(conn: psycopg.Connection, task_id: int) -> dict[str, Any] | None:
    row = task(conn, task_id)
    return row if row["status"] in ("COMPLETED", "FAILED") else None


@pytest.mark.parametrize("task_type", ["snooze_thread", "snooze_process", "snooze_async"])
def test_a_snooze_puts_the_task_back_without_spending_an_attempt(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    task_id = schedule(conn, task_type, '{"seconds": 1}', max_attempts=1)
    w = workers.start("W1", app=APP)
    row = wait_until(lambda: finished(conn, task_id), 60, what="the task to finish")
    assert row["status"] == "COMPLETED", workers.logs()
    # One attempt spent (max_attempts 1 would have left none for a retry), one snooze.
    assert (row["attempts"], row["snoozes"]) == (1, 1)
    history = events(conn, task_id)
    assert [(e["from_status"], e["to_status"]) for e in history] == [
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "QUEUED"),
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "COMPLETED"),
    ]
    snoozed = history[1]
    assert snoozed["detail"].startswith("snoozed for 1s"), snoozed
    if task_type != "snooze_async":
        assert snoozed["detail"] == "snoozed for 1s: waiting for the upstream export"
    # Due again a second after it snoozed, not at once.
    assert (history[2]["occurred_at"] - snoozed["occurred_at"]).total_seconds() >= 0.9
    # The worker says so in its log, naming the task.
    w.wait_log("snoozed for 1s")
    assert any(f"{task_id}" in line for line in w.log().splitlines() if "snoozed for 1s" in line)


@pytest.mark.parametrize("task_type", ["snooze_capped", "snooze_capped_process"])
def test_past_the_cap_a_snooze_is_a_failed_attempt(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    task_id = schedule(conn, task_type, max_attempts=2)
    workers.start("W1", app=APP)
    row = wait_until(lambda: finished(conn, task_id), 60, what="the task to finish")
    # Two snoozes (the cap), then each snooze a failed attempt: DEAD after two.
    assert (row["status"], row["attempts"], row["snoozes"]) == ("FAILED", 2, 2), workers.logs()
    assert (
        "the cap of its handler (max_snoozes=2): counted as a failed attempt" in (row["last_error"])
    )
    details = [e["detail"] for e in events(conn, task_id) if e["from_status"] == "PROCESSING"]
    assert details[:2] == ["snoozed for 0s: never ready"] * 2
    assert details[2].startswith("snoozed for 0s: never ready, but the task has snoozed 2 times")
    assert details[3].startswith("attempts exhausted (2 of 2)")


def test_a_bad_snooze_fails_the_attempt_saying_why(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "snooze_bad", max_attempts=1)
    workers.start("W1", app=APP)
    row = wait_until(lambda: finished(conn, task_id), 60, what="the task to finish")
    assert row["status"] == "FAILED" and not row["snoozes"]
    assert "ValueError: snooze -5 is out of range (0 to 30 days)" in row["last_error"]


def test_a_snooze_report_from_sql(conn: psycopg.Connection) -> None:
    """Any worker (another language too) reports SNOOZED through task_finish_many."""
    task_id = schedule(conn, "anything", max_attempts=1)
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, 'w1')"
    ).fetchone()
    assert claimed is not None and claimed[0] == task_id
    applied = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(ARRAY[%s], ARRAY[%s]::uuid[],"
        " ARRAY['SNOOZED'], ARRAY['snoozed for 3600s: later'], ARRAY['1 hour']::interval[])",
        (task_id, claimed[1]),
    ).fetchone()
    assert applied == (True,)
    row = task(conn, task_id)
    assert (row["status"], row["attempts"], row["snoozes"]) == ("QUEUED", 0, 1)
    assert row["status_reason"] == "snoozed for 3600s: later"
    due_in = conn.execute(
        "SELECT extract(epoch FROM next_run_at - now()) FROM pgsched.tasks WHERE id = %s",
        (task_id,),
    ).fetchone()[0]
    assert 3590 < due_in <= 3600
