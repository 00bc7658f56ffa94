"""Cancelling running tasks in real worker processes (tests/apps/cancels.py): an async
handler gets CancelledError; a plain one sees ctx.cancelled and stops, or ignores it and is
abandoned after --cancel-grace (its thread counted as stuck), or returns within the grace
and wins the race; the heartbeat's check stops a task whose notification never came; a
fan-out's running tenants are stopped and the completed ones named."""

from __future__ import annotations

import psycopg

from tests.support.worker_helpers import (
    Workers,
    events,
    schedule,
    status,
    steps,
    task,
    wait_until,
)

APP = "tests.apps.cancels:app"


def started(conn: psycopg.Connection, task_id: int) -> bool:
    return any(s["step"] == "started" for s in steps(conn, task_id))


def cancel(conn: psycopg.Connection, task_id: int, reason: str = "runaway") -> str:
    row = conn.execute(
        "SELECT outcome FROM pgsched.cancel_task_ex(%s, %s, 'ops')", (task_id, reason)
    ).fetchone()
    assert row is not None
    return str(row[0])


def seconds_to_outcome(conn: psycopg.Connection, task_id: int) -> float:
    """From the cancel request's event to the final one, by the database clock."""
    row = conn.execute(
        "SELECT extract(epoch FROM max(occurred_at) - min(occurred_at)) FROM pgsched.task_events"
        " WHERE task_id = %s AND (detail LIKE 'cancel requested%%' OR to_status <> 'PROCESSING')"
        " AND from_status = 'PROCESSING'",
        (task_id,),
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_an_async_handler_gets_cancelled_error_and_the_task_ends_cancelled(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "cancel_async_waits")
    workers.start("W1", app=APP)
    wait_until(lambda: started(conn, task_id), 20, what="the handler to start")
    assert cancel(conn, task_id) == "CANCEL_REQUESTED"
    wait_until(lambda: status(conn, task_id) == "CANCELLED", 10, what="CANCELLED")
    assert [s["step"] for s in steps(conn, task_id)] == ["started", "cancelled_error"]
    row = task(conn, task_id)
    assert row["status_reason"] == (
        f"cancelled by ops (role {conn.info.user}): runaway; "
        "the async handler was cancelled (asyncio.CancelledError)"
    )
    trail = [(e["from_status"], e["to_status"]) for e in events(conn, task_id)]
    assert trail == [
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "PROCESSING"),  # the request
        ("PROCESSING", "CANCELLED"),
    ]
    print(f"async handler: request to CANCELLED in {seconds_to_outcome(conn, task_id):.3f}s")


def test_the_heartbeat_finds_a_request_whose_notification_never_came(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "cancel_async_waits")
    w = workers.start("W1", app=APP, lease=30)
    wait_until(lambda: started(conn, task_id), 20, what="the handler to start")
    # The request as cancel_task writes it, minus the NOTIFY: only the heartbeat can tell.
    conn.execute(
        "UPDATE pgsched.tasks SET cancel_requested_at = now(), cancel_requested_by = 'test',"
        " cancel_reason = 'silent' WHERE id = %s",
        (task_id,),
    )
    wait_until(lambda: status(conn, task_id) == "CANCELLED", 10, what="CANCELLED")
    assert task(conn, task_id)["status_reason"].startswith("cancelled by test: silent; ")
    assert f"task {task_id} (type cancel_async_waits" in w.log()


def test_a_plain_handler_sees_ctx_cancelled_and_stops(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "cancel_sync_cooperates")
    workers.start("W1", app=APP, extra=["--cancel-grace", "30"])
    wait_until(lambda: started(conn, task_id), 20, what="the handler to start")
    cancel(conn, task_id)
    wait_until(lambda: status(conn, task_id) == "CANCELLED", 10, what="CANCELLED")
    assert [s["step"] for s in steps(conn, task_id)] == ["started", "saw_cancelled"]
    assert "the handler stopped: TaskCancelledError" in task(conn, task_id)["status_reason"]
    print(f"plain handler: request to CANCELLED in {seconds_to_outcome(conn, task_id):.3f}s")


def test_a_plain_handler_ignoring_the_cancel_is_abandoned_after_the_grace(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "cancel_sync_ignores", '{"seconds": 8}')
    w = workers.start("W1", app=APP, extra=["--cancel-grace", "1"])
    wait_until(lambda: started(conn, task_id), 20, what="the handler to start")
    cancel(conn, task_id)
    wait_until(lambda: status(conn, task_id) == "CANCELLED", 10, what="CANCELLED")
    reason = task(conn, task_id)["status_reason"]
    assert "did not return within the cancel grace of 1s and was abandoned" in reason
    assert [s["step"] for s in steps(conn, task_id)] == ["started"]  # still sleeping
    w.wait_log("Python cannot stop a thread")  # counted as stuck, as timeouts are
    w.wait_log("its timed-out handler returned at last", 15)
    # Its late return changes nothing.
    assert status(conn, task_id) == "CANCELLED"


def test_a_plain_handler_that_returns_within_the_grace_wins_the_race(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "cancel_sync_ignores", '{"seconds": 2}')
    workers.start("W1", app=APP, extra=["--cancel-grace", "30"])
    wait_until(lambda: started(conn, task_id), 20, what="the handler to start")
    cancel(conn, task_id)
    wait_until(lambda: status(conn, task_id) == "COMPLETED", 15, what="COMPLETED")
    assert [s["detail"] for s in steps(conn, task_id) if s["step"] == "returned"] == [
        "cancelled=True"
    ]
    assert task(conn, task_id)["status_reason"].startswith(
        "completed: the handler finished before the cancel requested by ops"
    )


def test_a_fan_out_cancel_stops_running_tenants_and_names_the_completed(
    conn: psycopg.Connection, workers: Workers
) -> None:
    for tenant in ("fast", "slow1", "slow2"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    parent = schedule(conn, "cancel_fan_out", scope="product", product="crm")
    workers.start("W1", app=APP, lanes="normal,batch", extra=["--batch-concurrency", "4"])

    def children() -> dict[str, tuple[int, str]]:
        rows = conn.execute(
            "SELECT tenant_id, id, status::text FROM pgsched.tasks WHERE parent_id = %s", (parent,)
        ).fetchall()
        return {r[0]: (int(r[1]), r[2]) for r in rows}

    def settled() -> bool:
        kids = children()
        return (
            len(kids) == 3
            and kids["fast"][1] == "COMPLETED"
            and all(started(conn, kids[t][0]) for t in ("slow1", "slow2"))
        )

    wait_until(settled, 30, what="fast to complete and the slow tenants to start")
    assert cancel(conn, parent, "campaign off") == "FAN_OUT_CANCELLED"
    detail = events(conn, parent)[-1]["detail"]
    assert "tenants completed: 1 (fast)" in detail
    assert "running, asked to stop: 2 (slow1, slow2)" in detail
    wait_until(
        lambda: (
            {t: s for t, (_, s) in children().items()}
            == {"fast": "COMPLETED", "slow1": "CANCELLED", "slow2": "CANCELLED"}
        ),
        10,
        what="the slow tenants to be cancelled",
    )
    for tenant in ("slow1", "slow2"):
        assert [s["step"] for s in steps(conn, children()[tenant][0])] == [
            "started",
            "cancelled_error",
        ]
