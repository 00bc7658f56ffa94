"""The workflows benchmark's smoke form: tiny sizes through real worker processes against
this test's database. It checks what the run produces (every scenario's row, release
latencies read from the events, CPU per edge, the flatness ratio, the JSON), never how
fast anything was: speed belongs to the benchmark's full sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


def test_a_smoke_run_prints_its_table_and_writes_its_json(tmp_path: Path, db_dsn: str) -> None:
    out = tmp_path / "workflows.json"
    argv = [sys.executable, "-m", "benchmarks.bench_workflows", "--smoke", "--dsn", db_dsn]
    done = subprocess.run(
        [*argv, "--out", str(out), "--cap", "240"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| fan-out | 100 |" in done.stdout
    assert "claim flatness:" in done.stdout
    results = json.loads(out.read_text())
    rows = {r["scenario"]: r for r in results["scenarios"]}
    assert set(rows) == {"fan-out", "fan-in", "chain", "batch"}
    # Every child was claimed after its parent completed, and each was measured.
    assert rows["fan-out"]["latency_s"]["n"] == 50
    assert rows["chain"]["latency_s"]["n"] == 9
    assert rows["fan-in"]["latency_s"]["n"] == rows["batch"]["latency_s"]["n"] == 1
    assert all(r["latency_s"]["min"] >= 0 for r in rows.values())
    assert all(r["cpu_us_per_edge"] > 0 for r in rows.values())
    assert results["flatness"]["ratio"] > 0
