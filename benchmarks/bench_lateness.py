"""Lateness: how long after its due time a task starts, at a steady rate of due times.

    python -m benchmarks.bench_lateness                        # 100/s and 1000/s, 30 s each
    python -m benchmarks.bench_lateness --quick                # 100/s for 10 s, short HIGH cases
    python -m benchmarks.bench_lateness --rate 1000 --duration 60 --dsn postgresql://...

For each rate R: with one worker process running (`--lanes normal`) and listening, schedule
R x duration tasks in advance, due at exact 1/R spacing starting `--lead` seconds ahead,
wait until all are done, and report per task:

    claim lateness    the PROCESSING event's time (the claim transaction's now()) minus the
                      due time: pgsched.task_runs.lateness
    handler lateness  the handler's own time.time() at its start minus the due time (the
                      no-op handler notes it; see benchmarks/noop_app.py)
    finish lateness   the COMPLETED event's time minus the due time

as p50 / p95 / p99 / p99.9 / max in milliseconds.

Then "HIGH under BATCH load": HIGH tasks at `--high-rate`/s into a worker running only
the HIGH lane, once on an idle system and once while `--batch-backlog` BATCH tasks are
due and a second worker runs the BATCH lane with its defaults (throttled).

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bench_throughput import (
    RESULTS,
    PostgresCpu,
    WorkerProcs,
    cpu_report,
    database,
    machine_info,
    percentiles,
    postgres_info,
    prepare_for_run,
    print_environment,
    render_table,
    reset_tables,
    sample_cpu,
    schedule_chunked,
    source_info,
    write_json,
)
from benchmarks.noop_app import STARTS_ENV

PRIORITY = {"normal": 5, "high": 9}


def read_starts(paths: Sequence[Path]) -> dict[int, float]:
    starts: dict[int, float] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            task_id, at = line.split()
            starts[int(task_id)] = float(at)
    return starts


def wait_done(conn: psycopg.Connection[Any], ids: Sequence[int], deadline: float) -> int:
    """Until every task in ids is COMPLETED (or the deadline passes); returns how many are."""
    lo, hi = min(ids), max(ids)
    done = 0
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pgsched.tasks_done"
            " WHERE id BETWEEN %s AND %s AND status = 'COMPLETED'",
            (lo, hi),
        ).fetchone()
        done = int(row[0]) if row else 0
        if done >= len(ids):
            break
        time.sleep(0.25)
    return done


def lateness_of(
    conn: psycopg.Connection[Any], ids: Sequence[int], starts: dict[int, float]
) -> dict[str, Any]:
    """Claim, handler-start and finish lateness (ms) of the tasks in ids, from task_runs."""
    lo, hi = min(ids), max(ids)
    rows = conn.execute(
        """
        SELECT task_id,
               extract(EPOCH FROM scheduled_for)::float8,
               extract(EPOCH FROM lateness)::float8 * 1000,
               extract(EPOCH FROM finished_at - scheduled_for)::float8 * 1000,
               attempt, outcome
          FROM pgsched.task_runs
         WHERE task_id BETWEEN %s AND %s
        """,
        (lo, hi),
    ).fetchall()
    claim: list[float] = []
    finish: list[float] = []
    handler: list[float] = []
    claim_to_handler: list[float] = []
    runs_per_task: dict[int, int] = {}
    for task_id, due, claim_ms, finish_ms, _attempt, outcome in rows:
        runs_per_task[task_id] = runs_per_task.get(task_id, 0) + 1
        if outcome != "COMPLETED":
            continue
        claim.append(claim_ms)
        finish.append(finish_ms)
        started = starts.get(task_id)
        if started is not None:
            handler.append((started - due) * 1000)
            claim_to_handler.append((started - due) * 1000 - claim_ms)
    late = [c for c in claim if c > 25]
    return {
        "tasks": len(ids),
        "runs": len(rows),
        "tasks_run_more_than_once": sum(1 for n in runs_per_task.values() if n > 1),
        "claim_ms": percentiles(claim),
        "handler_ms": percentiles(handler),
        "claim_to_handler_ms": percentiles(claim_to_handler),
        "finish_ms": percentiles(finish),
        "claim_over_25ms": len(late),
        "claim_over_250ms": sum(1 for c in claim if c > 250),
        "early_claims": sum(1 for c in claim if c < 0),
    }


def run_case(
    dsn: str,
    name: str,
    lane: str,
    rate: float,
    duration: float,
    lead: float,
    concurrency: int,
    batch_size: int,
    backlog: int = 0,
) -> dict[str, Any]:
    n = int(rate * duration)
    print(f"\n== {name}: {n:,} {lane.upper()} tasks at {rate:g}/s over {duration:g}s")
    starts_dir = Path(tempfile.mkdtemp(prefix="pgsched-lateness-"))
    starts_file = starts_dir / "starts-{i}.txt"
    with psycopg.connect(dsn, autocommit=True) as conn:
        reset_tables(conn)
        backlog_s = None
        if backlog:
            _, backlog_s = schedule_chunked(dsn, backlog, priority=5, lane="BATCH")
            print(f"   BATCH backlog: {backlog:,} tasks due now, scheduled in {backlog_s:.1f}s")
        prepare_for_run(conn)
        pg = PostgresCpu(conn)
        worker = WorkerProcs(
            dsn,
            lane,
            1,
            concurrency,
            batch_size,
            env={STARTS_ENV: str(starts_file)},
            name=f"bench-lateness-{lane}",
        )
        batch_worker = (
            WorkerProcs(dsn, "batch", 1, name="bench-lateness-batch") if backlog else None
        )
        worker.start()
        if batch_worker is not None:
            batch_worker.start()
        try:
            worker.wait_listening(conn)
            if batch_worker is not None:
                batch_worker.wait_listening(conn)
            # Due times by the database clock (the one lateness is measured with).
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            first_due: datetime = row[0] + timedelta(seconds=lead)
            run_ats = [first_due + timedelta(seconds=i / rate) for i in range(n)]
            ids, schedule_s = schedule_chunked(
                dsn, n, priority=PRIORITY[lane], run_ats=run_ats, chunk=10_000
            )
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            margin = (first_due - row[0]).total_seconds()
            print(f"   scheduled in {schedule_s:.2f}s; first due {margin:.2f}s after that")
            cpu_first = sample_cpu(worker.pids, pg)
            end_due = first_due + timedelta(seconds=duration)
            wait = (end_due - datetime.now(UTC)).total_seconds()
            while wait > 0:
                worker.check_alive()
                time.sleep(min(wait, 1.0))
                wait = (end_due - datetime.now(UTC)).total_seconds()
            done = wait_done(conn, ids, time.monotonic() + 120)
            cpu_last = sample_cpu(worker.pids, pg)
            batch_done = None
            if batch_worker is not None:
                row = conn.execute(
                    "SELECT count(*) FROM pgsched.task_events WHERE to_status = 'COMPLETED'"
                    " AND task_id < %s",
                    (min(ids),),
                ).fetchone()
                batch_done = int(row[0]) if row else 0
        finally:
            codes = worker.stop()
            if batch_worker is not None:
                codes += batch_worker.stop()
        warnings = worker.warnings() + (batch_worker.warnings() if batch_worker else [])
        worker.cleanup()
        if batch_worker is not None:
            batch_worker.cleanup()
        starts = read_starts(sorted(starts_dir.glob("starts-*.txt")))
        figures = lateness_of(conn, ids, starts)
    for path in starts_dir.iterdir():
        path.unlink()
    starts_dir.rmdir()
    cpu = cpu_report(cpu_first, cpu_last)
    result = {
        "case": name,
        "lane": lane.upper(),
        "rate_per_s": rate,
        "duration_s": duration,
        "lead_s": lead,
        "concurrency": concurrency,
        "batch_size": batch_size,
        "batch_backlog": backlog,
        "batch_backlog_schedule_s": backlog_s,
        "batch_completed_during_case": batch_done,
        "schedule_s": round(schedule_s, 3),
        "schedule_margin_s": round(margin, 3),
        "completed": done,
        "handler_starts_recorded": len(starts),
        "cpu": cpu,
        "worker_exit_codes": codes,
        "worker_warnings": warnings,
        **figures,
    }
    c, h = figures["claim_ms"], figures["handler_ms"]
    print(
        f"   claim lateness ms: p50 {c['p50']} p95 {c['p95']} p99 {c['p99']}"
        f" p99.9 {c['p99_9']} max {c['max']}"
    )
    print(
        f"   handler lateness ms: p50 {h['p50']} p95 {h['p95']} p99 {h['p99']}"
        f" p99.9 {h['p99_9']} max {h['max']}"
    )
    print(
        f"   completed {done}/{n}; worker {cpu['worker_cores']} cores,"
        f" postgres {cpu.get('postgres_cores', '?')}, other {cpu.get('other_cores', '?')}"
    )
    if batch_done is not None:
        print(f"   BATCH tasks completed meanwhile: {batch_done:,}")
    for line in warnings[:5]:
        print(f"   worker log: {line}")
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_lateness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rate", type=float, nargs="+", default=[100, 1000], help="tasks/s")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of due times")
    parser.add_argument("--lead", type=float, default=5.0, help="first due time, s ahead")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--high-rate", type=float, default=100.0)
    parser.add_argument("--high-duration", type=float, default=None, help="default: --duration")
    parser.add_argument("--batch-backlog", type=int, default=100_000)
    parser.add_argument("--no-high", action="store_true", help="skip the HIGH vs BATCH cases")
    parser.add_argument("--quick", action="store_true", help="100/s for 10 s; short HIGH cases")
    parser.add_argument("--dsn", default=None, help="benchmark this server instead")
    parser.add_argument("--out", type=Path, default=RESULTS / "lateness.json")
    parser.add_argument(
        "--setup-sql",
        type=Path,
        default=None,
        help="SQL run after migrating, to measure an engine change without editing sql/",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rate = [100]
        args.duration = 10.0
        args.lead = 3.0
        args.high_duration = 5.0
        args.batch_backlog = 20_000
    if args.high_duration is None:
        args.high_duration = args.duration
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    results: list[dict[str, Any]] = []
    with database(args.dsn, args.setup_sql) as (dsn, server):
        pg = postgres_info(dsn)
        print_environment(machine, pg, dsn)
        for rate in args.rate:
            results.append(
                run_case(
                    dsn,
                    f"NORMAL {rate:g}/s",
                    "normal",
                    rate,
                    args.duration,
                    args.lead,
                    args.concurrency,
                    args.batch_size,
                )
            )
        if not args.no_high:
            for backlog in (0, args.batch_backlog):
                label = f"HIGH {args.high_rate:g}/s" + (
                    f" under {backlog:,} BATCH due" if backlog else " (no BATCH backlog)"
                )
                results.append(
                    run_case(
                        dsn,
                        label,
                        "high",
                        args.high_rate,
                        args.high_duration,
                        args.lead,
                        args.concurrency,
                        args.batch_size,
                        backlog=backlog,
                    )
                )
        pg_settings = server.settings if server is not None else None
    rows = []
    for r in results:
        c, h = r["claim_ms"], r["handler_ms"]
        rows.append(
            {
                "case": r["case"],
                "tasks": r["tasks"],
                "claim_p50": c["p50"],
                "p95": c["p95"],
                "p99": c["p99"],
                "p99.9": c["p99_9"],
                "max": c["max"],
                "handler_p50": h["p50"],
                "h_p99": h["p99"],
                "h_max": h["max"],
                "finish_p99": r["finish_ms"]["p99"],
                "other_cores": r["cpu"].get("other_cores"),
            }
        )
    print("\nlateness in ms (claim = PROCESSING event time - due; handler = handler start - due)")
    print(render_table(rows, list(rows[0])))
    document = {
        "benchmark": "lateness",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmarks.bench_lateness", *(argv or sys.argv[1:])]),
        "machine": machine,
        "source": source_info(),
        "setup_sql": str(args.setup_sql) if args.setup_sql else None,
        "postgres": pg,
        "postgres_settings_why": (
            {s.name: s.why for s in pg_settings} if pg_settings is not None else None
        ),
        "results": results,
    }
    write_json(args.out, document)
    incomplete = [r["case"] for r in results if r["completed"] < r["tasks"]]
    if incomplete:
        print(f"not every task completed in: {', '.join(incomplete)}")
    return 1 if incomplete else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
