"""The audit-writer benchmark at a tiny size: every variant drains its tasks with the
events it should write (checked inside the benchmark), and the database is left in
trigger mode."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from benchmarks import bench_audit_writer


def test_audit_writer_smoke(db_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "audit_writer.json"
    code = bench_audit_writer.main(
        ["--dsn", db_dsn, "--tasks", "1200", "--rounds", "1", "--out", str(out)]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert [r["variant"] for r in result["rounds"]] == ["trigger", "functions", "no-events"]
    assert [r["events"] for r in result["rounds"]] == [2400, 2400, 0]
    assert all(r["pg_cpu_us_per_task"] > 0 for r in result["rounds"])
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT audit_writer FROM pgsched.settings").fetchone() == ("trigger",)
        assert conn.execute("SELECT pgsched.events_by_functions()").fetchone() == (False,)
