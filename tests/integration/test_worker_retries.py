"""Failed attempts: retries with exponential backoff, then the DEAD lane, and the
`pgsched dead` commands that bring tasks back or discard them."""

from __future__ import annotations

import itertools
import signal

import psycopg
import pytest

from tests.support.worker_helpers import (
    Workers,
    events,
    listener_backends,
    run_cli,
    run_cli_together,
    schedule,
    statuses,
    steps,
    task,
    transitions,
    wait_until,
)

HEADER = ["ID", "TENANT_ID", "TASK_TYPE", "ATTEMPTS", "FAILED_AT", "HOLDING_BACK", "LAST_ERROR"]

# tests/apps/dispatch.py: always_fails retries after exactly 0.4 s, then 1.0 s (no jitter).
DELAYS = (0.4, 1.0)

RETRY_STORY = [
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "FAILED"),
]


def attempt_starts(conn: psycopg.Connection, task_id: int) -> list[float]:
    """Epoch seconds of each QUEUED -> PROCESSING of the task."""
    return [
        e["occurred_at"].timestamp()
        for e in events(conn, task_id)
        if e["to_status"] == "PROCESSING"
    ]


def test_retries_back_off_then_dead(conn: psycopg.Connection, workers: Workers) -> None:
    task_id = schedule(conn, "always_fails", max_attempts=3)
    # A short backup poll, so the waits measured are the backoff's (see the test below).
    workers.start("W1", poll=0.1).wait_running()
    wait_until(lambda: statuses(conn, [task_id]) == {task_id: "FAILED"}, 15, what="DEAD")

    row = task(conn, task_id)
    assert row["attempts"] == 3
    assert transitions(conn, task_id) == RETRY_STORY
    story = events(conn, task_id)
    assert [e["attempt"] for e in story] == [1, 1, 2, 2, 3, 3]

    # Each requeue names the error and is due exactly the policy's delay later.
    for event, delay in zip((story[1], story[3]), DELAYS, strict=True):
        assert "RuntimeError: upstream said no" in event["detail"]
        waited = (event["scheduled_for"] - event["occurred_at"]).total_seconds()
        assert waited == pytest.approx(delay, abs=0.01)
    assert story[-1]["detail"].startswith("attempts exhausted (3 of 3): RuntimeError")

    # The attempts really were that far apart, and the second wait was the longer.
    starts = attempt_starts(conn, task_id)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 2
    assert gaps[0] >= DELAYS[0]
    assert gaps[1] >= DELAYS[1]
    assert gaps[1] > 1.5 * gaps[0], gaps
    assert gaps[1] < DELAYS[1] + 0.6, gaps

    # last_error: the error of the last attempt and a traceback summary.
    last_error = row["last_error"]
    assert last_error.startswith("RuntimeError: upstream said no (attempt 3)")
    assert 'dispatch.py", line' in last_error and "in always_fails" in last_error
    assert conn.execute("SELECT id FROM pgsched.lane_dead").fetchall() == [(task_id,)]
    assert [s["attempt"] for s in steps(conn, task_id)] == [1, 2, 3]


def test_retry_runs_when_due_not_at_the_next_backup_poll(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """A requeued retry wakes its lane: it starts when due, not at the next backup poll."""
    w = workers.start("W1", poll=10)
    w.wait_running()
    # Scheduled once the worker listens and idles, so its start-up wake-ups are over.
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    task_id = schedule(conn, "fails_slowly", max_attempts=2)
    wait_until(
        lambda: ("PROCESSING", "QUEUED") in transitions(conn, task_id), 10, what="1st failure"
    )
    # Due 0.4 s after the first failure; the 10 s backup poll (7.5 s at least after the
    # claim, so 6 s after the failure) must not be what starts it.
    wait_until(
        lambda: len(attempt_starts(conn, task_id)) == 2,
        DELAYS[0] + 1.0,
        what="the second attempt, due 0.4 s after the first failed",
    )


def test_dead_lane_commands(
    conn: psycopg.Connection, workers: Workers, db_env: dict[str, str]
) -> None:
    ids = {
        "a1": schedule(conn, "heal_a", '{"n": 1}', max_attempts=1),
        "a2": schedule(conn, "heal_a", '{"n": 2}', max_attempts=1),
        "b1": schedule(conn, "heal_b", '{"n": 3}', max_attempts=1),
        "b2": schedule(conn, "heal_b", '{"n": 4}', max_attempts=1),
        "c1": schedule(conn, "heal_c", '{"n": 5}', max_attempts=1),
    }
    every = list(ids.values())
    first = workers.start("W1")
    first.wait_running()
    wait_until(lambda: set(statuses(conn, every).values()) == {"FAILED"}, 15, what="all five DEAD")
    first.send(signal.SIGTERM)
    assert first.wait_exit(10) == 0

    # dead list: every DEAD task, with the first line of its error.
    listed = run_cli(db_env, "dead", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == HEADER
    assert {int(line.split()[0]) for line in lines[1:]} == set(every)
    assert all("RuntimeError: the dependency is down" in line for line in lines[1:])

    conn.execute("INSERT INTO public.worker_test_flags VALUES ('healed')")

    # Three operators at once: retry one task by id, discard another, retry a whole type.
    by_id, discarded, by_type = run_cli_together(
        db_env,
        ["dead", "retry", str(ids["a1"])],
        ["dead", "discard", str(ids["c1"]), "--reason", "customer left"],
        ["dead", "retry", "--type", "heal_b"],
    )
    for out in (by_id, discarded, by_type):
        assert out.returncode == 0, out.stderr

    # dead retry ID: that task alone, attempts start over.
    assert by_id.stdout.strip() == f"retrying 1 task(s): {ids['a1']}"
    # dead retry --type T: every DEAD task of that type, and only those.
    assert by_type.stdout.startswith("retrying 2 task(s): ")
    assert {int(x) for x in by_type.stdout.split(":")[1].split()} == {ids["b1"], ids["b2"]}
    for key in ("a1", "b1", "b2"):
        row = task(conn, ids[key])
        assert (row["status"], row["attempts"]) == ("QUEUED", 0), key
        last = events(conn, ids[key])[-1]
        assert (last["from_status"], last["to_status"]) == ("FAILED", "QUEUED"), key
        assert last["detail"] == "retried from the DEAD lane", key
    assert task(conn, ids["a2"])["status"] == "FAILED"

    # dead discard ID: CANCELLED for good, with the reason.
    assert discarded.stdout.strip() == f"discarded {ids['c1']}"
    row = task(conn, ids["c1"])
    assert (row["status"], row["status_reason"]) == ("CANCELLED", "customer left")
    last = events(conn, ids["c1"])[-1]
    assert (last["from_status"], last["to_status"]) == ("FAILED", "CANCELLED")
    assert last["detail"] == "customer left"

    # dead retry --all: what is left (a2; c1 was discarded, and retrying it is refused).
    every_left, refused = run_cli_together(
        db_env, ["dead", "retry", "--all"], ["dead", "retry", str(ids["c1"])]
    )
    assert every_left.returncode == 0, every_left.stderr
    assert every_left.stdout.strip() == f"retrying 1 task(s): {ids['a2']}"
    assert refused.returncode == 1
    assert f"task {ids['c1']} is not in the DEAD lane" in refused.stderr
    assert task(conn, ids["c1"])["status"] == "CANCELLED"
    assert conn.execute("SELECT count(*) FROM pgsched.lane_dead").fetchone() == (0,)

    # A worker runs them again; this time they succeed.
    workers.start("W2").wait_running()
    retried = [ids[k] for k in ("a1", "a2", "b1", "b2")]
    wait_until(
        lambda: set(statuses(conn, retried).values()) == {"COMPLETED"}, 15, what="retried runs"
    )
    for key in ("a1", "a2", "b1", "b2"):
        task_id = ids[key]
        assert task(conn, task_id)["attempts"] == 1
        assert transitions(conn, task_id) == [
            ("QUEUED", "PROCESSING"),
            ("PROCESSING", "FAILED"),
            ("FAILED", "QUEUED"),
            ("QUEUED", "PROCESSING"),
            ("PROCESSING", "COMPLETED"),
        ]
        ran = steps(conn, task_id)
        assert [(s["worker"], s["detail"]) for s in ran] == [("W1", "broken"), ("W2", "healed")]
    assert statuses(conn, [ids["c1"]]) == {ids["c1"]: "CANCELLED"}
    assert [s["worker"] for s in steps(conn, ids["c1"])] == ["W1"]


def test_dead_list_of_an_empty_dead_lane(db_env: dict[str, str]) -> None:
    """An empty DEAD lane lists as a header alone (not a TypeError from render_table)."""
    out = run_cli(db_env, "dead", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == HEADER
