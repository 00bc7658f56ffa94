"""Fan-out over many tenants while a HIGH-lane lateness probe runs.

    python -m benchmarks.bench_fanout [--tenants 10000] [--quick] [--dsn DSN] [--out PATH]

Two real worker processes, as deployed: one for HIGH, one for NORMAL and BATCH (the
fan-out's children run in BATCH, throttled by --batch-concurrency / --batch-rate). A probe
schedules HIGH no-op tasks due at precise times (--probe-rate per second). Phase 1 measures
the probe alone; phase 2 schedules one product-scoped task over every tenant and measures
the probe while the fan-out runs. Reports the fan-out time (parent claimed -> last tenant
finished) and HIGH lateness p50/p95/p99/max (start - scheduled) in both phases.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.measure import percentiles


def start_worker(dsn: str, lanes: str, extra: list[str]) -> measure.Procs:
    argv = [*measure.pgsched_exe(), "--dsn", dsn, "worker", "--app", measure.NOOP_APP]
    argv += ["--lanes", lanes, "--poll-interval", "1", "--log-level", "WARNING", *extra]
    return measure.Procs(f"bench-fanout-{lanes.replace(',', '-')}", [argv]).start()


def schedule_probe(
    conn: psycopg.Connection[Any], start: datetime, seconds: float, rate: float
) -> None:
    count = int(seconds * rate)
    run_ats = [start + timedelta(seconds=i / rate) for i in range(count)]
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks(task_types => %s::text[],"
        " run_ats => %s::timestamptz[], priorities => %s::integer[], metadatas => %s::jsonb[])",
        (["noop"] * count, run_ats, [9] * count, [json.dumps({"probe": True})] * count),
    )


def probe_lateness(conn: psycopg.Connection[Any], since: datetime, until: datetime) -> list[float]:
    rows = conn.execute(
        "SELECT extract(epoch FROM r.lateness) * 1000 FROM pgsched.task_runs AS r"
        " JOIN pgsched.tasks AS t ON t.id = r.task_id"
        " WHERE t.lane = 'HIGH' AND r.scheduled_for >= %s AND r.scheduled_for < %s",
        (since, until),
    ).fetchall()
    return [float(r[0]) for r in rows]


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise TimeoutError(f"timed out waiting for {what}")


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgsched.tenants (tenant_id, product)"
            " SELECT 't' || g, 'crm' FROM generate_series(1, %s) AS g",
            (args.tenants,),
        )
        high = start_worker(dsn, "high", ["--concurrency", "16"])
        bulk = start_worker(
            dsn,
            "normal,batch",
            [
                "--batch-concurrency",
                str(args.batch_concurrency),
                "--batch-rate",
                str(args.batch_rate),
            ],
        )
        try:
            time.sleep(3)  # both workers up and listening
            # Phase 1: the probe alone.
            start = datetime.now(UTC) + timedelta(seconds=1)
            schedule_probe(conn, start, args.probe_seconds, args.probe_rate)
            end = start + timedelta(seconds=args.probe_seconds)
            time.sleep(args.probe_seconds + 2)
            wait_until(
                lambda: (
                    len(probe_lateness(conn, start, end))
                    >= int(args.probe_seconds * args.probe_rate)
                ),
                30,
                "baseline probe",
            )
            baseline = percentiles(probe_lateness(conn, start, end))

            # Phase 2: the probe while one product task fans out to every tenant.
            start = datetime.now(UTC) + timedelta(seconds=1)
            schedule_probe(conn, start, args.fanout_probe_seconds, args.probe_rate)
            row = conn.execute(
                "SELECT pgsched.schedule_task('noop', run_at => %s, scope => 'product',"
                " product => 'crm')",
                (start,),
            ).fetchone()
            assert row is not None
            parent = int(row[0])
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT tenants = %s AND unfinished = 0 FROM pgsched.fan_out_summary"
                        " WHERE parent_id = %s",
                        (args.tenants, parent),
                    ).fetchone()
                    == (True,)
                ),
                args.timeout,
                "fan-out",
            )
            fan = conn.execute(
                "SELECT min(e.occurred_at) FILTER"
                " (WHERE e.task_id = %s AND e.to_status = 'PROCESSING'),"
                " max(e.occurred_at) FILTER (WHERE e.to_status IN ('COMPLETED', 'FAILED'))"
                " FROM pgsched.task_events AS e"
                " WHERE e.task_id = %s OR e.task_id IN"
                " (SELECT id FROM pgsched.tasks WHERE parent_id = %s)",
                (parent, parent, parent),
            ).fetchone()
            assert fan is not None
            fan_out_s = (fan[1] - fan[0]).total_seconds()
            summary = conn.execute(
                "SELECT tenants, completed, failed FROM pgsched.fan_out_summary"
                " WHERE parent_id = %s",
                (parent,),
            ).fetchone()
            end = start + timedelta(seconds=args.fanout_probe_seconds)
            time.sleep(max((end - datetime.now(UTC)).total_seconds(), 0) + 2)
            # Only the probe tasks due while the fan-out was running.
            during_until = min(end, fan[1])
            during = percentiles(probe_lateness(conn, start, during_until))
        finally:
            for workers in (high, bulk):
                workers.stop(timeout=30, dsn=dsn)
                workers.cleanup()
    return {
        "tenants": args.tenants,
        "fan_out_seconds": round(fan_out_s, 2),
        "tenants_per_second": round(args.tenants / fan_out_s, 1) if fan_out_s else None,
        "fan_out_outcomes": {"tenants": summary[0], "completed": summary[1], "failed": summary[2]}
        if summary
        else None,
        "high_lateness_ms_without_fan_out": baseline,
        "high_lateness_ms_during_fan_out": during,
        "settings": {
            "probe_rate_per_s": args.probe_rate,
            "batch_concurrency": args.batch_concurrency,
            "batch_rate": args.batch_rate,
            "workers": "one process --lanes high; one process --lanes normal,batch",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--probe-rate", type=float, default=20.0)
    parser.add_argument("--probe-seconds", type=float, default=20.0)
    parser.add_argument("--fanout-probe-seconds", type=float, default=60.0)
    parser.add_argument("--batch-concurrency", type=int, default=32)
    parser.add_argument("--batch-rate", type=float, default=2000.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true", help="1,000 tenants, short phases")
    parser.add_argument("--dsn", default=None, help="use this server instead of starting one")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.tenants, args.probe_seconds, args.fanout_probe_seconds = 1_000, 8.0, 15.0
    out = Path(args.out or measure.RESULTS / ("fanout-quick.json" if args.quick else "fanout.json"))
    started = time.monotonic()
    with measure.database(args.dsn) as dsn:
        result = run(dsn, args)
    result["command"] = " ".join(["python -m benchmarks.bench_fanout", *sys.argv[1:]])
    result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["nproc"] = os.cpu_count()
    result["loadavg_at_end"] = os.getloadavg()
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    measure.write_json(out, result)
    b, d = result["high_lateness_ms_without_fan_out"], result["high_lateness_ms_during_fan_out"]
    print(
        f"fan-out over {result['tenants']} tenants: {result['fan_out_seconds']} s "
        f"({result['tenants_per_second']} tenants/s), outcomes {result['fan_out_outcomes']}"
    )
    for label, p in (("without fan-out", b), ("during fan-out ", d)):
        print(
            f"HIGH lateness {label}: p50 {p['p50']} p95 {p['p95']} p99 {p['p99']}"
            f" max {p['max']} ms (n={p['n']})"
        )


if __name__ == "__main__":
    main()
