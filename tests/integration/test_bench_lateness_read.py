"""Reading a run's lateness (measure.lateness_of_tasks) right after the run wrote its
events: the statistics are brought up to date first. Planned on the statistics from before
the run, the join behind pgsched.task_runs scanned the events once per task, and reading
100,000 tasks' lateness took minutes."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from benchmarks import measure

pytestmark = pytest.mark.slow

TASKS = 300


def test_lateness_is_read_on_the_runs_statistics(db_dsn: str, conn: psycopg.Connection) -> None:
    # Autovacuum's analyze, coming in the middle, would make the check below meaningless.
    for (partition,) in conn.execute(
        "SELECT inhrelid::regclass::text FROM pg_inherits"
        " WHERE inhparent = 'pgsched.task_events'::regclass"
    ).fetchall():
        conn.execute(f"ALTER TABLE {partition} SET (autovacuum_enabled = off)")
    due = measure.db_now(db_dsn) - timedelta(seconds=1)
    lo, hi, _ = measure.schedule_at(db_dsn, [due] * TASKS)
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'w1')", (TASKS,)
    ).fetchall()
    assert len(rows) == TASKS
    ids, tokens = [r[0] for r in rows], [r[1] for r in rows]
    conn.execute(
        "SELECT pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[], %s::text[],"
        " %s::interval[])",
        (ids, tokens, ["COMPLETED"] * TASKS, [None] * TASKS, [None] * TASKS),
    )
    # Every events partition, as the run left it: not analyzed since its rows came.
    analyzed = "SELECT count(*) FROM pg_stat_user_tables WHERE relname LIKE 'task_events%%'"
    never = " AND last_analyze IS NULL AND last_autoanalyze IS NULL"
    partitions = conn.execute(analyzed).fetchone()
    assert partitions is not None and partitions[0] > 0
    assert conn.execute(analyzed + never).fetchone() == partitions

    values = measure.lateness_of_tasks(conn, lo, hi)

    assert len(values) == TASKS
    assert all(v >= 0 for v in values)
    assert conn.execute(analyzed + never).fetchone() == (0,)
