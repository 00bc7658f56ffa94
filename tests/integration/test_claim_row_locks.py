"""A claim writes one row lock per task it takes, counted in the WAL.

The claim locks each row (FOR UPDATE SKIP LOCKED), then rewrites it. When the new version
does not fit on the row's page, Postgres first logs the old version locked once more
before moving it: with full pages that was nearly every claimed row (1.93 Heap/LOCK
records per task). The hot tier's pages keep room for a claimed version of each row
(sql/0044), so each claimed row is locked in the WAL once, in the fair order and the plain.
"""

from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest

TASKS = 1000


def _heap_records(conn: psycopg.Connection, start: str, end: str) -> Counter[str]:
    """The WAL records between two LSNs whose first block is tasks_hot's heap, by type."""
    filenode = conn.execute("SELECT pg_relation_filenode('pgsched.tasks_hot'::regclass)").fetchone()
    assert filenode is not None
    records: Counter[str] = Counter()
    for rmgr, rtype in conn.execute(
        "SELECT resource_manager, record_type FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)"
        " WHERE block_ref ~ %s",
        (start, end, rf"rel \d+/\d+/{filenode[0]}\y"),
    ):
        records[f"{rmgr}/{rtype}"] += 1
    return records


def _inserted(conn: psycopg.Connection) -> str:
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _flushed_to(conn: psycopg.Connection, lsn: str) -> None:
    """Wait until the WAL up to lsn is on disk, where pg_walinspect reads it (the WAL
    writer flushes a commit that did not wait for its flush within wal_writer_delay)."""
    deadline = time.monotonic() + 30
    while conn.execute("SELECT pg_current_wal_flush_lsn() < %s::pg_lsn", (lsn,)).fetchone() == (
        True,
    ):
        assert time.monotonic() < deadline, f"WAL not flushed to {lsn}"
        time.sleep(0.05)


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain"])
def test_a_claim_locks_each_row_once(conn: psycopg.Connection, fair: bool) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (fair,))
    # Five tenants of 200 each: every fair claim of 100 takes 20 of each.
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('job'::text, ARRAY[%(n)s]),"
        " tenant_ids => ARRAY(SELECT 't' || (g %% 5) FROM generate_series(1, %(n)s) AS g),"
        " run_ats => ARRAY(SELECT now() - interval '1 minute' + g * interval '1 ms'"
        "                  FROM generate_series(1, %(n)s) AS g))",
        {"n": TASKS},
    )
    start = _inserted(conn)
    claimed = 0
    while True:
        rows = conn.execute(
            "SELECT id FROM pgsched.task_claim_many('NORMAL', 100, 'w', '5 minutes')"
        ).fetchall()
        if not rows:
            break
        claimed += len(rows)
    end = _inserted(conn)
    _flushed_to(conn, end)
    records = _heap_records(conn, start, end)
    assert claimed == TASKS
    updates = records["Heap/UPDATE"] + records["Heap/UPDATE+INIT"] + records["Heap/HOT_UPDATE"]
    assert updates == TASKS, records
    assert records["Heap/LOCK"] == TASKS, records
