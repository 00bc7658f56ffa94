"""End-to-end throughput of no-op tasks through real worker processes.

    python -m benchmarks.bench_throughput                      # the full sweep
    python -m benchmarks.bench_throughput --quick              # 20,000 tasks, one setting
    python -m benchmarks.bench_throughput --keyed              # each task with an idempotency key
    python -m benchmarks.bench_throughput --tasks 100000 --batch-size 250 500 \\
        --concurrency 500 --processes 1 2 --dsn postgresql://... --out results.json

For each setting (worker processes x batch size x concurrency): empty the hot and done
tiers, schedule N tasks due now into the NORMAL lane through `pgsched.schedule_tasks`, start
`pgsched worker --app benchmarks.noop_app:app --lanes normal ...` as subprocesses, and wait
until every task is COMPLETED. Throughput is N over the span from the first PROCESSING
event to the last COMPLETED one, as pgsched.task_events records them; the run is checked
to have written exactly two events per task. CPU of the workers, of Postgres and of the
rest of the machine comes from /proc over the same span (benchmarks/measure.py).

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import measure


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks per setting (100,000)")
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=None, help="default: 50 100 250 500"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="50 200 500")
    parser.add_argument("--processes", type=int, nargs="+", default=None, help="1 2")
    parser.add_argument(
        "--task-type",
        default="noop",
        choices=["noop", "noop_sync"],
        help="noop: async handler; noop_sync: plain def (runs in a thread)",
    )
    parser.add_argument(
        "--keyed",
        action="store_true",
        help="give every task an idempotency key (the worker then writes the ledger)",
    )
    parser.add_argument(
        "--max-seconds", type=float, default=300.0, help="give a setting up after this long"
    )
    parser.add_argument(
        "--quick", action="store_true", help="20,000 tasks, batch 100, concurrency 50"
    )
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "throughput.json")
    args = parser.parse_args(argv)
    # --quick: one short setting (any of these given explicitly still wins).
    quick = args.quick
    args.tasks = args.tasks or (20_000 if quick else 100_000)
    args.batch_size = args.batch_size or ([100] if quick else [50, 100, 250, 500])
    args.concurrency = args.concurrency or ([50] if quick else [50, 200, 500])
    args.processes = args.processes or ([1] if quick else [1, 2])
    if quick:
        args.max_seconds = min(args.max_seconds, 40.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs: list[dict[str, Any]] = []
    with measure.database(args.dsn) as dsn:
        server = measure.server_settings(dsn)
        measure.step(f"{server['version']}; {len(server['settings'])} settings not at default")
        for processes in args.processes:
            for batch in args.batch_size:
                for concurrency in args.concurrency:
                    measure.step(
                        f"{args.tasks:,} x {args.task_type}{' (keyed)' if args.keyed else ''}:"
                        f" {processes} process(es), batch {batch}, concurrency {concurrency}"
                    )
                    run = measure.pgsched_drain(
                        dsn,
                        args.tasks,
                        processes=processes,
                        batch_size=batch,
                        concurrency=concurrency,
                        cap_s=args.max_seconds,
                        name="bench-throughput",
                        task_type=args.task_type,
                        keyed=args.keyed,
                    )
                    measure.note(measure.drain_line(run))
                    runs.append(run)
    valid = [r for r in runs if (r["verification"] or {}).get("ok")]
    best = max(valid, key=lambda r: r["tasks_per_s"], default=None)
    if best is not None:
        measure.step(
            f"best: {best['tasks_per_s']:,} tasks/s with {best['processes']} process(es),"
            f" batch {best['batch_size']}, concurrency {best['concurrency']}"
        )
    measure.write_json(
        args.out,
        {
            "benchmark": "throughput",
            "command": " ".join(["python -m benchmarks.bench_throughput", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "postgres": server,
            "results": runs,
            "best": best,
            "all_events_ok": len(valid) == len(runs),
        },
    )
    return 0 if len(valid) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
