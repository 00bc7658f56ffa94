"""The single-node-against-cluster benchmark at a tiny size, on a cluster of its own: both
modes drain their tasks with exactly two events each and run the paced load (checked
inside the benchmark), drain again beside future tasks left in the cold tier, and the
side-by-side table is written."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_citus


def test_bench_citus_smoke(tmp_path: Path) -> None:
    out = tmp_path / "citus.json"
    small = ["--tasks", "300", "--tenants", "8", "--rate", "50", "--seconds", "4"]
    code = bench_citus.main([*small, "--future", "3000", "--out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert [r["mode"] for r in result["results"]] == ["single", "distributed"]
    for run in result["results"]:
        assert run["drain"]["verification"]["ok"], run["drain"]["verification"]
        assert run["lateness"]["verification"]["ok"], run["lateness"]["verification"]
        assert run["drain"]["tasks_per_s"] > 0
        # The future tasks stay in the cold tier while the second drain runs beside them.
        assert run["future"]["in_cold_tier"] == 3000
        assert run["drain_beside_future"]["verification"]["ok"]
        assert run["flatness"] > 0
    assert result["table"][0]["figure"] == "drain tasks/s"
