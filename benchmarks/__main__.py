"""The pgsched benchmark suite.

    python -m benchmarks                 # full: 10M tasks, peers side by side (about an hour)
    python -m benchmarks --quick         # CI sizes: a few minutes
    python -m benchmarks --out DIR       # where results.json, RESULTS.md and plots/ go

Starts its own throwaway, durable Postgres (benchmarks/pgserver.py: fsync and
synchronous_commit on; it prints every other setting and why), then runs, in order:

    case 2  backlog flatness, empty cold tier (and 1M future tasks in a full run)
    case 1  scheduling: 10M (quick 200k) tasks in bulk, bytes on disk, one at a time,
            commit latency
    case 2  backlog flatness with those 10M (200k) tasks present
    case 5  the claim path's bytes, a promotion chunk out of the full cold tier
    case 4  (promotion) a slice due at a steady rate coming out of that cold tier through
            `pgsched scheduler`'s promotion sweep
    case 3  no-op throughput sweep (fresh database)
    case 4  lateness: 100/s, 1,000/s, stepped up to the highest sustained rate
    case 6  unhealthy database: a transaction held open under load
    dashboard  every page's p50 at 2,000,000 tasks (quick: 20,000), target 50 ms
    peers   procrastinate and PGQueuer: cases 3, 2 and 4 (each in its own database)

and writes DIR/results.json, DIR/RESULTS.md and DIR/plots/*.png (default DIR:
benchmarks/results/suite-full or suite-quick). A full run also publishes RESULTS.md and
the plots to benchmarks/ (--publish / --no-publish).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_backlog,
    bench_dashboard,
    bench_unhealthy,
    measure,
    peers,
    report,
    suite,
)
from benchmarks.measure import step
from benchmarks.pgserver import DEFAULT_SETTINGS
from benchmarks.suite import Plan, stage


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="CI sizes (a few minutes)")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument(
        "--publish",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy RESULTS.md and plots/ to benchmarks/ (default: on for full runs)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated stages to skip: case1..case6, dashboard, peers (for development)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = (
            measure.REPO
            / "benchmarks"
            / "results"
            / ("suite-quick" if args.quick else "suite-full")
        )
    if args.publish is None:
        args.publish = not args.quick
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # SIGTERM unwinds like Ctrl-C: workers are stopped and the server removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    plan = Plan.quick_plan() if args.quick else Plan.full()
    started = time.monotonic()
    results: dict[str, Any] = {
        "command": " ".join(
            ["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]
        ),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "plan": plan.as_dict(),
        "machine": measure.machine_info(),
        "loadavg_start": measure.loadavg(),
    }
    m = results["machine"]
    step(
        f"pgsched benchmark suite, {'quick' if plan.quick else 'full'} mode: {m['nproc']} CPUs"
        f" ({m['cpu_model']}), {m['memory_gib']} GiB, Python {m['python']};"
        f" load average {results['loadavg_start']}"
    )
    step("packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items()))
    step("starting a throwaway Postgres (durable: fsync and synchronous_commit on)")
    server = measure.start_server()
    results["server_settings_why"] = {
        s.name: {"value": s.value, "why": s.why} for s in DEFAULT_SETTINGS
    }
    try:
        backlog_dsn = measure.pgsched_database(server, "pgsched_backlog")
        results["server"] = measure.server_settings(backlog_dsn)
        run_pgsched_backlog_and_scheduling(backlog_dsn, plan, server, results, skip)

        live = measure.pgsched_database(server, "pgsched_live")
        if "case3" not in skip:
            with stage(results, "case3"):
                results["case3"] = suite.case3_throughput(live, plan)
        if "case4" not in skip:
            with stage(results, "case4"):
                results["case4"] = suite.case4_lateness(live, plan)
        if "case6" not in skip:
            with stage(results, "case6"):
                results["case6"] = bench_unhealthy.run(live, plan)
        if "dashboard" not in skip:
            with stage(results, "dashboard"):
                results["dashboard"] = run_dashboard(plan)
        if "peers" not in skip:
            results["peers"] = []
            for p in peers.PEERS:
                with stage(results, f"peers: {p.name}"):
                    results["peers"].append(peers.run_peer(p, server, plan))
    finally:
        server.stop()
    results["loadavg_end"] = measure.loadavg()
    results["total_s"] = round(time.monotonic() - started, 1)
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    step(f"done in {results['total_s'] / 60:.1f} min; writing the report")
    report.write(results, args.out, args.publish)
    return 1 if results.get("errors") else 0


def run_dashboard(plan: Plan) -> dict[str, Any]:
    """The dashboard's pages timed at 2,000,000 tasks (a quick run: 20,000, with a looser
    target): benchmarks/bench_dashboard.py on a server of its own. A page whose p50 is over
    the target fails the stage."""
    out = measure.RESULTS / "dashboard.json"
    argv = ["--tasks", "20000", "--max-p50-ms", "250"] if plan.quick else ["--tasks", "2000000"]
    code = bench_dashboard.main([*argv, "--out", str(out)])
    figures: dict[str, Any] = json.loads(out.read_text())
    if code != 0:
        raise RuntimeError(f"a dashboard page's p50 is over the target ({out})")
    return figures


def run_pgsched_backlog_and_scheduling(
    dsn: str, plan: Plan, server: Any, results: dict[str, Any], skip: set[str]
) -> None:
    """Case 2's smaller points, case 1 (whose tasks are case 2's largest point), case 2's
    largest point, case 5, then case 4's promotion run (the slice coming out of the cold
    tier among all of case 1's tasks): one database, the cold tier grown in between."""
    points: list[dict[str, Any]] = []
    largest = max(plan.backlog_points)
    if "case2" not in skip:
        for backlog in sorted(plan.backlog_points):
            if backlog == largest:
                continue
            with stage(results, f"case2 backlog {backlog}"):
                if backlog:
                    bench_backlog.fill_backlog(dsn, backlog)
                points.append(bench_backlog.measure_point(dsn, plan, backlog))
        bench_backlog.reset_all(dsn)
    if "case1" not in skip:
        with stage(results, "case1"):
            results["case1"] = suite.case1_scheduling(dsn, plan, server)
    if "case2" not in skip:
        with stage(results, f"case2 backlog {largest}"):
            if bench_backlog.cold_count(dsn) < largest:
                bench_backlog.fill_backlog(dsn, largest)
            points.append(bench_backlog.measure_point(dsn, plan, largest))
        results["case2"] = bench_backlog.summarize(points, plan)
        note_flatness(results["case2"])
        with stage(results, "case2 control"):
            # The same drain with no backlog at all, in a second database, while the buffer
            # cache is still full of the backlog's pages: separates what the cold tier costs
            # the claim path from what a full buffer cache costs any workload.
            control_dsn = measure.pgsched_database(server, "pgsched_control")
            cache = bench_backlog.buffer_cache_use(control_dsn)
            step(f"case 2: control: no backlog, buffer cache as the backlog left it: {cache}")
            point = bench_backlog.measure_point(control_dsn, plan, 0)
            point["buffer_cache"] = cache
            c = bench_backlog.control_summary(point, results["case2"])
            results["case2"]["control"] = c
            measure.note(
                f"control: median {c['median_tasks_per_s']} tasks/s = {c['ratio_to_empty']} of the"
                f" empty run; the largest backlog runs at {c['largest_to_control']} of the control"
            )
    if "case5" not in skip:
        with stage(results, "case5"):
            step(
                "case 5: the claim path's bytes as the worker left them;"
                " a promotion chunk from the cold tier"
            )
            results["case5"] = {
                "after_work": suite.claim_path_sizes(dsn),
                "promotion_chunk": suite.promotion_chunk_timing(dsn),
            }
            a = results["case5"]["after_work"]
            chunks = results["case5"]["promotion_chunk"]
            measure.note(
                f"tasks_hot + indexes: {a['hot_bytes']:,} of {a['total_bytes']:,} bytes ="
                f" {a['hot_fraction']:.5%}; promotion chunks (first pass / second pass): "
                + ", ".join(
                    f"{c['chunk']:,} rows {f['ms']:,.0f}/{c['ms']:,.0f} ms"
                    for f, c in zip(chunks["first_pass"], chunks["runs"], strict=True)
                )
            )
    if "case4" not in skip:
        with stage(results, "case4 promotion"):
            step("case 4: tasks out of the cold tier through promotion, beside the backlog")
            results["case4_promotion"] = suite.pgsched_promotion_lateness(dsn, plan)


def note_flatness(c2: dict[str, Any]) -> None:
    for p in c2["points"]:
        measure.note(
            f"backlog {p['backlog']:>12,}: median {p['median_tasks_per_s']} tasks/s,"
            f" ratio {p['ratio_to_empty']}"
        )


if __name__ == "__main__":
    sys.exit(main())
