"""The soak benchmark's smoke form: a short run with real worker and sweeper processes
against this test's database. It checks what the run produces (the table, the JSON and
its series, the retention sweeps' deletions, the plot when matplotlib is installed), never
how fast anything was: speed belongs to the benchmark's long form."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import psycopg

from benchmarks.bench_soak import SERIES, sweep_runs
from tests.support.paths import REPO_ROOT


def test_a_short_soak_writes_its_table_json_and_plot(tmp_path: Path, db_dsn: str) -> None:
    out, png = tmp_path / "soak.json", tmp_path / "soak.png"
    argv = [
        sys.executable,
        "-m",
        "benchmarks.bench_soak",
        "--dsn",
        db_dsn,
        "--minutes",
        "0.35",
        "--rate",
        "50",
        "--schedules",
        "3",
        "--sample-seconds",
        "2",
        # Short enough that tasks finished early in the run are pruned before its end.
        "--retention-minutes",
        "0.12",
        "--retention-interval",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
        "--plot",
        str(png),
    ]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    document = json.loads(out.read_text())
    samples = document["samples"]
    assert len(samples) >= 5  # 21 s sampled every 2 s
    assert [s["t_min"] for s in samples] == sorted(s["t_min"] for s in samples)
    for series in SERIES:
        assert all(series.name in s for s in samples), series.name
    for name in ("hot_mib", "done_mib", "events_mib", "db_mib", "pg_wal_mib"):
        assert all(s[name] > 0 for s in samples), name
    assert all(s["events_partitions"] >= 1 for s in samples)
    assert document["completed_total"] > 0
    assert document["scheduled_one_off"] > 0
    assert any(s["lateness_p99_ms"] is not None for s in samples)
    # The sweeper really pruned: finished tasks and their events were deleted.
    assert document["sweeps"]["retention"]["runs"] >= 1
    assert document["sweeps"]["retention"]["counted"]["tasks"] > 0
    # The retention sweep as of the next period drops the run's partitions of task_events
    # and of finished tasks.
    after_period = document["end_of_period"]
    assert after_period["counts"]["partitions_dropped"] >= 1
    assert after_period["after"]["events_mib"] < after_period["before"]["events_mib"]
    # The finished tasks go with their partitions too (sql/0027), not by row.
    assert after_period["counts"]["finished_partitions_dropped"] >= 1
    assert after_period["after"]["done_mib"] < after_period["before"]["done_mib"]
    assert set(document["flatness"]) == {series.name for series in SERIES}
    assert document["exit_codes"] == [0, 0]

    header = next(line for line in done.stdout.splitlines() if line.lstrip().startswith("min "))
    assert "done/s" in header and "p99 ms" in header and "hot dead" in header
    assert "warm-up" in done.stdout

    if importlib.util.find_spec("matplotlib") is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert document["plot"] == str(png)
    else:
        assert not png.exists()
        assert "no plot: matplotlib is not installed" in done.stdout
        assert document["plot"] is None

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'soak-%'"
        ).fetchone()
    assert left == (0,)  # the run's processes and their sessions are gone


def test_sweep_lines_are_read_from_the_sweepers_log_format() -> None:
    log = (
        "2026-12-03 16:00:00,001 INFO pgsched.sweeps: sweep retention:"
        " {'tasks': 120, 'events': 250, 'idempotency_keys': 30} (0.042s)\n"
        "2026-12-03 16:00:00,002 INFO pgsched.sweeps: sweep rescue:"
        " {'promoted_late': 0, 'leases_rescued': 2, 'overdue_woken': 0} (0.003s)\n"
        "2026-12-03 16:00:01,000 INFO pgsched.sweeps: sweeper leads\n"
    )
    assert sweep_runs(log) == [
        {
            "at": "2026-12-03 16:00:00",
            "sweep": "retention",
            "counts": {"tasks": 120, "events": 250, "idempotency_keys": 30},
            "seconds": 0.042,
        },
        {
            "at": "2026-12-03 16:00:00",
            "sweep": "rescue",
            "counts": {"promoted_late": 0, "leases_rescued": 2, "overdue_woken": 0},
            "seconds": 0.003,
        },
    ]
