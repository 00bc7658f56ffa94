"""Handler faults stay inside their task and their lane: hung plain handlers kept in
threads (isolation='thread') in LOW cannot take HIGH's threads (each lane has its own pool;
a timed-out handler's stuck thread is counted, and past --max-stuck-threads the worker
drains and exits 3); an async handler that
blocks the event loop is named by the stall watchdog; SystemExit, KeyboardInterrupt and
GeneratorExit raised by a handler fail the attempt and the worker runs on."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta

import psycopg
import pytest

from tests.support.worker_helpers import (
    Workers,
    db_now,
    events,
    schedule,
    statuses,
    task,
    wait_until,
)

APP = "tests.apps.isolation:app"


def lateness_s(conn: psycopg.Connection, ids: list[int]) -> list[float]:
    """Seconds from due to start of each task's runs (pgsched.task_runs)."""
    rows = conn.execute(
        "SELECT extract(epoch FROM lateness)::float8 FROM pgsched.task_runs"
        " WHERE task_id = ANY(%s)",
        (ids,),
    ).fetchall()
    return [row[0] for row in rows]


def count_status(conn: psycopg.Connection, ids: list[int], wanted: str) -> int:
    return sum(1 for s in statuses(conn, ids).values() if s == wanted)


def test_high_keeps_its_threads_and_its_times_while_low_is_full_of_hung_handlers(
    conn: psycopg.Connection, workers: Workers
) -> None:
    concurrency = 8
    w = workers.start(
        "W1",
        app=APP,
        lanes="high,low",
        lease=5,
        extra=["--concurrency", str(concurrency), "--max-stuck-threads", "100"],
    )
    w.wait_running()
    # Five times LOW's concurrency of handlers that hang 60 s past a 1 s timeout.
    hung = [
        schedule(conn, "hung_sync_thread", '{"seconds": 60}', priority=1, max_attempts=1)
        for _ in range(5 * concurrency)
    ]
    wait_until(
        lambda: count_status(conn, hung, "FAILED") >= concurrency,
        15,
        what="the first round of hung LOW handlers to time out",
    )
    # Long enough for a second round to time out too, had LOW threads to run one: with one
    # pool for both lanes (2 x 8 threads), every thread is then held by a hung handler.
    time.sleep(2.5)

    now = db_now(conn)
    urgent = [
        schedule(
            conn,
            "quick_sync",
            priority=9,
            run_at=now + timedelta(seconds=1 + i * 0.1),
        )
        for i in range(40)
    ]
    wait_until(
        lambda: count_status(conn, urgent, "COMPLETED") == len(urgent),
        20,
        what="every HIGH task to complete while LOW is hung",
    )
    lateness = lateness_s(conn, urgent)
    assert len(lateness) == len(urgent)
    assert max(lateness) < 0.5, f"HIGH was late by up to {max(lateness):.3f}s"

    # Each timed-out attempt failed at once (outcome written, not after the thread ended),
    # and a log line names the task and its stuck thread.
    failed = [i for i in hung if statuses(conn, [i])[i] == "FAILED"]
    for task_id in failed:
        story = events(conn, task_id)
        started, ended = story[0]["occurred_at"], story[-1]["occurred_at"]
        assert story[-1]["to_status"] == "FAILED"
        assert (ended - started).total_seconds() < 3, story
        assert task(conn, task_id)["last_error"] == "timed out after 1.0s"
        assert (
            f"task {task_id} (type hung_sync_thread, lane LOW, attempt 1): attempt failed"
            in w.log()
        )
        assert re.search(
            rf"task {task_id} \(type hung_sync_thread, lane LOW, attempt 1\): its attempt is over, "
            r"but thread pgsched-low_\d+ still runs its handler",
            w.log(),
        )
    # LOW's threads are all stuck: it stops claiming instead of failing tasks it has no
    # thread for.
    assert len(failed) == concurrency
    assert f"stuck threads: {concurrency} in lane LOW, {concurrency} in this worker" in w.log()
    assert w.alive()


def test_too_many_stuck_threads_drain_and_exit_non_zero(
    conn: psycopg.Connection, workers: Workers
) -> None:
    w = workers.start(
        "W1", app=APP, lanes="low", extra=["--concurrency", "4", "--max-stuck-threads", "2"]
    )
    w.wait_running()
    hung = [
        schedule(conn, "hung_sync_thread", '{"seconds": 60}', priority=1, max_attempts=1)
        for _ in range(4)
    ]
    assert w.wait_exit(20) == 3
    assert "more than --max-stuck-threads 2: draining and exiting with status 3" in w.log()
    assert "worker W1 stopped" in w.log()
    # Every timed-out attempt was written before the worker left.
    assert set(statuses(conn, hung).values()) == {"FAILED"}


def test_the_watchdog_names_the_task_that_blocks_the_event_loop(
    conn: psycopg.Connection, workers: Workers
) -> None:
    w = workers.start("W1", app=APP, lanes="normal", extra=["--stall-threshold", "0.3"])
    w.wait_running()
    blocker = schedule(conn, "blocks_loop", '{"seconds": 1.5}')
    wait_until(lambda: statuses(conn, [blocker])[blocker] == "COMPLETED", 15, what="the blocker")
    w.wait_log("event loop ran again", 5)
    assert re.search(
        rf"event loop blocked for \d+ ms \(threshold 300 ms\) by task {blocker} "
        r"\(type blocks_loop, lane NORMAL, attempt 1\)",
        w.log(),
    ), w.log()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_base_exceptions_from_a_handler_fail_the_attempt_and_the_worker_runs_on(
    conn: psycopg.Connection, workers: Workers, kind: str
) -> None:
    w = workers.start("W1", app=APP, lanes="normal")
    w.wait_running()
    names = ["SystemExit", "KeyboardInterrupt", "GeneratorExit"]
    ids = {
        name: schedule(conn, f"raises_base_{kind}", f'{{"raise": "{name}"}}', max_attempts=2)
        for name in names
    }
    wait_until(
        lambda: set(statuses(conn, list(ids.values())).values()) == {"FAILED"},
        20,
        what="each attempt to fail and be retried until exhausted",
    )
    for name, task_id in ids.items():
        row = task(conn, task_id)
        assert row["attempts"] == 2  # retried per policy, then DEAD
        assert row["last_error"].startswith(f"{name}:"), row["last_error"]
        assert re.search(
            rf"task {task_id} \(type raises_base_{kind}, lane NORMAL, attempt 1\): "
            rf"attempt failed: {name}\(",
            w.log(),
        ), w.log()
    # Still running, still working.
    after = schedule(conn, "quick_async")
    wait_until(lambda: statuses(conn, [after])[after] == "COMPLETED", 10, what="a later task")
    assert w.alive()
    # A real signal still stops it, cleanly.
    w.send(signal.SIGINT)
    assert w.wait_exit(15) == 0
    assert "signal received" in w.log()


def test_a_blocked_lane_keeps_its_leases_and_the_other_lane_runs_on(
    conn: psycopg.Connection, workers: Workers
) -> None:
    # LOW's loop blocked 4 s, twice the 2 s lease: only the heartbeat thread, which runs
    # beside every lane's loop, keeps the blocking task from being rescued meanwhile.
    w = workers.start("W1", app=APP, lanes="high,low", lease=2, extra=["--stall-threshold", "0.5"])
    w.wait_running()
    blocker = schedule(conn, "blocks_loop", '{"seconds": 4}', priority=1)
    wait_until(
        lambda: statuses(conn, [blocker])[blocker] == "PROCESSING", 10, what="the blocker to run"
    )
    time.sleep(0.5)
    now = db_now(conn)
    urgent = [
        schedule(conn, "quick_async", priority=9, run_at=now + timedelta(seconds=0.2 * i))
        for i in range(10)
    ]
    wait_until(
        lambda: set(statuses(conn, urgent).values()) == {"COMPLETED"},
        10,
        what="HIGH's tasks to run while LOW is blocked",
    )
    # HIGH ran while LOW was still blocked, on time.
    assert statuses(conn, [blocker])[blocker] == "PROCESSING"
    lateness = lateness_s(conn, urgent)
    assert max(lateness) < 0.5, lateness
    wait_until(lambda: statuses(conn, [blocker])[blocker] == "COMPLETED", 15, what="the blocker")
    # One attempt: its lease was renewed all along, never rescued nor lost.
    assert task(conn, blocker)["attempts"] == 1
    assert "lease lost" not in w.log() and "rescued" not in w.log()
    assert re.search(rf"event loop blocked for \d+ ms .* by task {blocker} ", w.log()), w.log()
    after = schedule(conn, "quick_async", priority=1)
    wait_until(lambda: statuses(conn, [after])[after] == "COMPLETED", 10, what="LOW again")
