"""The per-index benchmark at a tiny size: every shipped statement is planned, every
index of the measured tiers is listed with its users and its cost, and the drain's
counts are the ones each task's path is known to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_index_use

pytestmark = pytest.mark.slow

DRAIN = 300


def test_index_use_smoke(db_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "index_use.json"
    code = bench_index_use.main(
        ["--dsn", db_dsn, "--finished", "2000", "--drain", str(DRAIN), "--out", str(out)]
    )
    assert code == 0
    result = json.loads(out.read_text())

    # The shipped statements ran with their parameters and had their plans logged: the
    # claim path, the sweeps and the pages all of them; a statement added since the
    # benchmark's parameters were written may be refused its NULLs (it is listed).
    statements = result["statements"]
    planned = {s["name"] for s in statements if s.get("plans") and "error" not in s}
    assert {
        "task_claim_many",
        "task_finish_many",
        "task_heartbeat_many",
        "work_record_done_many",
        "task_promote_due",
        "lease_rescue_all",
        "retention_prune",
        "task_schedule_many",
        "dashboard_task_search",
        "dashboard_task_events",
        "history",
        "task_timeline",
        "dead_page",
    } <= planned
    refused = [s["statement"] for s in statements if "error" in s or not s.get("plans")]
    assert len(refused) <= len(statements) // 20, refused

    by_index = {row["index"]: row for row in result["indexes"]}
    # The claim reads the hot tier through its index; promotion the cold tier's due range.
    assert "task_claim_many" in by_index["tasks_hot_tenant_idx"]["used_by"]
    assert "task_promote_due" in by_index["tasks_cold_promotable_idx"]["used_by"]
    assert "task_timeline" in by_index["task_events_task_idx"]["used_by"]
    # A search by due time reads each big tier's due index: the finished tier's too.
    assert "dashboard_task_search" in by_index["tasks_finished_due_idx"]["used_by"]
    # Partitions are reported by their tier's index, their sizes summed.
    assert "tasks_finished_archive_type_idx" in by_index["tasks_finished_type_idx"]["partitions"]
    assert by_index["tasks_finished_type_idx"]["bytes"] > 0
    assert not [name for name in by_index if name.startswith("task_events_archive")]

    plain, keyed = result["drains"]
    assert plain["completed"] == DRAIN and keyed["completed"] == 2 * DRAIN
    # The drain's tuples: the claim updates the hot row, the completion moves it out (a
    # delete here, an insert into a finished partition) with two events.
    hot = plain["drain"]["tables"]["tasks_hot"]
    assert hot["upd"] == pytest.approx(1.0, abs=0.02)
    assert hot["del"] == pytest.approx(1.0, abs=0.02)
    # Counted from the WAL: each event row is one insertion into each events index, each
    # scheduled task one into each of the hot tier's QUEUED indexes.
    assert by_index["task_events_task_idx"]["drain_insertions"]["plain"] == pytest.approx(
        2.0, abs=0.05
    )
    # The BRIN indexes on ranges growing with insertion order (migration 0050) take none.
    assert by_index["task_events_id_idx"]["drain_insertions"].get("plain", 0) == 0
    assert by_index["tasks_finished_updated_idx"]["drain_insertions"].get("plain", 0) == 0
    # Which statements read them shows at scale: at this size the planner reads the small
    # tables whole (test_event_count_plans and test_dashboard_plans check the plans).
    assert by_index["tasks_hot_claim_idx"]["schedule_insertions"]["plain"] == pytest.approx(
        1.0, abs=0.05
    )
    assert by_index["completed_work_pkey"]["drain_insertions"]["keyed"] == pytest.approx(
        1.0, abs=0.05
    )
    assert by_index["completed_work_pkey"]["drain_insertions"].get("plain", 0) == 0
    assert "| `tasks_hot_claim_idx` |" in result["markdown"]


def test_wal_is_read_between_positions_written_with_synchronous_commit_off(db_dsn: str) -> None:
    # The test clusters commit asynchronously: the flush position may not have moved past
    # a phase's writes (equal positions), and the insert position runs ahead of it until a
    # flush. Both must give the phase's records, not an error.
    import psycopg

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute("SET synchronous_commit = off")
        here = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        assert bench_index_use.wal_by_relation(conn, here, here) == {}
        conn.execute("SELECT pgsched.schedule_task('noop', '{}'::jsonb, now())")
        there = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        [wal] = bench_index_use.wal_of_phases(conn, [(here, there)])
    assert wal.get("tasks_hot", {}).get("bytes", 0) > 0


def test_wal_of_a_phase_spanning_segments_is_still_there_to_read(db_dsn: str) -> None:
    # A phase of 10,000 tasks writes several WAL segments. Flushing by CHECKPOINT removed
    # the segment the phase started in, and reading it back failed ("requested WAL segment
    # ... has already been removed"); so could any other checkpoint meanwhile (here: the
    # test server's databases dropped by other tests), until the phase held its WAL.
    import psycopg

    with bench_index_use.holding_wal(db_dsn), psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute("SET synchronous_commit = off")
        conn.execute("CHECKPOINT")
        here = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        conn.execute("SELECT pgsched.schedule_task('noop', '{}'::jsonb, now())")
        for _ in range(3):
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("SELECT pgsched.schedule_task('noop', '{}'::jsonb, now())")
        there = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        # What the other checkpoints do, at the worst moment.
        conn.execute("CHECKPOINT")
        [wal] = bench_index_use.wal_of_phases(conn, [(here, there)])
    inserts = sum(n for kind, n in wal["tasks_hot"]["records"].items() if "INSERT" in kind)
    assert inserts == 4
