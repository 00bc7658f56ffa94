"""Lateness: how long after its due time a task starts, at a steady rate of due times.

    python -m benchmarks.bench_lateness                        # 100/s and 1,000/s, 30 s each
    python -m benchmarks.bench_lateness --quick                # the same rates, 5 s each
    python -m benchmarks.bench_lateness --rate 1000 --duration 60 --dsn postgresql://...
    python -m benchmarks.bench_lateness --sweep --processes 2 --rate 1000 5000 10000 15000 20000
                                   # default flags and tuned ones at each rate, and a plot

For each rate R: with one worker process running (`--lanes normal`) and listening, schedule
R x duration tasks in advance, due at exact 1/R spacing, wait until all are done, and
report the claim lateness (`pgsched.task_runs.started_at - scheduled_for`, both by the
database clock) as p50 / p95 / p99 / p99.9 / max in milliseconds: the suite's case 4
(benchmarks/suite.py), on its own.

With --sweep, each rate is run twice, with the worker's default flags and with the tuned
ones (--batch-size 500 --concurrency 500), and the plot benchmarks/plots/lateness_vs_rate.png
shows p50 / p99 / max of each against the offered rate.

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py),
with about the WAL the run writes already written and recycled (--fresh-wal: not), as on a
server that has run before.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import measure, suite
from pgsched.worker.config import WorkerConfig

PLOT = measure.REPO / "benchmarks" / "plots" / "lateness_vs_rate.png"
TUNED = (500, 500)


def plot_sweep(runs: list[dict[str, Any]], out: Path, processes: int) -> None:
    """p50 / p99 / max lateness against the offered rate, default flags and tuned."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = {"p50": ":", "p99": "-", "max": "--"}
    colors = {"default": "#1f77b4", "tuned": "#ff7f0e"}
    for label, color in colors.items():
        mine = sorted((r for r in runs if r["config"] == label), key=lambda r: r["rate_per_s"])
        for stat, style in styles.items():
            xs = [r["rate_per_s"] for r in mine if r["ms"][stat] is not None]
            ys = [max(r["ms"][stat], 0.1) for r in mine if r["ms"][stat] is not None]
            flags = f"batch {mine[0]['batch_size']}, concurrency {mine[0]['concurrency']}"
            ax.plot(xs, ys, style, marker="o", color=color, label=f"{label} ({flags}) {stat}")
    ax.axhline(25, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(f"offered rate, tasks/s due ({processes} worker processes)")
    ax.set_ylabel("lateness, ms (claim - due time)")
    ax.set_title("Lateness against the offered rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_lateness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rate", type=int, nargs="+", default=None, help="tasks/s (100 1000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per rate (30)")
    parser.add_argument("--quick", action="store_true", help="5 s per rate")
    parser.add_argument("--processes", type=int, default=1, help="worker processes (1)")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="worker --batch-size (the plan's: 500)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="worker --concurrency (the plan's: 500)"
    )
    parser.add_argument(
        "--worker-flags", default="", help="more `pgsched worker` flags, one string"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="default and tuned flags at each rate, plotted"
    )
    parser.add_argument("--plot", type=Path, default=PLOT, help="where --sweep's plot goes")
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument(
        "--fresh-wal",
        action="store_true",
        help="do not recycle WAL first (measure.start_server): segments made during the run",
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "lateness.json")
    args = parser.parse_args(argv)
    plan = suite.Plan.quick_plan() if args.quick else suite.Plan.full()
    rates = args.rate or list(plan.lateness_rates)
    duration = args.duration or plan.lateness_duration_s
    extra = shlex.split(args.worker_flags)
    defaults = WorkerConfig()
    configs = [("flags", args.batch_size, args.concurrency, extra)]
    if args.sweep:
        configs = [
            ("default", defaults.batch_size, defaults.concurrency, extra),
            ("tuned", TUNED[0], TUNED[1], extra),
        ]
    runs = []
    scheduled = int(sum(rates) * duration * len(configs))
    recycled_mb = 0 if args.fresh_wal or args.dsn else measure.wal_to_recycle_mb(scheduled)
    with measure.database(args.dsn, recycled_mb) as dsn:
        for rate in rates:
            for label, batch_size, concurrency, flags in configs:
                measure.step(f"lateness at {rate:,}/s for {duration:g}s ({label})")
                run = suite.pgsched_lateness(
                    dsn,
                    rate,
                    duration,
                    plan,
                    processes=args.processes,
                    batch_size=batch_size,
                    concurrency=concurrency,
                    extra=flags,
                )
                run["config"] = label
                run["loadavg"] = measure.loadavg()
                measure.note(measure.lateness_line(run) + f" (load avg {run['loadavg'][0]})")
                runs.append(run)
    if args.sweep:
        plot_sweep(runs, args.plot, args.processes)
    measure.write_json(
        args.out,
        {
            "benchmark": "lateness",
            "command": " ".join(["python -m benchmarks.bench_lateness", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "wal_recycled_mb": recycled_mb,
            "results": runs,
        },
    )
    return 0 if all(r["all_completed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
