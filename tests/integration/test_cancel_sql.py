"""Cancelling from plain SQL: cancel_task / cancel_task_ex on each status, the request on a
running task and every outcome it meets (completion winning the race, a report of
CANCELLED, a failure, a release, a lost worker), fan-outs, cancel_tasks by filter, bad
input and tenancy. Workers are played by hand with the worker's own SQL functions."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from tests.support.worker_helpers import schedule


def claim(conn: psycopg.Connection, lane: str = "NORMAL", worker: str = "w1") -> dict[int, Any]:
    """Claim every due task of the lane as worker `worker`: id -> lease token."""
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 100, %s)", (lane, worker)
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def finish(
    conn: psycopg.Connection, task_id: int, token: Any, outcome: str, error: str | None = None
) -> bool:
    row = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[],"
        " ARRAY[%s]::text[], ARRAY[%s]::text[])",
        (task_id, token, outcome, error),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def cancel(
    conn: psycopg.Connection, task_id: int, reason: str = "stop", actor: str | None = None
) -> tuple[str, str]:
    row = conn.execute(
        "SELECT outcome, detail FROM pgsched.cancel_task_ex(%s, %s, %s)", (task_id, reason, actor)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def task(conn: psycopg.Connection, task_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    return row


def events(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, str | None]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT from_status::text, to_status::text, detail FROM pgsched.task_events"
            " WHERE task_id = %s ORDER BY id",
            (task_id,),
        )
    ]


def everything(conn: psycopg.Connection) -> tuple[Any, ...]:
    """Every task row and event count: what 'nothing was written' compares."""
    rows = conn.execute("SELECT t::text FROM pgsched.tasks AS t ORDER BY id").fetchall()
    count = conn.execute("SELECT count(*) FROM pgsched.task_events").fetchone()
    return (tuple(r[0] for r in rows), count)


# --- one task ------------------------------------------------------------------------------


def test_a_task_not_started_is_cancelled_at_once_with_the_actor(conn: psycopg.Connection) -> None:
    later = schedule(conn, "job", run_at=datetime.now(UTC) + timedelta(days=3))  # PENDING
    now = schedule(conn, "job")  # QUEUED
    role = conn.info.user
    assert cancel(conn, later, "customer left") == (
        "CANCELLED",
        f"cancelled by {role}: customer left",
    )
    assert cancel(conn, now, "customer left", actor="alice") == (
        "CANCELLED",
        f"cancelled by alice (role {role}): customer left",
    )
    assert task(conn, later)["status"] == "CANCELLED"
    assert events(conn, now) == [
        ("QUEUED", "CANCELLED", f"cancelled by alice (role {role}): customer left")
    ]


def test_a_running_task_is_asked_to_stop_its_worker_told_by_notify(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    task_id = schedule(conn, "job")
    token = claim(conn)[task_id]
    listener = connect()
    listener.execute("LISTEN pgsched_cancel")
    outcome, detail = cancel(conn, task_id, "runaway", actor="bob")
    assert outcome == "CANCEL_REQUESTED"
    assert "cancel requested by bob" in detail and "worker w1 told" in detail
    row = task(conn, task_id)
    assert row["status"] == "PROCESSING" and row["lease_token"] == token
    assert row["cancel_requested_by"] == f"bob (role {conn.info.user})"
    assert row["cancel_reason"] == "runaway"
    assert events(conn, task_id)[-1][:2] == ("PROCESSING", "PROCESSING")
    notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in notes] == [("pgsched_cancel", str(task_id))]
    # What the worker's heartbeat thread asks, in case the notification was lost.
    asked = conn.execute(
        "SELECT * FROM pgsched.task_cancel_requested(ARRAY[%s, %s]::bigint[])",
        (task_id, task_id + 1000),
    ).fetchall()
    assert asked == [(task_id,)]
    # A second request changes nothing and says who asked first.
    before = everything(conn)
    again = cancel(conn, task_id, "again")
    assert again[0] == "CANCEL_REQUESTED" and again[1].startswith("already requested by bob")
    assert everything(conn) == before


@pytest.mark.parametrize(
    ("report", "error", "status", "reason_part"),
    [
        ("CANCELLED", "the async handler was cancelled", "CANCELLED", "the async handler was"),
        ("RETRY", "ValueError: broke while stopping\n  frame", "CANCELLED", "ValueError: broke"),
        ("FAILED", "validate refused: nope", "CANCELLED", "validate refused: nope"),
        ("RELEASED", "released unfinished at shutdown", "CANCELLED", "released unfinished"),
        ("COMPLETED", None, "COMPLETED", "finished before the cancel requested by"),
    ],
)
def test_after_a_request_every_outcome_but_completion_ends_cancelled(
    conn: psycopg.Connection, report: str, error: str | None, status: str, reason_part: str
) -> None:
    task_id = schedule(conn, "job", max_attempts=5)
    token = claim(conn)[task_id]
    cancel(conn, task_id, "runaway")
    assert finish(conn, task_id, token, report, error)
    row = task(conn, task_id)
    assert row["status"] == status
    assert reason_part in row["status_reason"]
    if status == "CANCELLED":
        assert row["status_reason"].startswith(f"cancelled by {conn.info.user}: runaway; ")
        assert row["attempts"] == 1  # not given back, not retried
    assert events(conn, task_id)[-1] == ("PROCESSING", status, row["status_reason"])


def test_a_cancelled_report_without_a_request_is_a_failed_attempt(
    conn: psycopg.Connection,
) -> None:
    task_id = schedule(conn, "job", max_attempts=3)
    token = claim(conn)[task_id]
    assert finish(conn, task_id, token, "CANCELLED", "no request")
    assert task(conn, task_id)["status"] == "QUEUED"


def test_processing_to_cancelled_only_through_a_request(conn: psycopg.Connection) -> None:
    task_id = schedule(conn, "job")
    claim(conn)
    before = everything(conn)
    with pytest.raises(errors.CheckViolation) as refused:
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'CANCELLED', lease_token = NULL WHERE id = %s",
            (task_id,),
        )
    assert f"illegal transition PROCESSING -> CANCELLED for task {task_id}" in str(refused.value)
    assert "pgsched.cancel_task" in (refused.value.diag.message_hint or "")
    assert everything(conn) == before


def test_a_lost_worker_of_a_task_asked_to_stop_ends_it_cancelled(
    conn: psycopg.Connection,
) -> None:
    task_id = schedule(conn, "job", max_attempts=5)
    claim(conn)
    cancel(conn, task_id, "runaway")
    later = datetime.now(UTC) + timedelta(hours=1)
    assert conn.execute(
        "SELECT pgsched.lease_rescue_expired(as_of => %s)", (later,)
    ).fetchone() == (1,)
    row = task(conn, task_id)
    assert row["status"] == "CANCELLED"
    assert "worker lost (lease expired) before it stopped" in row["status_reason"]


def test_the_race_a_completion_waiting_on_the_cancel_sees_the_request(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    """The worker's report blocks on the cancel's row lock and is decided by the request
    it then sees: a failure ends CANCELLED, not queued again."""
    task_id = schedule(conn, "job", max_attempts=5)
    token = claim(conn)[task_id]
    canceller = connect(autocommit=False)
    cancel(canceller, task_id, "runaway")  # holds the row lock, not committed
    reported: list[bool] = []
    worker = threading.Thread(
        target=lambda: reported.append(finish(connect(), task_id, token, "RETRY", "boom"))
    )
    worker.start()
    worker.join(0.5)
    assert worker.is_alive()  # waiting for the cancel's decision
    canceller.commit()
    worker.join(10)
    assert reported == [True]
    assert task(conn, task_id)["status"] == "CANCELLED"


def test_the_race_a_cancel_waiting_on_a_completion_finds_it_finished(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    task_id = schedule(conn, "job")
    token = claim(conn)[task_id]
    reporter = connect(autocommit=False)
    assert finish(reporter, task_id, token, "COMPLETED")  # not committed yet
    refused: list[BaseException] = []

    def try_cancel() -> None:
        try:
            cancel(connect(), task_id)
        except psycopg.Error as exc:
            refused.append(exc)

    canceller = threading.Thread(target=try_cancel)
    canceller.start()
    canceller.join(0.5)
    assert canceller.is_alive()
    reporter.commit()
    canceller.join(10)
    assert len(refused) == 1 and isinstance(refused[0], errors.ObjectNotInPrerequisiteState)
    assert "is COMPLETED and cannot be cancelled: it has finished" in str(refused[0])
    assert task(conn, task_id)["status"] == "COMPLETED"


def test_cancel_task_keeps_returning_the_id(conn: psycopg.Connection) -> None:
    task_id = schedule(conn, "job")
    assert conn.execute("SELECT pgsched.cancel_task(%s, 'x')", (task_id,)).fetchone() == (task_id,)
    running = schedule(conn, "job")
    claim(conn)
    assert conn.execute("SELECT pgsched.cancel_task(%s)", (running,)).fetchone() == (running,)
    assert task(conn, running)["cancel_requested_at"] is not None


# --- fan-out -------------------------------------------------------------------------------


def test_a_fan_out_cancel_stops_the_unfinished_tenants_and_names_who_completed(
    conn: psycopg.Connection,
) -> None:
    for tenant in ("t1", "t2", "t3", "t4"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    parent = schedule(conn, "job", scope="product", product="crm")
    token = claim(conn)[parent]
    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (parent, token)).fetchone() == (4,)
    children: dict[str, int] = {
        r[0]: int(r[1])
        for r in conn.execute(
            "SELECT tenant_id, id FROM pgsched.tasks WHERE parent_id = %s", (parent,)
        )
    }
    # t1 done, t2 running (worker wb), t3 and t4 not started.
    tokens = claim(conn, "BATCH", "wb")
    for tid in set(tokens) - {children["t1"], children["t2"]}:
        finish(conn, tid, tokens[tid], "RELEASED")
    finish(conn, children["t1"], tokens[children["t1"]], "COMPLETED")

    outcome, detail = cancel(conn, parent, "campaign stopped")
    assert outcome == "FAN_OUT_CANCELLED"
    assert "tenants completed: 1 (t1)" in detail
    assert "cancelled: 2" in detail and "running, asked to stop: 1 (t2)" in detail
    status = {t: task(conn, i)["status"] for t, i in children.items()}
    assert status == {"t1": "COMPLETED", "t2": "PROCESSING", "t3": "CANCELLED", "t4": "CANCELLED"}
    assert task(conn, children["t2"])["cancel_requested_at"] is not None
    assert task(conn, parent)["status"] == "COMPLETED"
    assert events(conn, parent)[-1] == ("COMPLETED", "COMPLETED", detail)
    # Once every tenant is finished there is nothing left to cancel.
    finish(conn, children["t2"], tokens[children["t2"]], "CANCELLED", "stopped")
    with pytest.raises(errors.ObjectNotInPrerequisiteState):
        cancel(conn, parent)


def test_a_fan_out_asked_to_stop_before_fanning_out_does_not(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pgsched.tenant_add('t1', 'crm')")
    parent = schedule(conn, "job", scope="product", product="crm")
    token = claim(conn)[parent]
    assert cancel(conn, parent)[0] == "CANCEL_REQUESTED"
    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (parent, token)).fetchone() == (0,)
    assert task(conn, parent)["status"] == "CANCELLED"
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE parent_id = %s", (parent,)
    ).fetchone() == (0,)


# --- by filter -----------------------------------------------------------------------------


def test_cancel_tasks_by_filter_counts_then_cancels(conn: psycopg.Connection) -> None:
    now = datetime.now(UTC)
    mail = [schedule(conn, "mail", tenant_id="acme") for _ in range(3)]
    later = schedule(conn, "mail", tenant_id="acme", run_at=now + timedelta(days=2))
    other = schedule(conn, "report", tenant_id="acme")
    globex = schedule(conn, "mail", tenant_id="globex")
    running = claim(conn)  # everything due now is PROCESSING
    assert set(running) == {*mail, other, globex}
    queued = schedule(conn, "mail", tenant_id="acme")
    keyed = schedule(conn, "mail", tenant_id="acme", idempotency_key="inv-7")

    def cancel_tasks(**kwargs: Any) -> tuple[int, int]:
        names = ", ".join(f"{k} => %({k})s" for k in kwargs)
        row = conn.execute(f"SELECT * FROM pgsched.cancel_tasks({names})", kwargs).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    before = everything(conn)
    assert cancel_tasks(task_type="mail", tenant_id="acme", dry_run=True) == (3, 3)
    assert cancel_tasks(idempotency_key="inv-7", dry_run=True) == (1, 0)
    assert cancel_tasks(task_type="mail", due_from=now + timedelta(days=1), dry_run=True) == (1, 0)
    assert everything(conn) == before  # a dry run changes nothing

    assert cancel_tasks(task_type="mail", tenant_id="acme", reason="campaign off") == (3, 3)
    assert {task(conn, i)["status"] for i in (later, queued, keyed)} == {"CANCELLED"}
    assert {task(conn, i)["cancel_reason"] for i in mail} == {"campaign off"}
    assert task(conn, other)["cancel_requested_at"] is None
    assert task(conn, globex)["cancel_requested_at"] is None
    # Those asked already are not asked again.
    assert cancel_tasks(task_type="mail", tenant_id="acme") == (0, 0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("pgsched.cancel_tasks()", "cancel_tasks needs at least one filter"),
        ("pgsched.cancel_tasks(task_type => '')", "task_type: must not be empty"),
        ("pgsched.cancel_tasks(tenant_id => '')", "tenant_id: must not be empty"),
        (
            "pgsched.cancel_tasks(due_from => now(), due_until => now() - interval '1 hour')",
            "must be before due_until",
        ),
        ("pgsched.cancel_tasks(due_from => 'infinity')", "due_from: must be a finite time"),
        (
            "pgsched.cancel_tasks(task_type => 'job', reason => repeat('x', 1001))",
            "reason: at most 1000",
        ),
        ("pgsched.cancel_task_ex(%(id)s, repeat('x', 1001))", "reason: at most 1000"),
        ("pgsched.cancel_task_ex(%(id)s, 'x', repeat('a', 201))", "actor: at most 200"),
    ],
)
def test_bad_input_is_refused_with_22023_and_nothing_written(
    conn: psycopg.Connection, call: str, message: str
) -> None:
    task_id = schedule(conn, "job")
    before = everything(conn)
    with pytest.raises(errors.InvalidParameterValue) as refused:
        conn.execute(f"SELECT * FROM {call}", {"id": task_id})
    assert refused.value.sqlstate == "22023"
    assert message in str(refused.value)
    assert everything(conn) == before


def test_unknown_and_finished_tasks_are_refused(conn: psycopg.Connection) -> None:
    with pytest.raises(errors.NoDataFound, match="no task with id 987654"):
        cancel(conn, 987654)
    done = schedule(conn, "job")
    cancel(conn, done)
    with pytest.raises(errors.ObjectNotInPrerequisiteState, match="is CANCELLED and cannot"):
        cancel(conn, done)


# --- tenancy -------------------------------------------------------------------------------


@pytest.fixture
def producer(conn: psycopg.Connection, db_dsn: str) -> Iterator[psycopg.Connection]:
    """A producer login bound to tenant acme, connected."""
    name = f"t_{uuid.uuid4().hex[:10]}_producer"
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgsched_producer").format(sql.Identifier(name))
    )
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, 'acme')", (name,)
    )
    login = psycopg.connect(make_conninfo(db_dsn, user=name), autocommit=True)
    try:
        yield login
    finally:
        login.close()
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_producer_bound_to_a_tenant_cannot_cancel_another_tenants_task(
    conn: psycopg.Connection, producer: psycopg.Connection
) -> None:
    mine = schedule(conn, "mail", tenant_id="acme")
    theirs = schedule(conn, "mail", tenant_id="globex")
    claim(conn)
    theirs_queued = schedule(conn, "mail", tenant_id="globex")
    before = everything(conn)
    for task_id in (theirs, theirs_queued):
        with pytest.raises(errors.InsufficientPrivilege, match="belongs to another tenant"):
            cancel(producer, task_id)
    with pytest.raises(errors.InsufficientPrivilege, match="may only schedule for tenant"):
        producer.execute("SELECT * FROM pgsched.cancel_tasks(tenant_id => 'globex')")
    with pytest.raises(errors.InsufficientPrivilege):
        producer.execute("SELECT pgsched.task_cancel_requested(ARRAY[1]::bigint[])")
    assert everything(conn) == before
    # By type alone, only its own tenant's tasks are touched.
    row = producer.execute("SELECT * FROM pgsched.cancel_tasks(task_type => 'mail')").fetchone()
    assert row == (0, 1)
    assert task(conn, mine)["cancel_requested_by"] == producer.info.user
    assert task(conn, theirs)["cancel_requested_at"] is None
    assert task(conn, theirs_queued)["status"] == "QUEUED"


# --- the record read back ------------------------------------------------------------------


def test_a_cancel_request_is_neither_a_run_nor_its_end(conn: psycopg.Connection) -> None:
    """task_runs (and pgsched history) read a claim and its outcome; the request between
    them (PROCESSING -> PROCESSING) is neither a new run nor the run's end."""
    task_id = schedule(conn, "job")
    token = claim(conn)[task_id]
    cancel(conn, task_id, "runaway")

    def runs() -> list[tuple[int, str]]:
        rows = conn.execute(
            "SELECT attempt, outcome FROM pgsched.task_runs WHERE task_id = %s", (task_id,)
        ).fetchall()
        return [(int(r[0]), r[1]) for r in rows]

    assert runs() == [(1, "RUNNING")]
    finish(conn, task_id, token, "CANCELLED", "the async handler was cancelled")
    assert runs() == [(1, "CANCELLED")]
    detail = conn.execute(
        "SELECT detail FROM pgsched.run_history WHERE task_id = %s", (task_id,)
    ).fetchone()
    assert detail is not None and detail[0].startswith(f"cancelled by {conn.info.user}: runaway")
