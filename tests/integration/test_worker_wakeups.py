"""When a worker starts a task: exactly at its due time (not at the next poll), within
the backup poll bound when a notification is lost (the listener reconnects by itself), and
at the BATCH lane's rate while HIGH work still starts at once."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg

from tests.support.worker_helpers import (
    Workers,
    db_now,
    listener_backends,
    schedule,
    statuses,
    wait_until,
)


def run_of(conn: psycopg.Connection, task_id: int) -> tuple[float, float]:
    """(lateness, started_at epoch) of the task's first run."""
    row = conn.execute(
        "SELECT extract(epoch FROM lateness)::float8, extract(epoch FROM started_at)::float8"
        " FROM pgsched.task_runs WHERE task_id = %s ORDER BY attempt LIMIT 1",
        (task_id,),
    ).fetchone()
    assert row is not None, f"task {task_id} never started"
    return row[0], row[1]


def completed(conn: psycopg.Connection, *ids: int) -> bool:
    return set(statuses(conn, list(ids)).values()) == {"COMPLETED"}


def test_task_starts_at_its_due_time_not_at_the_poll(
    conn: psycopg.Connection, workers: Workers
) -> None:
    w = workers.start("W1", poll=30)
    w.wait_running()
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    now = db_now(conn)
    first = schedule(conn, "quick", run_at=now + timedelta(seconds=3))
    second = schedule(conn, "quick", run_at=now + timedelta(seconds=4.5))
    wait_until(lambda: completed(conn, first, second), 10, what="both due tasks to run")
    for task_id in (first, second):
        lateness, _ = run_of(conn, task_id)
        # Not early, and not at the 30 s poll (22.5 s at the earliest): at the due time.
        assert 0 <= lateness < 0.5, f"task {task_id} started {lateness:.3f}s after its due time"


def test_lost_listener_reconnects_and_the_poll_bounds_lateness(
    conn: psycopg.Connection, workers: Workers
) -> None:
    poll = 3.0
    bound = poll * 1.25 + 2
    w = workers.start("W1", poll=poll)
    w.wait_running()
    listeners = wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    assert len(listeners) == 1
    old_pid, last_statement = listeners[0]
    # One session listens on the lane's channel and on the cancel requests' (in some order).
    assert last_statement in ('LISTEN "pgsched_normal"', 'LISTEN "pgsched_cancel"')

    # Kill the listener and schedule at once: that task's notification may be lost.
    assert conn.execute("SELECT pg_terminate_backend(%s)", (old_pid,)).fetchone() == (True,)
    during = schedule(conn, "quick")
    wait_until(lambda: completed(conn, during), bound, what="the task scheduled mid-outage")
    w.wait_log("listener connection lost", 5)
    reconnected = wait_until(
        lambda: [pid for pid, _ in listener_backends(conn) if pid != old_pid],
        5,
        what="a new listener session",
    )
    assert len(reconnected) == 1

    # The new listener hears notifications again: no waiting for the poll.
    heard = schedule(conn, "quick")
    wait_until(lambda: completed(conn, heard), bound, what="the notified task")
    assert run_of(conn, heard)[0] < 1.0

    # A task made due with no notification at all (as if it were lost): the backup poll
    # finds it. Routed HOT first (no NOTIFY), then made due in place.
    silent = schedule(conn, "quick", run_at=db_now(conn) + timedelta(hours=1))
    conn.execute("UPDATE pgsched.tasks SET next_run_at = now() WHERE id = %s", (silent,))
    made_due = time.monotonic()
    wait_until(lambda: completed(conn, silent), bound, what="the silently due task")
    assert time.monotonic() - made_due < bound
    assert run_of(conn, silent)[0] < poll * 1.25 + 0.5
    assert w.alive()


def test_batch_lane_is_throttled_and_high_is_not_delayed(
    conn: psycopg.Connection, workers: Workers
) -> None:
    rate, burst, n = 20, 2, 100
    w = workers.start(
        "W1",
        lanes="high,batch",
        extra=["--batch-rate", str(rate), "--batch-concurrency", "4"],
    )
    w.wait_running()
    assert conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        "  array_fill('bulk'::text, ARRAY[%(n)s]),"
        "  lanes => array_fill('BATCH'::text, ARRAY[%(n)s]))",
        {"n": n},
    ).fetchone() == (n,)

    def bulk_started() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pgsched.task_events"
            " WHERE task_type = 'bulk' AND to_status = 'PROCESSING'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    wait_until(lambda: bulk_started() >= 30, 10, what="the batch run to get going")
    urgent = schedule(conn, "urgent", priority=9)
    wait_until(lambda: completed(conn, urgent), 5, what="the HIGH task")
    urgent_lateness, urgent_started = run_of(conn, urgent)
    assert urgent_lateness < 0.5

    ids = [r[0] for r in conn.execute("SELECT id FROM pgsched.tasks WHERE task_type = 'bulk'")]
    wait_until(lambda: completed(conn, *ids), 15, what="the whole batch")
    starts = sorted(
        r[0]
        for r in conn.execute(
            "SELECT extract(epoch FROM occurred_at)::float8 FROM pgsched.task_events"
            " WHERE task_type = 'bulk' AND to_status = 'PROCESSING'"
        )
    )
    assert len(starts) == n
    # In any one second at most rate + burst starts (+3: the database stamps a claim a
    # little after the token bucket allowed it, and not always equally late).
    busiest = max(sum(1 for s in starts[i:] if s < t + 1.0) for i, t in enumerate(starts))
    assert busiest <= rate + burst + 3, f"{busiest} BATCH starts within one second"
    span = starts[-1] - starts[0]
    assert span >= (n - burst) / rate - 0.5, f"{n} starts in {span:.2f}s"
    # ... and not throttled into a crawl either.
    assert span < n / rate * 1.6
    # The HIGH task ran in the middle of the batch run, not after it.
    assert sum(1 for s in starts if s > urgent_started) >= 10
