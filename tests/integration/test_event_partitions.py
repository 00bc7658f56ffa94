"""task_events by time partition (sql/0024): partitions made ahead, expired periods dropped
whole with the history of live and DEAD tasks kept, the lock wait bounded, the migration of
a populated database, the weekly period, and what `pgsched doctor` says. Real Postgres; the
SQL API is called as plain SQL, the sweep as the sweeper runs it."""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.migrations import migrate
from pgsched.sweeps import RetentionSweep
from tests.support.sql_v33 import migrate_v33
from tests.support.worker_helpers import doctor_checks, schedule

DAY = timedelta(days=1)


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def day_start(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return datetime(t.year, t.month, t.day, tzinfo=UTC)


def partitions(conn: psycopg.Connection) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM pgsched.event_partitions()").fetchall()


def dated(conn: psycopg.Connection) -> list[tuple[datetime, datetime]]:
    """The bounds of the dated partitions, oldest first."""
    return [
        (p["lower_bound"], p["upper_bound"])
        for p in partitions(conn)
        if p["lower_bound"] is not None
    ]


def assert_contiguous(conn: psycopg.Connection) -> None:
    """The archive, then periods, each starting where the one before ends: no gap."""
    parts = [p for p in partitions(conn) if not p["is_default"]]
    assert parts[0]["partition_name"] == "task_events_archive"
    assert parts[0]["lower_bound"] is None
    for before, after in itertools.pairwise(parts):
        assert after["lower_bound"] == before["upper_bound"], (before, after)


def maintain(
    conn: psycopg.Connection, as_of: datetime, keep: str = "30 days", **more: Any
) -> list[tuple[str, str, int | None]]:
    names = "".join(f", {name} => %({name})s" for name in more)
    return conn.execute(
        "SELECT partition_name, action, event_rows FROM pgsched.partitions_maintain("
        f"keep => %(keep)s::interval, as_of => %(as_of)s{names})",
        {"keep": keep, "as_of": as_of, **more},
    ).fetchall()


def insert_event(conn: psycopg.Connection, task_id: int, at: datetime) -> int:
    row = conn.execute(
        "INSERT INTO pgsched.task_events (task_id, tenant_id, task_type, from_status,"
        " to_status, occurred_at, scheduled_for, attempt)"
        " VALUES (%s, 'default', 'e', 'QUEUED', 'PROCESSING', %s, %s, 1) RETURNING id",
        (task_id, at, at),
    ).fetchone()
    assert row is not None
    return int(row[0])


def event_ids(conn: psycopg.Connection, task_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM pgsched.task_events WHERE task_id = %s ORDER BY id", (task_id,)
    ).fetchall()
    return [r[0] for r in rows]


def finish(conn: psycopg.Connection, task_id: int, outcome: str) -> None:
    """Claim `task_id` (alone due in its lane) and report `outcome` for it."""
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, 'w', '30 seconds')"
    ).fetchall()
    assert [c[0] for c in claimed] == [task_id]
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
        ([task_id], [claimed[0][1]], [outcome]),
    )


# -- made ahead --------------------------------------------------------------------------


def test_the_migration_makes_partitions_ahead_and_a_later_run_continues_without_a_gap(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    status = conn.execute("SELECT * FROM pgsched.event_partitions_status()").fetchone()
    assert status is not None
    period, current_covered, ahead, default_rows = status
    assert (period, current_covered, default_rows) == (DAY, True, 0)
    assert ahead >= 3
    assert_contiguous(conn)
    # Made already: a run now changes nothing.
    assert maintain(conn, now) == []

    later = now + timedelta(days=10)
    made = maintain(conn, later)
    assert made and all(action == "created" for _, action, _ in made)
    assert_contiguous(conn)
    last_lower, last_upper = dated(conn)[-1]
    # The current period of `later` and the next three have a partition.
    assert last_upper == day_start(later) + 4 * DAY
    assert last_upper - last_lower == DAY
    assert made[-1][0] == "task_events_p" + last_lower.strftime("%Y%m%d")
    assert maintain(conn, later) == []


def test_an_event_beyond_every_partition_waits_in_the_default_and_moves_in_when_made(
    conn: psycopg.Connection,
) -> None:
    far = db_now(conn) + timedelta(days=20)
    event = insert_event(conn, 424242, far)
    status = conn.execute("SELECT default_rows FROM pgsched.event_partitions_status()")
    assert status.fetchone() == (1,)

    made = maintain(conn, far)

    into = "task_events_p" + day_start(far).strftime("%Y%m%d")
    assert (into, "created", 1) in made
    row = conn.execute(
        "SELECT tableoid::regclass::text FROM pgsched.task_events WHERE id = %s", (event,)
    ).fetchone()
    assert row == (f"pgsched.{into}",)
    status = conn.execute("SELECT default_rows FROM pgsched.event_partitions_status()")
    assert status.fetchone() == (0,)


# -- expired periods dropped -----------------------------------------------------------------


def test_expired_periods_drop_whole_keeping_live_and_dead_history_and_nothing_newer(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED")
    done = schedule(conn, "r")
    finish(conn, done, "COMPLETED")
    # A live task with an event: a cold one promoted, as the promotion sweep would.
    queued = schedule(conn, "r", run_at=now + timedelta(days=90))
    conn.execute("UPDATE pgsched.tasks SET status = 'QUEUED' WHERE id = %s", (queued,))
    gone = 900_000_001  # a task retention already deleted: its events are history only
    insert_event(conn, gone, now)
    dead_history = event_ids(conn, dead)
    assert len(dead_history) == 2 and len(event_ids(conn, queued)) == 1
    # Newer than what expires, and two days inside the kept window.
    as_of = now + timedelta(days=40)
    maintain(conn, as_of - timedelta(days=30) + 3 * DAY)
    newer = insert_event(conn, gone, as_of - timedelta(days=30) + 2 * DAY)
    # In the period holding the cutoff: older than the cutoff, kept until the period ends.
    cutoff = as_of - timedelta(days=30)
    straddling = insert_event(conn, gone, cutoff - (cutoff - day_start(cutoff)) / 2)
    expiring = [p for p in dated(conn) if p[1] <= as_of - timedelta(days=30)]

    acted = maintain(conn, as_of)

    dropped = [name for name, action, _ in acted if action == "dropped"]
    assert len(dropped) == len(expiring) > 0
    archived = [rows for name, action, rows in acted if action == "archived"]
    # The DEAD task's claim and failure, and the live task's promotion.
    assert archived == [3]
    assert_contiguous(conn)
    assert all(lower >= day_start(as_of - timedelta(days=30)) for lower, _ in dated(conn))
    assert event_ids(conn, dead) == dead_history
    timeline = conn.execute(
        "SELECT what FROM pgsched.task_timeline WHERE task_id = %s ORDER BY event_id", (dead,)
    ).fetchall()
    assert [w for (w,) in timeline] == ["scheduled", "PROCESSING", "FAILED"]
    runs = conn.execute(
        "SELECT outcome FROM pgsched.task_runs WHERE task_id = %s", (dead,)
    ).fetchall()
    assert runs == [("FAILED",)]
    assert len(event_ids(conn, queued)) == 1
    # A finished task's events went with their period; so did the deleted task's old ones.
    assert event_ids(conn, done) == []
    assert event_ids(conn, gone) == sorted([straddling, newer])

    # Twice is harmless; the archive keeps what it kept at the next expiry too.
    assert maintain(conn, as_of) == []
    again = maintain(conn, as_of + 2 * DAY)
    assert ("task_events_archive", "archived", 3) in again
    assert event_ids(conn, dead) == dead_history


def test_a_task_that_finishes_leaves_the_archive_at_the_next_expiry(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED")
    as_of = now + timedelta(days=40)
    assert ("task_events_archive", "archived", 2) in maintain(conn, as_of)
    conn.execute("SELECT pgsched.dead_discard(%s, as_of => %s)", (dead, as_of))
    assert len(event_ids(conn, dead)) == 3  # the discard's event is in as_of's period

    acted = maintain(conn, as_of + timedelta(days=31))

    assert ("task_events_archive", "archived", 0) in acted
    assert event_ids(conn, dead) == []


# -- the lock wait -----------------------------------------------------------------------------


def test_a_drop_that_cannot_get_its_lock_in_time_changes_nothing_and_the_next_run_drops(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection], caplog: Any
) -> None:
    now = db_now(conn)
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED")
    as_of = now + timedelta(days=40)
    maintain(conn, as_of)  # made ahead, so the sweep below has only drops to do
    later = as_of + 3 * DAY
    before = partitions(conn)
    holder = connect(autocommit=False)
    # A transaction that has written an event and not committed yet, as a claim would.
    holder.execute("LOCK TABLE ONLY pgsched.task_events IN ROW EXCLUSIVE MODE")

    caplog.set_level(logging.WARNING, logger="pgsched.sweeps")
    sweep = RetentionSweep(lock_wait=timedelta(milliseconds=200))
    counts = sweep.maintain_partitions(conn, later)

    assert counts == {"partitions_created": 3, "lock_timeouts": 3}
    warned = [r for r in caplog.records if "not dropped" in r.getMessage()]
    assert len(warned) == 3
    expired = [p["partition_name"] for p in before if p["lower_bound"] is not None][:3]
    named = sorted(r.__dict__["fields"]["partition"] for r in warned)
    assert named == sorted(expired)
    names = {p["partition_name"] for p in partitions(conn)}
    assert set(expired) <= names
    assert "task_events_archive_next" not in names
    row = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
    assert row == ("0",)

    holder.rollback()
    holder.close()
    counts = sweep.maintain_partitions(conn, later)
    assert counts == {"partitions_dropped": 3, "events_archived": 2}
    assert not set(expired) & {p["partition_name"] for p in partitions(conn)}
    assert len(event_ids(conn, dead)) == 2


def test_making_a_partition_that_cannot_get_its_lock_in_time_makes_nothing(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    later = db_now(conn) + timedelta(days=10)
    before = partitions(conn)
    reader = connect(autocommit=False)
    reader.execute("SELECT count(*) FROM pgsched.task_events_default")  # holds ACCESS SHARE

    acted = maintain(conn, later, lock_wait="200 milliseconds")

    assert [a for _, a, _ in acted] == ["not_created"]
    assert partitions(conn) == before
    reader.rollback()
    reader.close()
    assert all(a == "created" for _, a, _ in maintain(conn, later))
    assert_contiguous(conn)


def test_the_retention_sweep_runs_the_maintenance_after_pruning(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    done = schedule(conn, "r")
    finish(conn, done, "COMPLETED")
    counts = RetentionSweep(keep=timedelta(days=30)).run_once(conn, now + timedelta(days=40))
    # The finished task went with its partition of tasks_finished (sql/0027), not by row.
    assert counts["tasks"] == 0 and counts["finished_partitions_dropped"] >= 1
    assert conn.execute("SELECT count(*) FROM pgsched.tasks WHERE id = %s", (done,)).fetchone() == (
        0,
    )
    assert counts["partitions_created"] >= 30 and counts["partitions_dropped"] >= 1
    assert counts["events_archived"] == 0
    assert event_ids(conn, done) == []


# -- bad input, the weekly period --------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("ahead => 0", "ahead must be between 1 and 366"),
        ("ahead => NULL", "ahead must be between 1 and 366"),
        ("keep => '0 days'", "keep must be above 0"),
        ("lock_wait => '0 seconds'", "lock_wait must be above 0"),
        ("lock_wait => '2 minutes'", "lock_wait must be above 0"),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    conn: psycopg.Connection, call: str, message: str
) -> None:
    before = partitions(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(
            f"SELECT * FROM pgsched.partitions_maintain({call}, as_of => now() + interval '9 days')"
        )
    assert partitions(conn) == before


def test_weekly_partitions_begin_on_mondays_after_the_last_daily_one(
    conn: psycopg.Connection,
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE pgsched.settings SET event_partition_period = '2 days'")
    conn.execute("UPDATE pgsched.settings SET event_partition_period = '7 days'")
    later = db_now(conn) + timedelta(days=30)

    maintain(conn, later)

    assert_contiguous(conn)
    bounds = dated(conn)
    weekly = [(lo, hi) for lo, hi in bounds if hi - lo != DAY]
    assert len(weekly) >= 4
    # At most one short partition bridges the last day to the next Monday.
    for lo, hi in weekly[1:]:
        assert lo.weekday() == 0 and hi - lo == timedelta(days=7)
    assert weekly[-1][1] > later + 3 * timedelta(days=7)
    status = conn.execute(
        "SELECT period, current_covered, periods_ahead FROM pgsched.event_partitions_status(%s)",
        (later,),
    ).fetchone()
    assert status == (timedelta(days=7), True, 3)


def test_a_period_of_an_hour_names_partitions_by_the_hour_and_drops_them_by_the_hour(
    conn: psycopg.Connection,
) -> None:
    """A day compressed into minutes (the soak benchmark) needs periods shorter than a day:
    any that divides a day evenly is taken."""
    for bad in ("2 days", "7 minutes", "30 seconds", "1 month"):
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE pgsched.settings SET event_partition_period = %s", (bad,))
    conn.execute("UPDATE pgsched.settings SET event_partition_period = '1 hour'")
    later = db_now(conn) + timedelta(days=5)

    made = maintain(conn, later)

    assert_contiguous(conn)
    hourly = [(lo, hi) for lo, hi in dated(conn) if hi - lo == timedelta(hours=1)]
    assert len(hourly) >= 24
    assert all(lo.minute == 0 and lo.second == 0 for lo, _ in hourly)
    assert any(re.fullmatch(r"task_events_p\d{8}_\d{6}", name) for name, _, _ in made)
    assert dated(conn)[-1][1] == hourly[-1][1] > later + timedelta(hours=3)

    acted = maintain(conn, later + timedelta(hours=3), keep="2 hours")

    cutoff = later + timedelta(hours=1)
    assert any(a == "dropped" for _, a, _ in acted)
    assert_contiguous(conn)
    first_lower, first_upper = dated(conn)[0]
    assert first_lower <= cutoff < first_upper  # the hour holding the cutoff stays


# -- the migration of a populated database -------------------------------------------------


def test_migrating_a_populated_database_keeps_every_event_and_continues_the_ids(
    new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database()
    # Before the partitions, by the numbered files of earlier releases (the path such a
    # database takes: an earlier pgsched to 0033, then this one).
    migrate_v33(dsn, upto=23)
    with psycopg.connect(dsn, autocommit=True) as conn:
        tasks = [schedule(conn, "r", max_attempts=1) for _ in range(20)]
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 20, 'w', '1 minute')"
        ).fetchall()
        assert len(claimed) == 20
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
            (
                [c[0] for c in claimed],
                [c[1] for c in claimed],
                ["COMPLETED"] * 10 + ["FAILED"] * 10,
            ),
        )
        # One from a producer's as_of a year ahead, and one long past.
        conn.execute(
            "INSERT INTO pgsched.task_events (task_id, tenant_id, task_type, from_status,"
            " to_status, occurred_at, scheduled_for, attempt) VALUES"
            " (1, 'default', 'r', 'PENDING', 'QUEUED', now() + interval '1 year', now(), 0),"
            " (1, 'default', 'r', 'PENDING', 'QUEUED', now() - interval '1 year', now(), 0)"
        )
        old = conn.execute("SELECT * FROM pgsched.task_events ORDER BY id").fetchall()
        assert len(old) == 20 * 2 + 2

    migrate_v33(dsn)
    migrate(dsn)

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT * FROM pgsched.task_events ORDER BY id").fetchall() == old
        where: dict[str, int] = dict(
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM pgsched.task_events GROUP BY 1"
            ).fetchall()
        )
        assert where == {"pgsched.task_events_archive": 41, "pgsched.task_events_default": 1}
        assert_contiguous(conn)
        # New events continue the ids, into the new table.
        conn.execute("SELECT pgsched.dead_retry(task_type => 'r')")
        newest = conn.execute(
            "SELECT min(id), count(*) FROM pgsched.task_events WHERE to_status = 'QUEUED'"
            " AND from_status = 'FAILED'"
        ).fetchone()
        assert newest is not None and newest[1] == 10 and newest[0] > old[-1][0]
        assert len(tasks) == 20


# -- doctor ------------------------------------------------------------------------------------


def doctor_partitions(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    code, checks = doctor_checks(env)
    return code, checks["partitions"]


def test_doctor_passes_warns_on_default_rows_and_fails_without_a_current_partition(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    code, check = doctor_partitions(db_env)
    assert check["result"] == "pass", check
    assert "default partition empty" in check["detail"]

    insert_event(conn, 1, db_now(conn) + timedelta(days=60))
    code, check = doctor_partitions(db_env)
    assert check["result"] == "warn", check
    assert "default partition holds 1 event" in check["detail"]

    current = [
        p["partition_name"]
        for p in partitions(conn)
        if not p["is_default"] and p["upper_bound"] > db_now(conn)
    ]
    for name in current:
        conn.execute(f"DROP TABLE pgsched.{name}")
    code, check = doctor_partitions(db_env)
    assert check["result"] == "fail", check
    assert "no partition for the current day" in check["detail"]
    assert code == 1

    # The next maintenance starts again from the current period.
    made = maintain(conn, db_now(conn))
    assert len(made) == 4 and all(a == "created" for _, a, _ in made)
    code, check = doctor_partitions(db_env)
    assert check["result"] == "warn", check  # the event far ahead still waits


def test_the_maintenance_waits_for_another_maintainer(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    """Two runs at once (the sweeper, and an operator by hand) take turns: the second finds
    the work done and makes nothing twice."""
    later = db_now(conn) + timedelta(days=12)
    first = connect(autocommit=False)
    made_first = maintain(first, later)
    assert made_first
    results: list[Any] = []
    second = connect()
    waiter = threading.Thread(target=lambda: results.append(maintain(second, later)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # waiting on the first one's transaction
    first.commit()
    waiter.join(30)
    assert results == [[]]
