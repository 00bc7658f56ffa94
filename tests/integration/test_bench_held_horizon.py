"""The held-horizon benchmark at a tiny size: both phases run, each interval has claims
timed from the worker's log and lateness from task_runs, and the held phase's snapshot
shows as an xmin age."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_held_horizon

pytestmark = pytest.mark.slow


def test_held_horizon_smoke(db_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "held_horizon.json"
    code = bench_held_horizon.main(
        [
            "--dsn",
            db_dsn,
            "--rate",
            "100",
            "--minutes",
            "0.1",
            "--interval",
            "3",
            "--warmup",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    rows = result["intervals"]
    assert [r["phase"] for r in rows] == ["unheld", "unheld", "held", "held"]
    assert all(r["claims"] > 0 and r["claim_ms_p99"] is not None for r in rows)
    assert all(r["started"] > 0 and r["late_ms_p99"] is not None for r in rows)
    # The holder's snapshot is there while held, and gone with the phase.
    assert all(r["xmin_age"] for r in rows if r["phase"] == "held")
    unheld, held = result["summaries"]
    assert unheld["started"] >= 0.99 * unheld["tasks"] > 0
    assert held["started"] >= 0.99 * held["tasks"] > 0
    assert set(result["ratios_held_to_unheld"]) >= {"claim_ms_p99", "late_ms_p99"}
