"""The state machine from plain SQL: cancels, transitions driven by hand-written UPDATEs,
partition moves, the event record, and the views people read it through."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors

AS_OF = datetime(2030, 3, 10, 8, 0, tzinfo=UTC)
STATUSES = ("PENDING", "QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED")
LEGAL = {
    ("PENDING", "QUEUED"),
    ("PENDING", "CANCELLED"),
    ("QUEUED", "PROCESSING"),
    ("QUEUED", "CANCELLED"),
    ("PROCESSING", "COMPLETED"),
    ("PROCESSING", "FAILED"),
    ("PROCESSING", "QUEUED"),
    ("PROCESSING", "PENDING"),
    ("FAILED", "QUEUED"),
    ("FAILED", "PENDING"),
    ("FAILED", "CANCELLED"),
}
PARTITION = {
    "PENDING": "pgsched.tasks_cold",
    "QUEUED": "pgsched.tasks_hot",
    "PROCESSING": "pgsched.tasks_hot",
    "COMPLETED": "pgsched.tasks_finished",
    "FAILED": "pgsched.tasks_done",
    "CANCELLED": "pgsched.tasks_finished",
}


def schedule(
    conn: psycopg.Connection,
    *,
    due_in: timedelta = timedelta(0),
    tenant: str = "default",
    task_type: str = "job",
    as_of: datetime = AS_OF,
) -> int:
    row = conn.execute(
        "SELECT pgsched.schedule_task(task_type => %s, run_at => %s, tenant_id => %s, as_of => %s)",
        (task_type, as_of + due_in, tenant, as_of),
    ).fetchone()
    assert row is not None
    return int(row[0])


def move(
    conn: psycopg.Connection,
    task_id: int,
    status: str,
    at: datetime,
    *,
    worker: str | None = None,
    reason: str | None = None,
) -> None:
    """A hand-written transition, as a worker in any language would write it."""
    if status == "PROCESSING":
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
            " locked_by = %s, lease_token = gen_random_uuid(),"
            " lease_expires_at = %s::timestamptz + interval '5 minutes',"
            " last_run_at = %s, updated_at = %s, status_reason = %s WHERE id = %s",
            (worker, at, at, at, reason, task_id),
        )
    else:
        conn.execute(
            "UPDATE pgsched.tasks SET status = %s, lease_token = NULL, lease_expires_at = NULL,"
            " updated_at = %s, status_reason = %s WHERE id = %s",
            (status, at, reason, task_id),
        )


def where(conn: psycopg.Connection, task_id: int) -> tuple[str, str]:
    """The task's status and tier: the partition of pgsched.tasks holding it (for finished
    tasks, tasks_finished, whichever of its periods the row is in)."""
    row = conn.execute(
        "SELECT t.status::text, coalesce("
        "  (SELECT i.inhparent::regclass::text FROM pg_inherits AS i"
        "    WHERE i.inhrelid = t.tableoid AND i.inhparent <> 'pgsched.tasks'::regclass),"
        "  t.tableoid::regclass::text)"
        " FROM pgsched.tasks AS t WHERE t.id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def events(conn: psycopg.Connection, task_id: int) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT from_status::text, to_status::text, attempt, worker, detail, occurred_at"
        " FROM pgsched.task_events WHERE task_id = %s ORDER BY id",
        (task_id,),
    ).fetchall()


def event_count(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM pgsched.task_events").fetchone()[0])


def at(minutes: int) -> datetime:
    return AS_OF + timedelta(minutes=minutes)


# --- cancel --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("due_in", "was"),
    [(timedelta(days=3), "PENDING"), (timedelta(hours=2), "QUEUED"), (timedelta(0), "QUEUED")],
)
def test_cancel_not_started(conn: psycopg.Connection, due_in: timedelta, was: str) -> None:
    task_id = schedule(conn, due_in=due_in)
    assert where(conn, task_id) == (was, PARTITION[was])
    cancelled_at = at(5)
    assert conn.execute(
        "SELECT pgsched.cancel_task(%s, 'customer left', %s)", (task_id, cancelled_at)
    ).fetchone() == (task_id,)
    assert where(conn, task_id) == ("CANCELLED", "pgsched.tasks_finished")
    # The reason with the actor: here the calling role, since none was named.
    role = conn.info.user
    reason = f"cancelled by {role}: customer left"
    assert conn.execute(
        "SELECT status_reason, updated_at FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone() == (reason, cancelled_at)
    assert events(conn, task_id) == [(was, "CANCELLED", 0, None, reason, cancelled_at)]


def test_cancel_default_reason(conn: psycopg.Connection) -> None:
    task_id = schedule(conn)
    conn.execute("SELECT pgsched.cancel_task(%s)", (task_id,))
    detail = f"cancelled by {conn.info.user}: cancelled"
    assert events(conn, task_id)[0][:5] == ("QUEUED", "CANCELLED", 0, None, detail)


def _snapshot(conn: psycopg.Connection, task_id: int) -> tuple[object, ...]:
    row = conn.execute(
        "SELECT t::text, tableoid::regclass::text FROM pgsched.tasks AS t WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return (*row, event_count(conn))


@pytest.mark.parametrize("status", ["CANCELLED", "COMPLETED", "FAILED"])
def test_cancel_refused_once_over(conn: psycopg.Connection, status: str) -> None:
    task_id = schedule(conn)
    if status == "CANCELLED":
        conn.execute("SELECT pgsched.cancel_task(%s, 'first')", (task_id,))
    else:
        move(conn, task_id, "PROCESSING", at(1), worker="w1")
        move(conn, task_id, status, at(2), reason="done")
    before = _snapshot(conn, task_id)
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        conn.execute("SELECT pgsched.cancel_task(%s, 'second')", (task_id,))
    message = str(caught.value)
    assert f"task {task_id} is {status} and cannot be cancelled: it has finished" in message
    assert _snapshot(conn, task_id) == before


def test_cancel_unknown_id(conn: psycopg.Connection) -> None:
    schedule(conn)
    before = event_count(conn)
    with pytest.raises(errors.NoDataFound, match=r"pgsched: no task with id 987654"):
        conn.execute("SELECT pgsched.cancel_task(987654)")
    assert event_count(conn) == before


# --- transitions ---------------------------------------------------------------------------


def test_lifecycle_is_recorded(conn: psycopg.Connection) -> None:
    task_id = schedule(conn, due_in=timedelta(days=2), tenant="acme")
    steps: list[tuple[str, str | None, str | None, str]] = [
        # (to, worker, reason, partition)
        ("QUEUED", None, "promoted", "pgsched.tasks_hot"),
        ("PROCESSING", "worker-a", None, "pgsched.tasks_hot"),
        ("QUEUED", None, "retry: timeout", "pgsched.tasks_hot"),
        ("PROCESSING", "worker-b", None, "pgsched.tasks_hot"),
        ("PENDING", None, "retry in 2 days", "pgsched.tasks_cold"),
        ("QUEUED", None, "promoted", "pgsched.tasks_hot"),
        ("PROCESSING", "worker-c", None, "pgsched.tasks_hot"),
        ("FAILED", None, "boom", "pgsched.tasks_done"),
        ("PENDING", None, "operator retry later", "pgsched.tasks_cold"),
        ("QUEUED", None, "promoted", "pgsched.tasks_hot"),
        ("PROCESSING", "worker-d", None, "pgsched.tasks_hot"),
        ("FAILED", None, "boom again", "pgsched.tasks_done"),
        ("QUEUED", None, "operator retry", "pgsched.tasks_hot"),
        ("PROCESSING", "worker-e", None, "pgsched.tasks_hot"),
        ("COMPLETED", None, "ok", "pgsched.tasks_finished"),
    ]
    expected = []
    status, attempts, worker_now = "PENDING", 0, None
    for minute, (to, worker, reason, partition) in enumerate(steps, start=1):
        move(conn, task_id, to, at(minute), worker=worker, reason=reason)
        if to == "PROCESSING":
            attempts += 1
            worker_now = worker
        assert where(conn, task_id) == (to, partition)
        expected.append((status, to, attempts, worker_now, reason, at(minute)))
        status = to
    assert events(conn, task_id) == expected
    # The id never changed as the row moved between partitions, and only one row exists.
    assert conn.execute("SELECT array_agg(id) FROM pgsched.tasks").fetchone() == ([task_id],)
    # Every event carries the task's tenant and type.
    assert conn.execute(
        "SELECT DISTINCT tenant_id, task_type FROM pgsched.task_events WHERE task_id = %s",
        (task_id,),
    ).fetchall() == [("acme", "job")]


def test_worker_recorded_when_lock_is_released(conn: psycopg.Connection) -> None:
    task_id = schedule(conn)
    move(conn, task_id, "PROCESSING", at(1), worker="worker-a")
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'COMPLETED', locked_by = NULL, lease_token = NULL,"
        " updated_at = %s WHERE id = %s",
        (at(2), task_id),
    )
    assert events(conn, task_id)[-1][:4] == ("PROCESSING", "COMPLETED", 1, "worker-a")


def test_forgotten_updated_at_still_gets_a_time(conn: psycopg.Connection) -> None:
    yesterday = datetime.now(UTC) - timedelta(days=1)
    task_id = schedule(conn, as_of=yesterday)  # created_at = updated_at = yesterday
    conn.execute("UPDATE pgsched.tasks SET status = 'CANCELLED' WHERE id = %s", (task_id,))
    occurred = events(conn, task_id)[0][5]
    assert isinstance(occurred, datetime)
    assert abs(occurred - datetime.now(UTC)) < timedelta(minutes=1), occurred


def _drive_to(conn: psycopg.Connection, status: str) -> int:
    if status == "PENDING":
        return schedule(conn, due_in=timedelta(days=2))
    task_id = schedule(conn)
    if status == "CANCELLED":
        conn.execute("SELECT pgsched.cancel_task(%s)", (task_id,))
    elif status != "QUEUED":
        move(conn, task_id, "PROCESSING", at(1), worker="w")
        if status != "PROCESSING":
            move(conn, task_id, status, at(2))
    assert where(conn, task_id)[0] == status
    return task_id


def test_every_transition_pair(conn: psycopg.Connection) -> None:
    """Exactly the legal transitions are allowed; anything else changes nothing."""
    results: dict[tuple[str, str], bool] = {}
    for source, target in itertools.permutations(STATUSES, 2):
        task_id = _drive_to(conn, source)
        before_events = event_count(conn)
        before = _snapshot(conn, task_id)
        try:
            move(conn, task_id, target, at(10), worker="w2", reason="probe")
        except errors.CheckViolation as exc:
            assert f"illegal transition {source} -> {target} for task {task_id}" in str(exc)
            assert _snapshot(conn, task_id) == before
            results[(source, target)] = False
        else:
            assert where(conn, task_id) == (target, PARTITION[target])
            assert event_count(conn) == before_events + 1
            assert events(conn, task_id)[-1][:2] == (source, target)
            results[(source, target)] = True
    assert {pair for pair, allowed in results.items() if allowed} == LEGAL


@pytest.mark.parametrize(
    ("source", "target"),
    [("PENDING", "COMPLETED"), ("COMPLETED", "QUEUED"), ("CANCELLED", "QUEUED")],
)
def test_illegal_transition_refused(conn: psycopg.Connection, source: str, target: str) -> None:
    task_id = _drive_to(conn, source)
    before = _snapshot(conn, task_id)
    with pytest.raises(errors.CheckViolation) as caught:
        conn.execute(
            "UPDATE pgsched.tasks SET status = %s, updated_at = %s WHERE id = %s",
            (target, at(30), task_id),
        )
    assert (
        f"pgsched: illegal transition {source} -> {target} for task {task_id}"
        == str(caught.value).splitlines()[0]
    )
    assert caught.value.diag.message_hint is not None
    assert _snapshot(conn, task_id) == before
    assert where(conn, task_id) == (source, PARTITION[source])


def test_one_illegal_row_refuses_the_whole_statement(conn: psycopg.Connection) -> None:
    pending = _drive_to(conn, "PENDING")
    queued = _drive_to(conn, "QUEUED")
    completed = _drive_to(conn, "COMPLETED")
    before = [_snapshot(conn, t) for t in (pending, queued, completed)]
    with pytest.raises(errors.CheckViolation, match=f"COMPLETED -> CANCELLED for task {completed}"):
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'CANCELLED' WHERE id = ANY(%s)",
            ([pending, queued, completed],),
        )
    assert [_snapshot(conn, t) for t in (pending, queued, completed)] == before


def test_set_based_claim_records_each_row(conn: psycopg.Connection) -> None:
    ids = [schedule(conn) for _ in range(5)]
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
        " locked_by = 'batch-worker', lease_token = gen_random_uuid(), updated_at = %s"
        " WHERE id = ANY(%s)",
        (at(1), ids),
    )
    assert conn.execute(
        "SELECT task_id, from_status::text, to_status::text, attempt, worker"
        " FROM pgsched.task_events ORDER BY task_id"
    ).fetchall() == [(i, "QUEUED", "PROCESSING", 1, "batch-worker") for i in sorted(ids)]


def test_update_without_status_change_records_nothing(conn: psycopg.Connection) -> None:
    task_id = schedule(conn, due_in=timedelta(hours=3))
    conn.execute(
        "UPDATE pgsched.tasks SET priority = 6, updated_at = %s WHERE id = %s", (at(1), task_id)
    )
    conn.execute("UPDATE pgsched.tasks SET status = status WHERE id = %s", (task_id,))
    assert event_count(conn) == 0
    assert where(conn, task_id) == ("QUEUED", "pgsched.tasks_hot")


def test_lease_only_while_processing(conn: psycopg.Connection) -> None:
    task_id = schedule(conn)
    with pytest.raises(errors.CheckViolation, match="tasks_lease_only_while_processing"):
        conn.execute(
            "UPDATE pgsched.tasks SET lease_token = gen_random_uuid() WHERE id = %s", (task_id,)
        )
    move(conn, task_id, "PROCESSING", at(1), worker="w")
    with pytest.raises(errors.CheckViolation, match="tasks_lease_only_while_processing"):
        conn.execute("UPDATE pgsched.tasks SET status = 'COMPLETED' WHERE id = %s", (task_id,))
    assert where(conn, task_id) == ("PROCESSING", "pgsched.tasks_hot")
    assert event_count(conn) == 1


# --- views ---------------------------------------------------------------------------------


def test_task_timeline_answers_what_happened(conn: psycopg.Connection) -> None:
    task_id = schedule(conn, due_in=timedelta(days=1), tenant="acme", task_type="send_invoice")
    other = schedule(conn, tenant="acme")
    move(conn, task_id, "QUEUED", at(60), reason="promoted")
    move(conn, task_id, "PROCESSING", at(61), worker="worker-a")
    move(conn, task_id, "QUEUED", at(62), reason="retry: timeout")
    move(conn, task_id, "PROCESSING", at(70), worker="worker-b")
    move(conn, task_id, "COMPLETED", at(71), reason="ok")
    move(conn, other, "PROCESSING", at(61), worker="worker-a")

    rows = conn.execute(
        "SELECT what, from_status::text, attempt, worker, detail, occurred_at"
        " FROM pgsched.task_timeline WHERE task_id = %s ORDER BY event_id",
        (task_id,),
    ).fetchall()
    assert rows[0][0] == "scheduled"
    assert rows[0][1:4] == (None, None, None)
    assert rows[0][4].startswith("due 2030-03-11")
    assert rows[0][5] == AS_OF
    assert rows[1:] == [
        ("QUEUED", "PENDING", 0, None, "promoted", at(60)),
        ("PROCESSING", "QUEUED", 1, "worker-a", None, at(61)),
        ("QUEUED", "PROCESSING", 1, "worker-a", "retry: timeout", at(62)),
        ("PROCESSING", "QUEUED", 2, "worker-b", None, at(70)),
        ("COMPLETED", "PROCESSING", 2, "worker-b", "ok", at(71)),
    ]


def test_task_runs_answers_what_ran_for_a_tenant_on_a_day(conn: psycopg.Connection) -> None:
    day = datetime(2030, 3, 10, tzinfo=UTC)
    # acme: one task completes on the day after a failed attempt, one is still running,
    # one ran the next day; globex ran on the same day.
    retried = schedule(conn, tenant="acme", task_type="report")
    running = schedule(conn, tenant="acme", task_type="export")
    tomorrow = schedule(conn, tenant="acme", task_type="report")
    foreign = schedule(conn, tenant="globex", task_type="report")

    move(conn, retried, "PROCESSING", at(10), worker="w1")
    move(conn, retried, "QUEUED", at(11), reason="retry: HTTP 503")
    move(conn, retried, "PROCESSING", at(20), worker="w2")
    move(conn, retried, "COMPLETED", at(25), reason="ok")
    move(conn, running, "PROCESSING", at(30), worker="w1")
    move(conn, tomorrow, "PROCESSING", at(24 * 60), worker="w3")
    move(conn, tomorrow, "FAILED", at(24 * 60 + 1), reason="boom")
    move(conn, foreign, "PROCESSING", at(40), worker="w9")
    move(conn, foreign, "COMPLETED", at(41))

    rows = conn.execute(
        "SELECT task_id, task_type, attempt, worker, started_at, finished_at, lateness, outcome,"
        " detail FROM pgsched.task_runs WHERE tenant_id = 'acme'"
        " AND started_at >= %s AND started_at < %s::timestamptz + interval '1 day'"
        " ORDER BY started_at",
        (day, day),
    ).fetchall()
    minutes = timedelta(minutes=1)
    assert rows == [
        (retried, "report", 1, "w1", at(10), at(11), 10 * minutes, "QUEUED", "retry: HTTP 503"),
        (retried, "report", 2, "w2", at(20), at(25), 20 * minutes, "COMPLETED", "ok"),
        (running, "export", 1, "w1", at(30), None, 30 * minutes, "RUNNING", None),
    ]

    next_day = conn.execute(
        "SELECT task_id, outcome, detail FROM pgsched.task_runs WHERE tenant_id = 'acme'"
        " AND started_at >= %s::timestamptz + interval '1 day'"
        " AND started_at < %s::timestamptz + interval '2 days'",
        (day, day),
    ).fetchall()
    assert next_day == [(tomorrow, "FAILED", "boom")]


def test_lane_views_and_summary(conn: psycopg.Connection) -> None:
    now = datetime.now(UTC)
    due_normal = [schedule(conn, due_in=-timedelta(minutes=m), as_of=now) for m in (1, 5)]
    later_normal = schedule(conn, due_in=timedelta(hours=2), as_of=now)
    cold_normal = schedule(conn, due_in=timedelta(days=5), as_of=now)
    high = conn.execute(
        "SELECT pgsched.schedule_task('urgent', priority => 9, run_at => %s)",
        (now - timedelta(minutes=1),),
    ).fetchone()[0]
    move(conn, high, "PROCESSING", now, worker="w")
    low = conn.execute(
        "SELECT pgsched.schedule_task('chore', priority => 1, run_at => %s)",
        (now + timedelta(hours=1),),
    ).fetchone()[0]
    dead = conn.execute(
        "SELECT pgsched.schedule_task('flaky', priority => 2, run_at => %s)",
        (now - timedelta(minutes=1),),
    ).fetchone()[0]
    move(conn, dead, "PROCESSING", now, worker="w")
    move(conn, dead, "FAILED", now, reason="gave up")
    done = schedule(conn, as_of=now)
    move(conn, done, "PROCESSING", now, worker="w")
    move(conn, done, "COMPLETED", now)

    summary = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT lane, cold, queued, due_now, processing, dead, oldest_lateness"
            " FROM pgsched.lane_summary"
        )
    }
    assert list(summary) == ["HIGH", "NORMAL", "LOW", "BATCH", "DEAD"]
    assert summary["HIGH"] == (0, 0, 0, 1, 0, None)
    normal = summary["NORMAL"]
    assert normal[:5] == (1, 3, 2, 0, 0)
    assert normal[5] is not None and normal[5] >= timedelta(minutes=5)
    assert summary["LOW"] == (0, 1, 0, 0, 0, None)
    assert summary["BATCH"] == (0, 0, 0, 0, 0, None)
    assert summary["DEAD"][4] == 1

    def ids(view: str) -> set[int]:
        return {r[0] for r in conn.execute(f"SELECT id FROM pgsched.{view}")}

    assert ids("lane_normal") == {*due_normal, later_normal, cold_normal}
    assert ids("lane_high") == {high}
    assert ids("lane_low") == {low}
    assert ids("lane_batch") == set()
    assert ids("lane_dead") == {dead}
