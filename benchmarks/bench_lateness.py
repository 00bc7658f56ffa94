"""Lateness: how long after its due time a task starts, at a steady rate of due times.

    python -m benchmarks.bench_lateness                        # 100/s and 1,000/s, 30 s each
    python -m benchmarks.bench_lateness --quick                # the same rates, 5 s each
    python -m benchmarks.bench_lateness --rate 1000 --duration 60 --dsn postgresql://...

For each rate R: with one worker process running (`--lanes normal`) and listening, schedule
R x duration tasks in advance, due at exact 1/R spacing, wait until all are done, and
report the claim lateness (`pgsched.task_runs.started_at - scheduled_for`, both by the
database clock) as p50 / p95 / p99 / p99.9 / max in milliseconds: the suite's case 4
(benchmarks/suite.py), on its own.

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import measure, suite


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_lateness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rate", type=int, nargs="+", default=None, help="tasks/s (100 1000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per rate (30)")
    parser.add_argument("--quick", action="store_true", help="5 s per rate")
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "lateness.json")
    args = parser.parse_args(argv)
    plan = suite.Plan.quick_plan() if args.quick else suite.Plan.full()
    rates = args.rate or list(plan.lateness_rates)
    duration = args.duration or plan.lateness_duration_s
    runs = []
    with measure.database(args.dsn) as dsn:
        for rate in rates:
            measure.step(f"lateness at {rate:,}/s for {duration:g}s")
            run = suite.pgsched_lateness(dsn, rate, duration, plan)
            measure.note(measure.lateness_line(run))
            runs.append(run)
    measure.write_json(
        args.out,
        {
            "benchmark": "lateness",
            "command": " ".join(["python -m benchmarks.bench_lateness", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "results": runs,
        },
    )
    return 0 if all(r["all_completed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
