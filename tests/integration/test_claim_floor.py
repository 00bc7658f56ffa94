"""The claim floor (sql/code/claim.sql, 0046; pgsched/worker/claim_floor.py) never hides a
queued row for long: rows queued behind a worker's floor, by an explicit past run_at or a
lease rescue, start within a couple of seconds, with the backup poll far away. And the SQL
side: a floor hides exactly the rows due before it, NULL is the claim as before, and task
limits make it ignored."""

from __future__ import annotations

import re
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

CLAIM = "SELECT id FROM pgsched.task_claim_many('NORMAL', 10, 'w-sql', '1 minute', NULL, %s)"
BOUNDED = re.compile(r"claimed \d+, reading from \d{4}-")


def started_after(conn: psycopg.Connection, task_id: int, since: float) -> float:
    row = conn.execute(
        "SELECT extract(epoch FROM started_at)::float8 FROM pgsched.task_runs"
        " WHERE task_id = %s ORDER BY attempt LIMIT 1",
        (task_id,),
    ).fetchone()
    assert row is not None, f"task {task_id} never started"
    return float(row[0]) - since


def db_epoch(conn: psycopg.Connection) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def floor_in_use(conn: psycopg.Connection, workers: Workers) -> object:
    """A worker (backup poll 30 s) whose claims read from a floor: a few tasks due now ran
    in short claims, and its log shows a claim with a floor."""
    w = workers.start("W1", poll=30, extra=["--log-level", "DEBUG"])
    w.wait_running()
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    ids = [schedule(conn, "quick") for _ in range(3)]
    wait_until(
        lambda: set(statuses(conn, ids).values()) == {"COMPLETED"}, 10, what="the warm-up tasks"
    )
    # One more claim, which reads from the floor the warm-up's short claims set.
    last = schedule(conn, "quick")
    wait_until(lambda: statuses(conn, [last])[last] == "COMPLETED", 10, what="the last warm-up")
    wait_until(lambda: BOUNDED.search(w.log()), 10, what="a claim from a floor")
    return w


def test_a_task_scheduled_an_hour_in_the_past_starts_at_once(
    conn: psycopg.Connection, workers: Workers
) -> None:
    floor_in_use(conn, workers)
    since = db_epoch(conn)
    late = schedule(conn, "quick", run_at=db_now(conn) - timedelta(hours=1))
    wait_until(lambda: statuses(conn, [late])[late] == "COMPLETED", 10, what="the past task")
    assert started_after(conn, late, since) < 2.0


def test_a_rescued_lease_behind_the_floor_starts_at_once(
    conn: psycopg.Connection, workers: Workers
) -> None:
    # Claimed by a worker that is gone, its due time an hour back: rescued after the
    # running worker's floor passed it.
    ghost = schedule(conn, "quick", run_at=db_now(conn) - timedelta(hours=1))
    taken = conn.execute(
        "SELECT id FROM pgsched.task_claim_many('NORMAL', 10, 'w-gone', '1 second')"
    ).fetchall()
    assert taken == [(ghost,)]
    floor_in_use(conn, workers)
    wait_until(
        lambda: (
            conn.execute(
                "SELECT lease_expires_at < clock_timestamp() FROM pgsched.tasks WHERE id = %s",
                (ghost,),
            ).fetchone()
            == (True,)
        ),
        10,
        what="the ghost's lease to expire",
    )
    since = db_epoch(conn)
    conn.execute("SELECT pgsched.lease_rescue_expired('NORMAL')")
    wait_until(lambda: statuses(conn, [ghost])[ghost] == "COMPLETED", 10, what="the rescued task")
    assert started_after(conn, ghost, since) < 2.0


def test_the_floor_hides_the_rows_due_before_it_and_null_is_no_floor(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    old = schedule(conn, "quick", run_at=now - timedelta(minutes=10))
    new = schedule(conn, "quick", run_at=now - timedelta(seconds=1))
    with conn.transaction(force_rollback=True):
        got = conn.execute(CLAIM, (now - timedelta(minutes=5),)).fetchall()
        assert got == [(new,)]
        due = conn.execute(
            "SELECT next_due FROM pgsched.lane_next_due('NORMAL', %s)",
            (now - timedelta(minutes=5),),
        ).fetchone()
        assert due is not None and due[0] is None  # the older row is behind the floor
    with conn.transaction(force_rollback=True):
        assert sorted(conn.execute(CLAIM, (None,)).fetchall()) == sorted([(old,), (new,)])
    with conn.transaction(force_rollback=True):
        # Rows a limit holds back stay QUEUED behind any floor: with limits, none is used.
        conn.execute(
            "INSERT INTO pgsched.task_limits (scope, key, max_processing)"
            " VALUES ('task_type', 'other', 1)"
        )
        assert sorted(conn.execute(CLAIM, (now,)).fetchall()) == sorted([(old,), (new,)])
