"""Finished tasks by time partition (sql/0027): COMPLETED and CANCELLED rows live in
tasks_finished, partitioned by updated_at; its periods are made ahead and dropped whole with
their rows, FAILED rows (the DEAD lane, tasks_done) are kept whatever their age, live tasks
are never touched, the lock wait is bounded, bad arguments are refused, a populated database
migrates with every row, and `pgsched doctor` watches the partitions. Real Postgres; the SQL
API is called as plain SQL, the sweep as the sweeper runs it."""

from __future__ import annotations

import itertools
import logging
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
        return cur.execute("SELECT * FROM pgsched.finished_partitions()").fetchall()


def names(conn: psycopg.Connection) -> set[str]:
    return {p["partition_name"] for p in partitions(conn)}


def assert_contiguous(conn: psycopg.Connection) -> None:
    """Partitions each starting where the one before ends: no gap."""
    parts = [p for p in partitions(conn) if not p["is_default"]]
    for before, after in itertools.pairwise(parts):
        assert after["lower_bound"] == before["upper_bound"], (before, after)


def maintain(
    conn: psycopg.Connection, as_of: datetime, keep: str = "30 days", **more: Any
) -> list[tuple[str, str, int | None]]:
    args = "".join(f", {name} => %({name})s" for name in more)
    return conn.execute(
        "SELECT partition_name, action, task_rows FROM pgsched.finished_partitions_maintain("
        f"keep => %(keep)s::interval, as_of => %(as_of)s{args})",
        {"keep": keep, "as_of": as_of, **more},
    ).fetchall()


def finish(conn: psycopg.Connection, task_id: int, outcome: str, at: datetime) -> None:
    """Claim `task_id` (alone due in its lane) and report `outcome` for it as of `at`."""
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, 'w', '400 days',"
        " greatest(now(), %s))",
        (at,),
    ).fetchall()
    assert [c[0] for c in claimed] == [task_id]
    applied = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(%s, %s, %s, as_of => %s)",
        ([task_id], [claimed[0][1]], [outcome], at),
    ).fetchall()
    assert applied == [(True,)]


def where(conn: psycopg.Connection, task_id: int) -> tuple[str, str] | None:
    row = conn.execute(
        "SELECT status::text, tableoid::regclass::text FROM pgsched.tasks WHERE id = %s",
        (task_id,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def part_name(lower: datetime) -> str:
    return "pgsched.tasks_finished_p" + lower.strftime("%Y%m%d")


# -- made ahead --------------------------------------------------------------------------


def test_the_migration_makes_partitions_ahead_and_a_later_run_continues_without_a_gap(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    status = conn.execute("SELECT * FROM pgsched.finished_partitions_status()").fetchone()
    assert status is not None
    period, current_covered, ahead, default_rows = status
    assert (period, current_covered, default_rows) == (DAY, True, 0)
    assert ahead >= 3
    parts = [p for p in partitions(conn) if not p["is_default"]]
    assert parts[0]["partition_name"] == "tasks_finished_archive"
    assert parts[0]["lower_bound"] is None
    assert_contiguous(conn)
    assert maintain(conn, now) == []

    later = now + 10 * DAY
    made = maintain(conn, later)
    assert made and all(action == "created" and rows == 0 for _, action, rows in made)
    assert_contiguous(conn)
    last = [p for p in partitions(conn) if not p["is_default"]][-1]
    assert last["upper_bound"] == day_start(later) + 4 * DAY
    assert made[-1][0] == "tasks_finished_p" + last["lower_bound"].strftime("%Y%m%d")
    assert maintain(conn, later) == []


def test_finished_tasks_land_in_their_period_and_failed_ones_in_tasks_done(
    conn: psycopg.Connection,
) -> None:
    at = day_start(db_now(conn)) + 2 * DAY + timedelta(hours=5)
    completed = schedule(conn, "r")
    finish(conn, completed, "COMPLETED", at)
    failed = schedule(conn, "r", max_attempts=1)
    finish(conn, failed, "FAILED", at)
    cancelled = schedule(conn, "r", run_at=at + DAY)
    conn.execute("SELECT pgsched.cancel_task(%s, 'no', %s)", (cancelled, at))

    period = part_name(day_start(at))
    assert where(conn, completed) == ("COMPLETED", period)
    assert where(conn, cancelled) == ("CANCELLED", period)
    assert where(conn, failed) == ("FAILED", "pgsched.tasks_done")


def test_a_task_finished_beyond_every_partition_waits_in_the_default_and_moves_in_when_made(
    conn: psycopg.Connection,
) -> None:
    far = db_now(conn) + 60 * DAY
    task_id = schedule(conn, "r")
    finish(conn, task_id, "COMPLETED", far)
    assert where(conn, task_id) == ("COMPLETED", "pgsched.tasks_finished_default")
    status = conn.execute("SELECT default_rows FROM pgsched.finished_partitions_status()")
    assert status.fetchone() == (1,)

    made = maintain(conn, far)
    moved = [(name, rows) for name, action, rows in made if rows]
    assert moved == [("tasks_finished_p" + day_start(far).strftime("%Y%m%d"), 1)]
    assert where(conn, task_id) == ("COMPLETED", part_name(day_start(far)))
    assert_contiguous(conn)
    status = conn.execute("SELECT default_rows FROM pgsched.finished_partitions_status()")
    assert status.fetchone() == (0,)


# -- dropped -------------------------------------------------------------------------------


def test_expired_periods_drop_whole_with_their_finished_rows_keeping_dead_live_and_newer(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    at = day_start(now) + 2 * DAY + timedelta(hours=1)
    completed = schedule(conn, "r")
    finish(conn, completed, "COMPLETED", at)
    cancelled = schedule(conn, "r", run_at=at + DAY)
    conn.execute("SELECT pgsched.cancel_task(%s, 'no', %s)", (cancelled, at))
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED", at)
    # A DEAD task far older than the retention: never dropped by age.
    old_dead = schedule(conn, "r", max_attempts=1)
    finish(conn, old_dead, "FAILED", now - 400 * DAY)
    newer = schedule(conn, "r")
    finish(conn, newer, "COMPLETED", at + 5 * DAY)
    pending = schedule(conn, "r", run_at=now + 100 * DAY)
    queued = schedule(conn, "r", run_at=now + timedelta(minutes=5))
    live_before = conn.execute(
        "SELECT * FROM pgsched.tasks WHERE id = ANY(%s) ORDER BY id", ([pending, queued],)
    ).fetchall()

    # As of 31 days after the period of `at` ended: that period has expired, `newer`'s has not.
    as_of = day_start(at) + DAY + 31 * DAY
    acted = maintain(conn, as_of)
    dropped = [name for name, action, _ in acted if action == "dropped"]
    assert "tasks_finished_archive" in dropped
    assert "tasks_finished_p" + day_start(at).strftime("%Y%m%d") in dropped
    assert "tasks_finished_p" + day_start(at + 5 * DAY).strftime("%Y%m%d") not in dropped
    assert not set(dropped) & names(conn)

    assert where(conn, completed) is None
    assert where(conn, cancelled) is None
    assert where(conn, dead) == ("FAILED", "pgsched.tasks_done")
    assert where(conn, old_dead) == ("FAILED", "pgsched.tasks_done")
    assert where(conn, newer) == ("COMPLETED", part_name(day_start(at + 5 * DAY)))
    live_after = conn.execute(
        "SELECT * FROM pgsched.tasks WHERE id = ANY(%s) ORDER BY id", ([pending, queued],)
    ).fetchall()
    assert live_after == live_before
    # Nothing left below the oldest partition kept, so nothing for the next run to drop.
    assert [a for _, a, _ in maintain(conn, as_of)] == []


def test_retention_prune_deletes_by_row_only_outside_the_dated_periods(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    # Finished before the first dated period: the archive's rows, deleted by row.
    archived_old = schedule(conn, "r")
    finish(conn, archived_old, "COMPLETED", now - 40 * DAY)
    archived_recent = schedule(conn, "r")
    finish(conn, archived_recent, "COMPLETED", now - 2 * DAY)
    assert where(conn, archived_old) == ("COMPLETED", "pgsched.tasks_finished_archive")
    # In a dated period, already past the cutoff below but its period is not wholly past.
    at = day_start(now) + 2 * DAY + timedelta(hours=1)
    dated = schedule(conn, "r")
    finish(conn, dated, "COMPLETED", at)

    as_of = at + 30 * DAY + timedelta(hours=1)
    pruned = conn.execute(
        "SELECT tasks FROM pgsched.retention_prune('30 days', 10000, %s)", (as_of,)
    ).fetchone()
    assert pruned == (2,)
    assert where(conn, archived_old) is None and where(conn, archived_recent) is None
    assert where(conn, dated) == ("COMPLETED", part_name(day_start(at)))
    # Its period goes whole once every row of it is past the retention.
    acted = maintain(conn, day_start(at) + 31 * DAY)
    assert ("tasks_finished_p" + day_start(at).strftime("%Y%m%d"), "dropped", None) in acted
    assert where(conn, dated) is None


def test_the_sweep_drops_finished_periods_before_pruning_so_their_keys_go_in_the_same_run(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    keyed = schedule(conn, "r", idempotency_key="k-1")
    finish(conn, keyed, "COMPLETED", now)
    dead = schedule(conn, "r", max_attempts=1, idempotency_key="k-2")
    finish(conn, dead, "FAILED", now)

    counts = RetentionSweep(keep=timedelta(days=30)).run_once(conn, now + 40 * DAY)

    assert counts["finished_partitions_dropped"] >= 1
    assert counts["tasks"] == 0 and counts["idempotency_keys"] == 1
    assert where(conn, keyed) is None
    keys = conn.execute("SELECT idempotency_key FROM pgsched.idempotency_keys").fetchall()
    assert keys == [("k-2",)]
    assert where(conn, dead) == ("FAILED", "pgsched.tasks_done")


# -- locks, bad input ----------------------------------------------------------------------


def test_a_drop_that_cannot_get_its_lock_in_time_changes_nothing_and_the_next_run_drops(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection], caplog: Any
) -> None:
    now = db_now(conn)
    done = schedule(conn, "r")
    finish(conn, done, "COMPLETED", now)
    as_of = now + 40 * DAY
    # Made ahead (and nothing dropped yet), so the sweep below has only drops to do.
    maintain(conn, as_of, keep="400 days")
    later = as_of + 3 * DAY
    expired = sorted(
        p["partition_name"]
        for p in partitions(conn)
        if not p["is_default"] and p["upper_bound"] <= later - 30 * DAY
    )
    assert "tasks_finished_archive" in expired
    # A completion not committed yet: its row is in tasks_finished.
    holder = connect(autocommit=False)
    other = schedule(conn, "r")
    claimed = holder.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, 'w', '1 minute')"
    ).fetchall()
    assert [c[0] for c in claimed] == [other]
    holder.execute(
        "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
        ([other], [claimed[0][1]], ["COMPLETED"]),
    )

    caplog.set_level(logging.WARNING, logger="pgsched.sweeps")
    sweep = RetentionSweep(lock_wait=timedelta(milliseconds=200))
    counts = sweep.maintain_finished_partitions(conn, later)

    assert counts == {"finished_partitions_created": 3, "lock_timeouts": len(expired)}
    warned = sorted(
        r.__dict__["fields"]["partition"] for r in caplog.records if "not dropped" in r.getMessage()
    )
    assert warned == expired
    assert set(expired) <= names(conn)
    assert where(conn, done) is not None
    assert conn.execute("SELECT current_setting('lock_timeout')").fetchone() == ("0",)

    holder.commit()
    holder.close()
    counts = sweep.maintain_finished_partitions(conn, later)
    assert counts == {"finished_partitions_dropped": len(expired)}
    assert not set(expired) & names(conn)
    assert where(conn, done) is None and where(conn, other) is None


def test_making_a_partition_that_cannot_get_its_lock_in_time_makes_nothing(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    later = db_now(conn) + 10 * DAY
    before = partitions(conn)
    reader = connect(autocommit=False)
    reader.execute("SELECT count(*) FROM pgsched.tasks_finished_default")  # holds ACCESS SHARE

    acted = maintain(conn, later, lock_wait="200 milliseconds")

    assert [a for _, a, _ in acted] == ["not_created"]
    assert partitions(conn) == before
    reader.rollback()
    reader.close()
    assert all(a == "created" for _, a, _ in maintain(conn, later))
    assert_contiguous(conn)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("ahead => 0", "ahead must be between 1 and 366"),
        ("ahead => 367", "ahead must be between 1 and 366"),
        ("ahead => NULL", "ahead must be between 1 and 366"),
        ("keep => '0 days'", "keep must be above 0"),
        ("keep => NULL", "keep must be above 0"),
        ("lock_wait => '0 seconds'", "lock_wait must be above 0"),
        ("lock_wait => '2 minutes'", "lock_wait must be above 0"),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    conn: psycopg.Connection, call: str, message: str
) -> None:
    done = schedule(conn, "r")
    finish(conn, done, "COMPLETED", db_now(conn))
    before = partitions(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(
            f"SELECT * FROM pgsched.finished_partitions_maintain({call},"
            " as_of => now() + interval '90 days')"
        )
    assert partitions(conn) == before
    assert where(conn, done) is not None


# -- transitions across the layout -----------------------------------------------------------


def test_completion_cancel_dead_retry_and_discard_move_rows_between_the_tiers(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    period = part_name(day_start(now + DAY))
    at = day_start(now + DAY) + timedelta(hours=2)
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED", at)
    assert conn.execute("SELECT pgsched.dead_retry(task_id => %s, as_of => %s)", (dead, at))
    assert where(conn, dead) == ("QUEUED", "pgsched.tasks_hot")
    finish(conn, dead, "COMPLETED", at + timedelta(minutes=1))
    assert where(conn, dead) == ("COMPLETED", period)

    discarded = schedule(conn, "r", max_attempts=1)
    finish(conn, discarded, "FAILED", at)
    row = conn.execute("SELECT pgsched.dead_discard(%s, 'gone', %s)", (discarded, at)).fetchone()
    assert row == (discarded,)
    assert where(conn, discarded) == ("CANCELLED", period)

    cancelled = schedule(conn, "r", run_at=now + 5 * DAY)
    assert where(conn, cancelled) == ("PENDING", "pgsched.tasks_cold")
    conn.execute("SELECT pgsched.cancel_task(%s, 'no', %s)", (cancelled, at))
    assert where(conn, cancelled) == ("CANCELLED", period)
    # A finished task cannot be cancelled again: refused, nothing moves.
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="has finished"):
        conn.execute("SELECT pgsched.cancel_task(%s, 'again', %s)", (dead, at))
    assert where(conn, dead) == ("COMPLETED", period)
    timeline = conn.execute(
        "SELECT what FROM pgsched.task_timeline WHERE task_id = %s ORDER BY event_id", (dead,)
    ).fetchall()
    assert [w for (w,) in timeline] == [
        "scheduled",
        "PROCESSING",
        "FAILED",
        "QUEUED",
        "PROCESSING",
        "COMPLETED",
    ]


# -- the migration of a populated database -------------------------------------------------


def test_migrating_a_populated_database_keeps_every_task_and_the_layout_works_after(
    new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database()
    # Before the partitions, by the numbered files of earlier releases (the path such a
    # database takes: an earlier pgsched to 0033, then this one).
    migrate_v33(dsn, upto=26)
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = db_now(conn)
        pending = [schedule(conn, "r", run_at=now + 10 * DAY) for _ in range(3)]
        finished = [schedule(conn, "r", max_attempts=1) for _ in range(12)]
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 12, 'w', '1 hour')"
        ).fetchall()
        assert sorted(c[0] for c in claimed) == sorted(finished)
        # Four each: completed long ago, completed a year ahead (an as_of in the future),
        # failed; and one left running.
        outcomes = ["COMPLETED"] * 4 + ["FAILED"] * 4
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s, %s, %s, as_of => %s)",
            (
                [c[0] for c in claimed[:4]],
                [c[1] for c in claimed[:4]],
                outcomes[:4],
                now - 50 * DAY,
            ),
        )
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s, %s, %s, as_of => %s)",
            (
                [c[0] for c in claimed[4:8]],
                [c[1] for c in claimed[4:8]],
                ["COMPLETED"] * 4,
                now + 365 * DAY,
            ),
        )
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
            ([c[0] for c in claimed[8:11]], [c[1] for c in claimed[8:11]], ["FAILED"] * 3),
        )
        queued = schedule(conn, "r", run_at=now + timedelta(minutes=10))
        conn.execute("SELECT pgsched.cancel_task(%s, 'no')", (pending[0],))
        cur = conn.execute("SELECT * FROM pgsched.tasks ORDER BY id")
        old = cur.fetchall()
        # Later migrations add columns; every column the rows had keeps its value.
        columns = ", ".join(d.name for d in cur.description or ())
        statuses: dict[str, int] = dict(
            conn.execute("SELECT status::text, count(*) FROM pgsched.tasks GROUP BY 1").fetchall()
        )
        assert statuses == {
            "PENDING": 2,
            "QUEUED": 1,
            "PROCESSING": 1,
            "COMPLETED": 8,
            "FAILED": 3,
            "CANCELLED": 1,
        }

    migrate_v33(dsn)
    migrate(dsn)

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT {columns} FROM pgsched.tasks ORDER BY id").fetchall() == old
        tiers: dict[str, int] = dict(
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM pgsched.tasks GROUP BY 1"
            ).fetchall()
        )
        assert tiers == {
            "pgsched.tasks_cold": 2,
            "pgsched.tasks_hot": 2,
            "pgsched.tasks_done": 3,
            "pgsched.tasks_finished_archive": 5,
            "pgsched.tasks_finished_default": 4,
        }
        assert_contiguous(conn)
        key = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'tasks_pkey'"
        ).fetchone()
        assert key == ("PRIMARY KEY (id, status, updated_at)",)
        # The layout works after: a completion, a dead retry, a discard, a cancel.
        running = claimed[11]
        row = conn.execute(
            "SELECT applied FROM pgsched.task_finish_many(%s, %s, %s)",
            ([running[0]], [running[1]], ["COMPLETED"]),
        ).fetchone()
        assert row == (True,)
        dead = [c[0] for c in claimed[8:11]]
        conn.execute("SELECT pgsched.dead_retry(task_id => %s)", (dead[0],))
        conn.execute("SELECT pgsched.dead_discard(%s)", (dead[1],))
        conn.execute("SELECT pgsched.cancel_task(%s)", (queued,))
        assert where(conn, dead[0]) == ("QUEUED", "pgsched.tasks_hot")
        assert where(conn, dead[1])[0] == "CANCELLED"
        assert where(conn, dead[2]) == ("FAILED", "pgsched.tasks_done")
        assert where(conn, queued)[0] == "CANCELLED"
        assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (len(old),)


# -- doctor ------------------------------------------------------------------------------------


def doctor_partitions(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    code, checks = doctor_checks(env)
    return code, checks["partitions"]


def test_doctor_watches_the_finished_tasks_partitions(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    code, check = doctor_partitions(db_env)
    assert check["result"] == "pass", check
    assert "finished tasks" in check["detail"]

    task_id = schedule(conn, "r")
    finish(conn, task_id, "COMPLETED", db_now(conn) + 60 * DAY)
    code, check = doctor_partitions(db_env)
    assert check["result"] == "warn", check
    assert "finished tasks' default partition holds 1 task" in check["detail"]

    current = [
        p["partition_name"]
        for p in partitions(conn)
        if not p["is_default"] and p["upper_bound"] > db_now(conn)
    ]
    for name in current:
        conn.execute(f"DROP TABLE pgsched.{name}")
    code, check = doctor_partitions(db_env)
    assert check["result"] == "fail", check
    assert "tasks_finished has no partition for the current day" in check["detail"]
    assert code == 1
