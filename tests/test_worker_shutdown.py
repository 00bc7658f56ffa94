"""Graceful shutdown: SIGTERM stops claiming, lets running tasks finish within --grace,
releases the rest (back to QUEUED, the attempt given back, recorded) and exits 0; a second
signal exits at once with a non-zero status."""

from __future__ import annotations

import signal
import time

import psycopg
from worker_helpers import (
    Workers,
    events,
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
