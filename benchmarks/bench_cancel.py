"""How long a running task takes to stop once cancelled, by path and handler kind.

    python -m benchmarks.bench_cancel [--rounds 5] [--tasks 32] [--quick] [--dsn DSN] [--out PATH]

One real `pgsched worker --lanes normal` process (benchmarks/cancel_app.py) runs `--tasks`
handlers that wait to be stopped: async ones (stopped by asyncio.CancelledError) and plain
ones (they see ctx.cancelled within 50 ms and raise). Once all run, each is cancelled, 20 ms
apart, by one of two paths:

  notify      pgsched.cancel_task_ex: the request and NOTIFY pgsched_cancel
  heartbeat   the same request written by a bare UPDATE, no NOTIFY: only the worker's
              heartbeat thread (it asks every second) can learn of it

Latency = the task's CANCELLED event - the request's time, both by the database clock.
Reported per path and kind: p50 / p95 / p99 / max in ms, and heartbeat p50 / notify p50.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.measure import one, percentiles

APP = "benchmarks.cancel_app:app"
SPACING_S = 0.02
KINDS = ("wait_async", "wait_sync")
PATHS = ("notify", "heartbeat")


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def request(conn: psycopg.Connection[Any], task_id: int, path: str) -> None:
    if path == "notify":
        conn.execute("SELECT pgsched.cancel_task_ex(%s, 'bench', 'bench')", (task_id,))
        return
    conn.execute(
        "UPDATE pgsched.tasks SET cancel_requested_at = clock_timestamp(),"
        " cancel_requested_by = 'bench', cancel_reason = 'bench'"
        " WHERE id = %s AND status = 'PROCESSING'",
        (task_id,),
    )


def latencies_ms(conn: psycopg.Connection[Any], ids: list[int]) -> list[float]:
    rows = conn.execute(
        "SELECT extract(epoch FROM e.occurred_at - t.cancel_requested_at) * 1000"
        " FROM pgsched.tasks AS t JOIN pgsched.task_events AS e"
        "   ON e.task_id = t.id AND e.to_status = 'CANCELLED'"
        " WHERE t.id = ANY(%s)",
        (ids,),
    ).fetchall()
    return [float(r[0]) for r in rows]


def one_round(
    conn: psycopg.Connection[Any], worker: measure.Procs, kind: str, path: str, tasks: int
) -> list[float]:
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT task_id FROM pgsched.schedule_tasks(task_types => %s::text[])",
            ([kind] * tasks,),
        )
    ]

    def all_running() -> bool:
        worker.check_alive()
        n = one(
            conn,
            "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'PROCESSING'",
            (ids,),
        )
        return int(n) == len(ids)

    wait_for(all_running, 60, f"{tasks} {kind} tasks to run")
    time.sleep(0.5)  # the handlers are inside their wait, not still starting
    for task_id in ids:
        request(conn, task_id, path)
        time.sleep(SPACING_S)

    def all_cancelled() -> bool:
        worker.check_alive()
        n = one(
            conn,
            "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'CANCELLED'",
            (ids,),
        )
        return int(n) == len(ids)

    wait_for(all_cancelled, 60, f"{tasks} {kind} tasks to be cancelled ({path})")
    return latencies_ms(conn, ids)


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [*measure.pgsched_exe(), "--dsn", dsn, "worker", "--app", APP, "--lanes", "normal"]
    argv += ["--concurrency", str(args.tasks), "--log-level", "WARNING", "--cancel-grace", "30"]
    worker = measure.Procs("bench-cancel", [argv]).start()
    samples: dict[str, list[float]] = {f"{p}/{k}": [] for p in PATHS for k in KINDS}
    try:
        worker.wait_listening(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for r in range(args.rounds):
                for path in PATHS:
                    for kind in KINDS:
                        got = one_round(conn, worker, kind, path, args.tasks)
                        samples[f"{path}/{kind}"] += got
                        measure.note(
                            f"round {r + 1}: {path} {kind}: p50 "
                            f"{percentiles(got)['p50']} ms (n={len(got)})"
                        )
    finally:
        worker.stop(dsn=dsn)
        warnings = worker.warnings()
        worker.cleanup()
    figures = {key: percentiles(values) for key, values in samples.items()}
    ratios = {
        kind: round(
            float(figures[f"heartbeat/{kind}"]["p50"] or 0)
            / max(float(figures[f"notify/{kind}"]["p50"] or 0), 1e-9),
            1,
        )
        for kind in KINDS
    }
    return {
        "latency_ms": figures,
        "heartbeat_over_notify_p50": ratios,
        "settings": {"rounds": args.rounds, "tasks_per_round": args.tasks, "spacing_s": SPACING_S},
        "worker_warnings": [w for w in warnings if "cancel" not in w],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 16 tasks")
    parser.add_argument("--dsn", default=None, help="use this server instead of starting one")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.tasks = 2, 16
    out = Path(args.out or measure.RESULTS / ("cancel-quick.json" if args.quick else "cancel.json"))
    started = time.monotonic()
    with measure.database(args.dsn) as dsn:
        result = run(dsn, args)
    result["command"] = " ".join(["python -m benchmarks.bench_cancel", *sys.argv[1:]])
    result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["nproc"] = os.cpu_count()
    result["loadavg_at_end"] = os.getloadavg()
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    measure.write_json(out, result)
    for key, p in result["latency_ms"].items():
        print(
            f"{key:22s} request -> CANCELLED: p50 {p['p50']} p95 {p['p95']} p99 {p['p99']}"
            f" max {p['max']} ms (n={p['n']})"
        )
    for kind, ratio in result["heartbeat_over_notify_p50"].items():
        print(f"{kind}: heartbeat p50 / notify p50 = {ratio}x")


if __name__ == "__main__":
    main()
