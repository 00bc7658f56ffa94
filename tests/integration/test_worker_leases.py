"""Leases: a worker killed with SIGKILL loses its tasks to another worker once the lease
expires; a live worker's heartbeats keep a task that runs longer than the lease, even when
the handler hogs the event loop, so no task ever runs twice at once."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

from tests.support.worker_helpers import (
    Workers,
    db_now,
    events,
    schedule,
    statuses,
    steps,
    task,
    transitions,
    wait_until,
)

LEASE = 2.0


def test_sigkilled_workers_tasks_are_rescued_by_another_worker(
    conn: psycopg.Connection, workers: Workers
) -> None:
    # Sleeps 30 s on its first attempt only: the second attempt finishes at once.
    again = schedule(conn, "sleepy", '{"seconds": 30, "sleep_on": [1]}', max_attempts=3)
    # Its only attempt is the one that dies with the worker.
    last_chance = schedule(conn, "sleepy", '{"seconds": 30}', max_attempts=1)
    ids = [again, last_chance]

    a = workers.start("A", lease=LEASE)
    wait_until(lambda: {s["task_id"] for s in _starts(conn)} == set(ids), 20, what="A running both")
    assert {task(conn, i)["locked_by"] for i in ids} == {"A"}
    b = workers.start("B", lease=LEASE)
    b.wait_running()
    a.send(signal.SIGKILL)
    assert a.wait_exit(5) == -signal.SIGKILL
    killed_at = db_now(conn)

    # B's rescue loop (every 5 s) finds the expired leases.
    wait_until(
        lambda: statuses(conn, ids) == {again: "COMPLETED", last_chance: "FAILED"},
        20,
        what="B to rescue and finish A's tasks",
    )

    story = events(conn, again)
    assert [(e["from_status"], e["to_status"], e["worker"], e["attempt"]) for e in story] == [
        ("QUEUED", "PROCESSING", "A", 1),
        ("PROCESSING", "QUEUED", "A", 1),
        ("QUEUED", "PROCESSING", "B", 2),
        ("PROCESSING", "COMPLETED", "B", 2),
    ]
    rescue = story[1]
    assert "worker lost" in rescue["detail"]
    assert rescue["occurred_at"] > killed_at  # after the kill, once the lease had expired
    assert [(s["worker"], s["step"], s["attempt"]) for s in steps(conn, again)] == [
        ("A", "start", 1),
        ("B", "start", 2),
        ("B", "end", 2),
    ]

    lost = task(conn, last_chance)
    assert lost["attempts"] == 1
    assert lost["last_error"] == "worker lost"
    assert "worker lost" in lost["status_reason"]
    assert "attempts exhausted (1 of 1)" in lost["status_reason"]
    assert transitions(conn, last_chance) == [("QUEUED", "PROCESSING"), ("PROCESSING", "FAILED")]
    assert "worker lost" in events(conn, last_chance)[-1]["detail"]
    assert conn.execute("SELECT id FROM pgsched.lane_dead").fetchall() == [(last_chance,)]
    # Never run by B: only A's (killed) start is on record.
    assert [s["worker"] for s in steps(conn, last_chance)] == ["A"]
    assert re.search(r"lane NORMAL: rescued \d tasks whose worker was lost", b.log())


def _starts(conn: psycopg.Connection) -> list[dict[str, object]]:
    rows = conn.execute(
        "SELECT task_id, worker FROM public.worker_test_log WHERE step = 'start'"
    ).fetchall()
    return [{"task_id": r[0], "worker": r[1]} for r in rows]


@pytest.mark.parametrize("task_type", ["sleepy", "hog"])
def test_heartbeats_keep_a_task_longer_than_its_lease(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    """7 s of work on a 2 s lease, with a second worker whose rescue loop (every 5 s) would
    requeue the task if the lease were ever let expire. `hog` never yields to the event
    loop: only a heartbeat that runs in its own thread keeps its lease."""
    for worker_id in ("A", "B"):
        workers.start(worker_id, lease=LEASE)
    for w in workers.started:
        w.wait_running()
    task_id = schedule(conn, task_type, '{"seconds": 7}', max_attempts=3)
    started = wait_until(lambda: steps(conn, task_id), 10, what="the task to start")
    runner = started[0]["worker"]

    # Mid-run, past two lease lengths: the lease was renewed, not let run out.
    wait_until(
        lambda: (db_now(conn) - started[0]["at"]).total_seconds() > 2 * LEASE + 0.5,
        10,
        what="two lease lengths",
    )
    row = task(conn, task_id)
    assert row["status"] == "PROCESSING"
    assert row["locked_by"] == runner
    assert row["lease_expires_at"] > db_now(conn)
    assert (row["lease_expires_at"] - row["last_run_at"]).total_seconds() > 2 * LEASE

    wait_until(lambda: status_is(conn, task_id, "COMPLETED"), 15, what="completion")
    logged = steps(conn, task_id)
    assert [(s["step"], s["worker"], s["attempt"]) for s in logged] == [
        ("start", runner, 1),
        ("end", runner, 1),
    ]
    assert (logged[1]["at"] - logged[0]["at"]).total_seconds() >= 7
    # One claim, one completion, nothing rescued, no stale report.
    assert [(e["from_status"], e["to_status"], e["worker"]) for e in events(conn, task_id)] == [
        ("QUEUED", "PROCESSING", runner),
        ("PROCESSING", "COMPLETED", runner),
    ]
    assert task(conn, task_id)["attempts"] == 1
    for w in workers.started:
        assert "rescued" not in w.log()
        assert "lease lost" not in w.log()


def test_heartbeat_survives_a_concurrent_completion(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection], workers: Workers
) -> None:
    """A heartbeat that meets a task being finished (exactly what the worker's own outcome
    buffer does while the task is still held) must still renew the other leases."""
    w = workers.start("A", lease=LEASE)
    keep = schedule(conn, "sleepy", '{"seconds": 8}')
    finishing = schedule(conn, "sleepy", '{"seconds": 8}')
    wait_until(lambda: len(_starts(conn)) == 2, 15, what="both tasks running")

    # The completion of `finishing`, as task_finish_many writes it, held open for a moment.
    finisher = connect(autocommit=False)
    token = task(conn, finishing)["lease_token"]
    applied = finisher.execute(
        "SELECT applied FROM pgsched.task_finish_many("
        "  ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], ARRAY['COMPLETED'])",
        (finishing, token),
    ).fetchone()
    assert applied == (True,)
    locked_at = db_now(conn)

    def heartbeat_met_the_row() -> bool:
        waiting = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%%task_heartbeat_many%%'"
        ).fetchone()
        # Waiting for the row (as now), or done without waiting (a heartbeat that skips it).
        renewed = task(conn, keep)["lease_expires_at"] > locked_at + timedelta(seconds=LEASE)
        return waiting == (1,) or renewed

    wait_until(heartbeat_met_the_row, 5, what="a heartbeat to meet the row being finished")
    finisher.commit()
    committed = db_now(conn)

    # The other lease is renewed (by this heartbeat or the next) ...
    wait_until(
        lambda: task(conn, keep)["lease_expires_at"] > committed + timedelta(seconds=LEASE - 0.5),
        2 * LEASE,
        what="the lease of the task still running to be renewed",
    )
    # ... and no heartbeat failed on the way.
    assert "heartbeat failed" not in w.log()


def status_is(conn: psycopg.Connection, task_id: int, wanted: str) -> bool:
    return statuses(conn, [task_id]) == {task_id: wanted}
