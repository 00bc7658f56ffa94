"""bench_dashboard's smoke form: every page timed on a small database, and the p50 target
checked (CI's size; the 2,000,000-task run is the benchmark's long form)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


def test_a_small_dashboard_bench_times_every_page_within_its_target(
    tmp_path: Path, db_dsn: str
) -> None:
    out = tmp_path / "dashboard.json"
    argv = [
        sys.executable,
        "-m",
        "benchmarks.bench_dashboard",
        "--dsn",
        db_dsn,
        "--tasks",
        "20000",
        "--completed",
        "1000",
        "--dead",
        "250",
        "--requests",
        "5",
        # The target is 50 ms at 2,000,000 tasks on a quiet machine; a CI machine runs
        # other tests beside this one.
        "--max-p50-ms",
        "250",
        "--out",
        str(out),
    ]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    pages = document["pages_ms"]
    for name in ("overview", "dead lane, page 2", "dead lane by error class", "search by id"):
        assert name in pages, name
    assert all(p["p50"] > 0 for p in pages.values())
    assert document["over_p50_target"] == {}
