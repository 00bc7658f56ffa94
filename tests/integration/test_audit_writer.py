"""Who writes the events: the transition trigger (single-node mode, the default) or the
state-changing functions themselves (settings.audit_writer = 'functions', the mode a
distributed install needs, where Citus refuses triggers).

The same story of transitions, played from plain SQL with fixed clocks on two databases, one
in each mode, leaves the same task_events rows (time, transition, worker, attempt, detail)
and the same tasks; a real worker in functions mode writes both events of every task it
runs; switching modes adds and drops the triggers, and a bad mode changes nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.conftest import PgServer
from tests.support.worker_helpers import create_test_tables, running_workers, wait_until

BOTH_TRIGGERS = ["tasks_record_transitions", "tasks_settle_dependents"]
UPDATE_TRIGGERS = "SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger WHERE tgrelid = 'pgsched.tasks'::regclass AND NOT tgisinternal AND tgtype & 16 = 16"  # noqa: E501
INSERT_TRIGGERS = "SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger WHERE tgrelid = 'pgsched.tasks'::regclass AND NOT tgisinternal AND tgtype & 4 = 4"  # noqa: E501


def _schedule(conn: psycopg.Connection, t: datetime, task_type: str, **kw: Any) -> int:
    names = "".join(f", {name} => %({name})s" for name in kw)
    row = conn.execute(
        f"SELECT pgsched.schedule_task(task_type => %(task_type)s, as_of => %(t)s{names})",
        {"task_type": task_type, "t": t, **kw},
    ).fetchone()
    assert row is not None
    return int(row[0])


def _claim(conn: psycopg.Connection, t: datetime, lane: str = "NORMAL") -> dict[int, Any]:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 100, 'w1', '30 s', %s)",
        (lane, t),
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def _finish(
    conn: psycopg.Connection,
    t: datetime,
    leases: dict[int, Any],
    task_id: int,
    outcome: str,
    delay: str | None = None,
) -> None:
    row = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[],"
        " ARRAY[%s]::text[], ARRAY['why']::text[], ARRAY[%s]::interval[], %s)",
        (task_id, leases[task_id], outcome, delay, t),
    ).fetchone()
    assert row is not None and row[0], f"task {task_id}: {outcome} not applied"


def play_story(conn: psycopg.Connection, t0: datetime) -> None:
    """Every kind of status change the functions make, each with its own clock."""

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    two_days = t0 + timedelta(days=2)
    # Claimed, retried, claimed again, completed: its child is released into the hot tier.
    a = _schedule(conn, at(0), "story", run_at=at(0), max_attempts=2)
    released_child = _schedule(conn, at(0), "story", run_at=at(0), depends_on=[a])
    # Lost by its worker with no attempt left (rescued into the DEAD lane), retried from
    # there, failed again, discarded.
    b = _schedule(conn, at(0), "story", run_at=at(0), max_attempts=1)
    # Cancelled before they start: one in the cold tier, one queued.
    c = _schedule(conn, at(0), "story", run_at=two_days)
    d = _schedule(conn, at(0), "story", run_at=at(0))
    # Promoted out of the cold tier.
    e = _schedule(conn, at(0), "story", run_at=two_days)
    # A parent that goes DEAD: one child cancelled (and its own child with it), one held.
    f = _schedule(conn, at(0), "story", run_at=at(0), max_attempts=1)
    g = _schedule(conn, at(0), "story", run_at=at(0), depends_on=[f], on_parent_failure="cancel")
    _schedule(conn, at(0), "story", run_at=at(0), depends_on=[g], on_parent_failure="cancel")
    _schedule(conn, at(0), "story", run_at=at(0), depends_on=[f], on_parent_failure="hold")
    # Snoozed, released, cancelled while running.
    s = _schedule(conn, at(0), "story", run_at=at(0))
    r = _schedule(conn, at(0), "story", run_at=at(0))
    x = _schedule(conn, at(0), "story", run_at=at(0))
    # Cancelled by filter, one of each tier.
    _schedule(conn, at(0), "bulk_story", run_at=at(0))
    _schedule(conn, at(0), "bulk_story", run_at=two_days)
    # Debounced: the second call brings it from the cold tier into the hot one.
    debounced = dict(idempotency_key="k1", payload='{"n": 1}')
    _schedule(conn, at(0), "debounced", debounce="2 days", **debounced)
    _schedule(conn, at(1), "debounced", debounce="1 minute", **debounced)
    # A recurring schedule paused: its armed occurrence is cancelled.
    row = conn.execute(
        "SELECT pgsched.schedule_recurring('story_cron', '0 3 * * *', as_of => %s)", (at(0),)
    ).fetchone()
    assert row is not None
    conn.execute("SELECT pgsched.schedule_pause(%s, 'paused', %s)", (row[0], at(1)))

    conn.execute("SELECT * FROM pgsched.cancel_task_ex(%s, 'stop', 'ops', %s)", (c, at(1)))
    conn.execute("SELECT * FROM pgsched.cancel_task_ex(%s, 'stop', 'ops', %s)", (d, at(1)))
    conn.execute(
        "SELECT * FROM pgsched.cancel_tasks(task_type => 'bulk_story', as_of => %s)", (at(1),)
    )

    leases = _claim(conn, at(2))
    assert {a, b, f, s, r, x} <= set(leases)
    _finish(conn, at(3), leases, a, "RETRY", "0 s")
    _finish(conn, at(3), leases, f, "FAILED")
    _finish(conn, at(3), leases, s, "SNOOZED", "1 hour")
    _finish(conn, at(3), leases, r, "RELEASED")
    conn.execute("SELECT * FROM pgsched.cancel_task_ex(%s, 'stop', 'ops', %s)", (x, at(3)))
    _finish(conn, at(4), leases, x, "CANCELLED")

    leases = _claim(conn, at(5))
    assert a in leases
    _finish(conn, at(6), leases, a, "COMPLETED")
    assert released_child in _claim(conn, at(7))

    # b's lease (30 s from its claim at 2 s) is over at 40 s.
    rescued = conn.execute("SELECT pgsched.lease_rescue_expired(NULL, 1000, %s)", (at(40),))
    assert rescued.fetchone() == (3,)  # b, the released child, r (claimed again at 5 s)
    conn.execute("SELECT * FROM pgsched.dead_retry(task_id => %s, as_of => %s)", (b, at(41)))
    leases = _claim(conn, at(42))
    _finish(conn, at(43), leases, b, "FAILED")
    conn.execute("SELECT pgsched.dead_discard(%s, 'not needed', %s)", (b, at(44)))

    promoted = conn.execute(
        "SELECT pgsched.task_promote_due(100, %s)", (t0 + timedelta(days=1, hours=1),)
    ).fetchone()
    assert promoted is not None and promoted[0] >= 1
    assert conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (e,)
    ).fetchone() == ("QUEUED",)


EVENTS = """
SELECT task_id, from_status::text, to_status::text, occurred_at, scheduled_for, attempt,
       worker, detail
  FROM pgsched.task_events
 ORDER BY task_id, id
"""
TASKS = """
SELECT id, status::text, attempts, next_run_at, updated_at, status_reason, waiting_for
  FROM pgsched.tasks
 ORDER BY id
"""


def _story_clock(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows with every time not of the story's clock (whole seconds) as "now": what
    parents finishing release is due at the transaction's clock, in both modes."""
    return [
        tuple("now" if isinstance(v, datetime) and v.microsecond else v for v in row)
        for row in rows
    ]


def _story_database(
    pg_server: PgServer, new_database: Callable[..., str], writer: str, t0: datetime
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    dsn = new_database(template=pg_server.template_dbname)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgsched.audit_writer_set(%s)", (writer,)).fetchone() == (
            writer,
        )
        play_story(conn, t0)
        events = conn.execute(EVENTS).fetchall()
        return _story_clock(events), _story_clock(conn.execute(TASKS).fetchall())


def test_the_functions_write_the_events_the_trigger_would(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0)
    by_trigger, tasks_by_trigger = _story_database(pg_server, new_database, "trigger", t0)
    by_functions, tasks_by_functions = _story_database(pg_server, new_database, "functions", t0)

    assert tasks_by_functions == tasks_by_trigger
    # Every kind of change is in the story: the comparison below covers each.
    transitions = {(e[1], e[2]) for e in by_trigger}
    assert transitions >= {
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "QUEUED"),
        ("PROCESSING", "COMPLETED"),
        ("PROCESSING", "FAILED"),
        ("PROCESSING", "CANCELLED"),
        ("PENDING", "QUEUED"),
        ("PENDING", "CANCELLED"),
        ("QUEUED", "CANCELLED"),
        ("FAILED", "QUEUED"),
        ("FAILED", "CANCELLED"),
    }
    assert any(e[7] and e[7].startswith("held: parent task") for e in by_trigger)
    assert any(e[7] and e[7].startswith("cancelled: parent task") for e in by_trigger)
    assert any(e[7] and e[7].startswith("released: parent task") for e in by_trigger)
    assert by_functions == by_trigger


@pytest.mark.skipif(
    bool(os.environ.get("PGSCHED_TEST_AUDIT_WRITER")),
    reason="PGSCHED_TEST_AUDIT_WRITER set: this session's databases were switched after migrate",
)
def test_a_database_migrated_has_the_trigger_write_the_events(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT audit_writer FROM pgsched.settings").fetchone() == ("trigger",)
    assert conn.execute(UPDATE_TRIGGERS).fetchone() == (BOTH_TRIGGERS,)
    assert conn.execute("SELECT pgsched.events_by_functions()").fetchone() == (False,)


def test_switching_the_writer_adds_and_drops_the_triggers(conn: psycopg.Connection) -> None:
    both = BOTH_TRIGGERS
    assert conn.execute("SELECT pgsched.audit_writer_set('trigger')").fetchone() == ("trigger",)
    assert conn.execute(UPDATE_TRIGGERS).fetchone() == (both,)
    assert conn.execute("SELECT pgsched.events_by_functions()").fetchone() == (False,)

    assert conn.execute(INSERT_TRIGGERS).fetchone() == (["tasks_refuse_bad_due_times"],)

    assert conn.execute("SELECT pgsched.audit_writer_set('functions')").fetchone() == ("functions",)
    assert conn.execute(UPDATE_TRIGGERS).fetchone() == (None,)
    assert conn.execute(INSERT_TRIGGERS).fetchone() == (None,)
    assert conn.execute("SELECT pgsched.events_by_functions()").fetchone() == (True,)

    with pytest.raises(errors.InvalidParameterValue, match="'trigger' or 'functions'"):
        conn.execute("SELECT pgsched.audit_writer_set('both')")
    assert conn.execute("SELECT audit_writer FROM pgsched.settings").fetchone() == ("functions",)
    assert conn.execute(UPDATE_TRIGGERS).fetchone() == (None,)

    assert conn.execute("SELECT pgsched.audit_writer_set('trigger')").fetchone() == ("trigger",)
    assert conn.execute(UPDATE_TRIGGERS).fetchone() == (both,)
    assert conn.execute(INSERT_TRIGGERS).fetchone() == (["tasks_refuse_bad_due_times"],)
    assert conn.execute("SELECT pgsched.events_by_functions()").fetchone() == (False,)


def test_a_worker_in_functions_mode_writes_both_events_of_every_task(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path
) -> None:
    create_test_tables(conn)
    conn.execute("SELECT pgsched.audit_writer_set('functions')")
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT pgsched.schedule_task('quick', jsonb_build_object('n', n)) FROM generate_series(1, 50) AS n"  # noqa: E501
        ).fetchall()
    ]
    with running_workers(db_env, tmp_path) as workers:
        workers.start("w1")
        wait_until(
            lambda: conn.execute(
                "SELECT count(*) = %s FROM pgsched.tasks"
                " WHERE id = ANY(%s) AND status = 'COMPLETED'",
                (len(ids), ids),
            ).fetchone()[0],
            60,
            what="50 tasks completed",
        )
    rows = conn.execute(
        "SELECT task_id, array_agg(from_status::text || '>' || to_status::text ORDER BY id),"
        " bool_and(worker IS NOT NULL), bool_and(attempt = 1)"
        " FROM pgsched.task_events WHERE task_id = ANY(%s) GROUP BY task_id",
        (ids,),
    ).fetchall()
    assert len(rows) == len(ids)
    for _task_id, transitions, with_worker, first_attempt in rows:
        assert transitions == ["QUEUED>PROCESSING", "PROCESSING>COMPLETED"]
        assert with_worker and first_attempt
