"""The burst benchmark at smoke size: a few thousand tasks go through the cold tier and
promotion and all start, while the HIGH producer's tasks run and are timed by their
handlers, with every figure of the report filled in."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from benchmarks import bench_burst

pytestmark = pytest.mark.slow

TASKS = 5_000


def test_burst_smoke(db_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "burst.json"
    code = bench_burst.main(
        [
            "--dsn",
            db_dsn,
            "--tasks",
            str(TASKS),
            "--high-rate",
            "50",
            "--lead",
            "15",
            "--cap",
            "240",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    document = json.loads(out.read_text())
    r = document["result"]
    assert r["finished"]
    # Every one of them went through the cold tier: one promotion event each.
    assert r["promoted"] == TASKS
    assert r["claimed"] == TASKS and r["completed"] == TASKS
    # None started before its due time (the database's clock decides), all after it.
    assert r["first_start_after_due_s"] >= 0
    assert r["last_start_after_due_s"] >= r["first_start_after_due_s"]
    assert r["drain_rate_per_s"] > 0
    # The HIGH tasks ran and timed themselves; some were due during the burst.
    assert r["high"]["started"] > 0
    assert r["high"]["during_burst"]["n"] + r["high"]["before_burst"]["n"] > 0
    assert r["lock_waits"]["samples"] > 0
    assert r["cpu_drain"]["workers_us_per_task"] > 0
    assert r["cpu_drain"]["postgres_us_per_task"] > 0
    assert all(mib > 0 for mib in r["worker_vmhwm_mib"].values())
    assert len(r["worker_vmhwm_mib"]) == 2
    assert "| last of them started, after due |" in document["markdown"]
    # The WAL of the seeding and of the run, and a burst task's share of it.
    assert r["wal"]["seeding_bytes"] > 0 and r["wal"]["run_bytes"] > 0
    assert 0 < r["wal"]["per_task_bytes"] < 100_000
    assert r["wal_recycled_mb"] is None  # the server given: nothing recycled first
    # The test server keeps no commit timestamps: the claim's parts are not known there.
    assert r["high_parts"]["commit_timestamps"] is False
    assert all(r["high_parts"][name] is None for name in bench_burst.HIGH_PARTS)
    assert "| WAL written: seeding + run, per task |" in document["markdown"]
    with psycopg.connect(db_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pgsched.tasks WHERE task_type = 'burst' AND status <> 'COMPLETED'"
        ).fetchone()
    assert left == (0,)


def test_burst_on_its_own_cluster_splits_high_lateness_into_parts_that_add_up(
    tmp_path: Path,
) -> None:
    """On the throwaway cluster (commit timestamps and WAL timing on), every HIGH task due
    during the burst has its lateness split in four parts; over the same tasks the parts'
    means add up to the lateness' mean."""
    out = tmp_path / "burst.json"
    code = bench_burst.main(["--tasks", "20000", "--lead", "15", "--cap", "240", "--out", str(out)])
    assert code == 0
    r = json.loads(out.read_text())["result"]
    assert r["finished"]
    during = r["high"]["during_burst"]
    assert during["n"] > 0, "no HIGH task came due during the burst"
    parts = r["high_parts"]
    assert parts["commit_timestamps"] is True
    names = bench_burst.HIGH_PARTS
    assert [parts[name]["n"] for name in names] == [during["n"]] * 4
    assert sum(parts[name]["mean"] for name in names) == pytest.approx(during["mean"], abs=0.01)
    # In order: the producer commits, then the claim starts, then it commits.
    assert parts["the_producer"]["min"] >= 0
    assert parts["to_the_claim"]["min"] > 0
    assert parts["the_claim"]["min"] >= 0
    assert r["wal_syncs"]["syncs"] > 0 and r["wal_syncs"]["mean_sync_ms"] > 0


def test_burst_refuses_sizes_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_burst.main(["--tasks", "10"])
    assert exit_info.value.code == 2
    assert "--tasks >= 100" in capsys.readouterr().err
