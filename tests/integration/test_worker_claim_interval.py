"""Work coming due steadily is claimed in batches, not a claim per due time: after a claim
that found some due work but less than it asked for, the next claim waits --claim-interval,
gathering what comes due meanwhile. Before, each such claim was followed by a next-due
query and a wake-up at the very next due time, so a stream of tasks due 10 ms apart cost
about one claim per task (and, when a row came due during the claim, a backoff that only a
full claim reset).

Claims are counted by Postgres itself (`track_functions`: calls of task_claim_many)."""

from __future__ import annotations

import signal
from datetime import timedelta

import psycopg

from tests.support.worker_helpers import (
    Workers,
    count_function_calls,
    db_now,
    function_calls,
    listener_backends,
    wait_until,
)

STREAM = 300
SPACING = 0.01  # a task due every 10 ms: a 3 s stream
INTERVAL = 0.25


def test_a_steady_stream_is_claimed_in_batches_of_claim_interval(
    conn: psycopg.Connection, workers: Workers
) -> None:
    count_function_calls(conn)
    w = workers.start("W1", poll=60, extra=["--claim-interval", str(INTERVAL)])
    w.wait_running()
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    first_due = db_now(conn) + timedelta(seconds=2)
    run_ats = [first_due + timedelta(seconds=i * SPACING) for i in range(STREAM)]
    row = conn.execute(
        "SELECT min(task_id), max(task_id) FROM pgsched.schedule_tasks("
        "task_types => %s::text[], run_ats => %s::timestamptz[])",
        (["quick"] * STREAM, run_ats),
    ).fetchone()
    assert row is not None
    lo, hi = row
    wait_until(lambda: function_calls(conn, "task_claim_many") > 0, 10, what="a first claim")
    before = function_calls(conn, "task_claim_many")

    def all_completed() -> bool:
        done = conn.execute(
            "SELECT count(*) FROM pgsched.tasks WHERE id BETWEEN %s AND %s"
            " AND status = 'COMPLETED'",
            (lo, hi),
        ).fetchone()
        return done is not None and done[0] == STREAM

    wait_until(all_completed, 60, what="every task of the stream to complete")
    w.send(signal.SIGTERM)
    assert w.wait_exit(30) == 0
    claims = function_calls(conn, "task_claim_many") - before
    # One claim per due time would be ~300. A claim every 0.25 s over the 3 s stream is ~12;
    # an empty claim between two (the stream's start, and a claim that came just too
    # early) at most doubles that. The bound leaves room for a slow machine, not for 300.
    assert claims <= 60, f"{claims} claims for a stream of {STREAM} tasks due {SPACING}s apart"
    late = conn.execute(
        "SELECT min(extract(EPOCH FROM lateness))::float8 FROM pgsched.task_runs"
        " WHERE task_id BETWEEN %s AND %s",
        (lo, hi),
    ).fetchone()
    assert late is not None and late[0] is not None
    # Every task was claimed, none before its due time (the lateness bound is a benchmark's).
    assert late[0] >= 0
