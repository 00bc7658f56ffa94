"""Graceful shutdown: SIGTERM stops claiming, lets running tasks finish within --grace,
releases the rest (back to QUEUED, the attempt given back, recorded) and exits 0; a second
signal exits at once with a non-zero status."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psycopg

from pgsched.worker.lane_engine import FINAL_FLUSH_MIN_SECONDS
from pgsched.worker.worker import EXIT_OUTCOMES_UNWRITTEN
from tests.support.chaos_harness import cluster
from tests.support.worker_helpers import (
    Workers,
    create_test_tables,
    events,
    running_workers,
    schedule,
    statuses,
    steps,
    task,
    transitions,
    wait_until,
)


def wait_started(conn: psycopg.Connection, task_id: int) -> None:
    wait_until(lambda: steps(conn, task_id), 15, what=f"task {task_id} to start")


def test_sigterm_lets_a_running_task_finish_within_grace(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "sleepy", '{"seconds": 1.5}')
    w = workers.start("W1", grace=10)
    wait_started(conn, task_id)
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0
    assert statuses(conn, [task_id]) == {task_id: "COMPLETED"}
    assert [s["step"] for s in steps(conn, task_id)] == ["start", "end"]
    assert task(conn, task_id)["attempts"] == 1
    assert "signal received" in w.log()
    assert "worker W1 stopped" in w.log()


def test_sigterm_releases_what_outlives_the_grace(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "sleepy", '{"seconds": 30}')
    w = workers.start("W1", grace=1)
    wait_started(conn, task_id)
    signalled = time.monotonic()
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0
    took = time.monotonic() - signalled
    assert took < 1 + 2.5, f"exit took {took:.1f}s with --grace 1"

    row = task(conn, task_id)
    assert row["status"] == "QUEUED"
    assert row["attempts"] == 0  # the attempt was given back
    assert row["lease_token"] is None
    assert transitions(conn, task_id) == [("QUEUED", "PROCESSING"), ("PROCESSING", "QUEUED")]
    released = events(conn, task_id)[-1]
    assert "released" in released["detail"] and "shutdown" in released["detail"]
    assert "W1" in released["detail"]
    assert [s["step"] for s in steps(conn, task_id)] == ["start"]  # cancelled, never ended


def test_sigterm_with_a_plain_function_still_exits_after_grace(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """A plain-def handler's thread cannot be interrupted; the worker releases its task
    and exits anyway instead of waiting for the thread at interpreter exit."""
    task_id = schedule(conn, "sleepy_sync", '{"seconds": 20}')
    w = workers.start("W1", grace=1)
    wait_started(conn, task_id)
    w.send(signal.SIGTERM)
    # Released at once (the row is right) ...
    wait_until(lambda: task(conn, task_id)["status"] == "QUEUED", 5, what="the release")
    assert task(conn, task_id)["attempts"] == 0
    # ... but the process must be gone too.
    assert w.wait_exit(4) == 0


def test_second_signal_exits_at_once(conn: psycopg.Connection, workers: Workers) -> None:
    task_id = schedule(conn, "sleepy", '{"seconds": 30}')
    w = workers.start("W1", grace=30)
    wait_started(conn, task_id)
    w.send(signal.SIGTERM)
    w.wait_log("signal received", 5)
    assert w.alive()  # waiting out its grace for the running task
    signalled = time.monotonic()
    w.send(signal.SIGTERM)
    code = w.wait_exit(3)
    assert code != 0, "the second signal must not look like a clean shutdown"
    assert time.monotonic() - signalled < 2
    assert "second signal" in w.log()
    # Nothing was released: the lease is left to expire and be rescued.
    row = task(conn, task_id)
    assert (row["status"], row["attempts"]) == ("PROCESSING", 1)


def test_a_worker_stopped_while_postgres_is_down_exits_and_loses_nothing(tmp_path: Path) -> None:
    """The final flush retried for good while the database did not answer: a worker asked
    to stop then never exited. It gives up writing after its grace period (5 s at the
    least), names in one ERROR line the tasks whose outcomes it could not write, and exits
    with status 4; once Postgres is back their leases have expired and the tasks run again.
    Its own server: this test stops it."""
    grace = 2.0
    with cluster() as pg:
        dbname = pg.new_database()
        with pg.connect(dbname) as conn:
            create_test_tables(conn)
            # Three end within the grace (their outcomes are failures: the handler cannot
            # record its end), one outlives it (released); all run quickly the next time.
            finishing = [
                schedule(conn, "sleepy", '{"seconds": 1, "sleep_on": [1]}', max_attempts=5)
                for _ in range(3)
            ]
            outliving = schedule(conn, "sleepy", '{"seconds": 60, "sleep_on": [1]}', max_attempts=5)
            task_ids = [*finishing, outliving]
            env = {**os.environ, "PGSCHED_DSN": pg.dsn(dbname)}
            with running_workers(env, tmp_path) as workers:
                w = workers.start("W1", lease=2.0, grace=grace)
                wait_until(
                    lambda: all(steps(conn, t) for t in task_ids), 20, what="every task to start"
                )
                conn.close()
                pg.stop_server()
                signalled = time.monotonic()
                w.send(signal.SIGTERM)
                exit_status = w.wait_exit(60)
                took = time.monotonic() - signalled
                log = w.log()
                pg.start_server()

                assert exit_status == EXIT_OUTCOMES_UNWRITTEN, log
                # The drain's grace, the flush's bound, and a few seconds for the rest of
                # the shutdown (a claim cut short is waited for up to 5 s).
                bound = grace + max(grace, FINAL_FLUSH_MIN_SECONDS) + 10
                assert took < bound, f"exit took {took:.1f}s, over {bound:.0f}s\n{log}"
                unwritten = [
                    line for line in log.splitlines() if "ERROR" in line and "not written" in line
                ]
                assert len(unwritten) == 1, log
                named = re.search(r"tasks ([0-9,]+)$", unwritten[0])
                assert named is not None, unwritten[0]
                assert sorted(int(t) for t in named.group(1).split(",")) == sorted(task_ids)

                with pg.connect(dbname) as conn:
                    # Not lost: still PROCESSING, their outcomes unwritten.
                    assert set(statuses(conn, task_ids).values()) == {"PROCESSING"}
                    workers.start("W2", lease=2.0, grace=grace)
                    wait_until(
                        lambda: set(statuses(conn, task_ids).values()) == {"COMPLETED"},
                        60,
                        what="the rescued tasks to complete",
                    )
