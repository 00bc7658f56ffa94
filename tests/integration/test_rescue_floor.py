"""The lease rescue's floor (sql/code/leases_rescue.sql, 0047): from SQL, a floor hides
exactly the leases that expired before it and NULL is the rescue as before; under a held
snapshot, a rescue from a floor steps over none of the dead lease entries a rescue from the
start reads."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import psycopg

from tests.support.query_plans import logged_plans, plan_nodes
from tests.support.worker_helpers import db_now

RESCUE = "SELECT pgsched.lease_rescue_expired('NORMAL', 1000, %s, %s)"


def claim(conn: psycopg.Connection, n: int, lease: str) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM pgsched.task_claim_many('NORMAL', %s, 'w-sql', %s::interval)",
            (n, lease),
        )
    ]


def test_the_floor_hides_leases_that_expired_before_it_and_null_is_no_floor(
    conn: psycopg.Connection,
) -> None:
    conn.execute("SELECT pgsched.schedule_tasks(ARRAY['job', 'job'])")
    assert len(claim(conn, 2, "1 minute")) == 2
    now = db_now(conn)
    later = now + timedelta(minutes=10)
    with conn.transaction(force_rollback=True):
        # Both leases expire about a minute from now: a floor past that hides them ...
        assert conn.execute(RESCUE, (later, now + timedelta(minutes=2))).fetchone() == (0,)
        # ... one before it does not.
        assert conn.execute(RESCUE, (later, now + timedelta(seconds=30))).fetchone() == (2,)
    with conn.transaction(force_rollback=True):
        assert conn.execute(RESCUE, (later, None)).fetchone() == (2,)
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE status = 'PROCESSING'"
    ).fetchone() == (2,)


def lease_index_buffers(conn: psycopg.Connection, not_before: object) -> int:
    _, plans = logged_plans(
        conn, "SELECT pgsched.lease_rescue_expired('NORMAL', 1000, NULL, %s)", (not_before,)
    )
    scans = [
        n for p in plans for n in plan_nodes(p) if n.get("Index Name") == "tasks_hot_lease_idx"
    ]
    assert scans, plans
    return sum(int(n["Shared Hit Blocks"]) + int(n["Shared Read Blocks"]) for n in scans)


def test_under_a_held_snapshot_a_rescue_from_its_floor_skips_the_dead_lease_entries(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    holder = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot that keeps vacuum from the dead entries
    conn.execute("SELECT pgsched.schedule_tasks(array_fill('job'::text, ARRAY[20000]))")
    # Claimed with a lease of a second and finished: 20,000 dead entries in the lease
    # index, all of them expired a moment later.
    for _ in range(20):
        rows = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1000, 'w-sql',"
            " '1 second')"
        ).fetchall()
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[])",
            ([r[0] for r in rows], [r[1] for r in rows], ["COMPLETED"] * len(rows)),
        )
    conn.execute("SELECT pg_sleep(1.1)")
    floor = db_now(conn) - timedelta(milliseconds=100)
    from_start = lease_index_buffers(conn, None)
    from_floor = lease_index_buffers(conn, floor)
    holder.rollback()
    assert from_floor <= 3, from_floor
    assert from_start >= 20 * from_floor, (from_start, from_floor)
