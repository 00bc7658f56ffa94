"""Fairness and limits: a small tenant beside a big backlog, and a concurrency limit held
across worker processes.

    python -m benchmarks.bench_fairness                          # A: 1,000,000 due tasks
    python -m benchmarks.bench_fairness --backlog 200000 --cap 300
    python -m benchmarks.bench_fairness --dsn postgresql://...   # an existing database
    python -m benchmarks.bench_fairness --cases 3                # the claim's cost only

Case 1, fairness. Tenant A has `--backlog` no-op tasks due (NORMAL lane, seeded set-based,
due over the last hour); `--processes` worker processes drain the lane while a producer
schedules tenant B's 100 tasks at 10/s (each due when scheduled, like any IMMEDIATE task).
Run once with fair claims on and once with them off (pgsched.lane_set_fairness), the
backlog seeded afresh before each. Reported per mode: B's claim lateness (task_runs:
started_at - scheduled_for) p50 / p99 / max, B's tasks not started within `--cap` seconds
(with their lateness so far, a lower bound), and throughput: every task completed in the
window from the first claim to `--window` seconds later (A's and B's), per second. The
ratio on/off of that throughput is the cost of fairness.

Case 2, a per-type concurrency limit of 5 (pgsched.limit_set) across 4 worker processes:
200 tasks that each sleep 50 ms; the PROCESSING count of the type is sampled every 10 ms.
Reported: the most PROCESSING seen, the share of samples at exactly 5, tasks per second
(the limit's ceiling is 5 / 0.05 s = 100/s).

Case 3, the claim's own cost: one session claims batches of 100 from a backlog of 300,000
due tasks of tenant A (and, in the two-tenant variant, 30,000 of tenant B), fairness on
and off alternating every 5 claims, 200 claims per mode; reported: the median ms per claim
of each mode and their ratio. No worker runs: this is the SQL alone (commit included,
synchronous_commit off for the session).

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.measure import note, one, step

B_TASKS = 100
CLAIM_100 = "SELECT id FROM pgsched.task_claim_many('NORMAL', 100, 'w', '5 minutes')"
B_RATE = 10.0

SEED_SQL = """
INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane, status)
SELECT 'noop', 'A', now() - interval '1 hour' + g * interval '1 ms', 5, 'NORMAL', 'QUEUED'
  FROM generate_series(%(lo)s::integer, %(hi)s::integer) AS g
"""


def seed_backlog(dsn: str, n: int) -> float:
    """Tenant A's n due tasks, set-based (as an import would write them), then analyzed."""
    started = time.perf_counter()
    measure.clear_worked_tasks(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        chunk = 250_000
        for lo in range(1, n + 1, chunk):
            conn.execute(SEED_SQL, {"lo": lo, "hi": min(n, lo + chunk - 1)})
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
        conn.execute("CHECKPOINT")
    return time.perf_counter() - started


class Producer(threading.Thread):
    """Tenant B: one task every 1/rate seconds, each due when scheduled."""

    def __init__(self, dsn: str, n: int, rate: float) -> None:
        super().__init__(name="tenant-b", daemon=True)
        self.dsn = dsn
        self.n = n
        self.rate = rate
        self.ids: list[int] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            start = time.monotonic()
            for i in range(self.n):
                wait = start + i / self.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.ids.append(
                    int(one(conn, "SELECT pgsched.schedule_task('noop', tenant_id => 'B')"))
                )


def b_lateness(conn: psycopg.Connection[Any], ids: list[int]) -> dict[str, Any]:
    started = [
        r[0]
        for r in conn.execute(
            "SELECT extract(EPOCH FROM lateness)::float8 * 1000 FROM pgsched.task_runs"
            " WHERE task_id = ANY(%s) AND attempt = 1",
            (ids,),
        )
    ]
    waiting = [
        r[0]
        for r in conn.execute(
            "SELECT extract(EPOCH FROM clock_timestamp() - next_run_at)::float8 * 1000"
            " FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'QUEUED'",
            (ids,),
        )
    ]
    return {
        "tasks": len(ids),
        "started": len(started),
        "ms": measure.percentiles(started),
        "not_started": len(waiting),
        "not_started_waited_ms": measure.percentiles(waiting) if waiting else None,
    }


def window_throughput(conn: psycopg.Connection[Any], window_s: float) -> dict[str, Any]:
    """Completions per second over the `window_s` seconds from the first claim."""
    first = one(
        conn, "SELECT min(occurred_at) FROM pgsched.task_events WHERE to_status = 'PROCESSING'"
    )
    done = one(
        conn,
        "SELECT count(*) FROM pgsched.task_events WHERE to_status = 'COMPLETED'"
        " AND occurred_at < %s + %s * interval '1 second'",
        (first, window_s),
    )
    return {"window_s": window_s, "completed": int(done), "tasks_per_s": round(done / window_s)}


def fairness_run(dsn: str, fair: bool, args: argparse.Namespace) -> dict[str, Any]:
    mode = "on" if fair else "off"
    step(f"case 1, fairness {mode}: seeding tenant A's {args.backlog:,} due tasks")
    seed_s = seed_backlog(dsn, args.backlog)
    note(f"seeded in {seed_s:.1f}s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (fair,))
    name = f"bench-fair-{mode}"
    workers = measure.pgsched_workers(
        dsn, name, args.processes, args.batch_size, args.concurrency
    ).start()
    pm = measure.postmaster_pid(dsn)
    meter = measure.CpuMeter(workers.pids, pm)
    producer = Producer(dsn, B_TASKS, B_RATE)
    try:
        workers.wait_listening(dsn)
        meter.begin()
        began = time.monotonic()
        producer.start()
        producer.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Until B is done (or the cap), and at least the throughput window.
            while True:
                workers.check_alive()
                waited = time.monotonic() - began
                left = one(
                    conn,
                    "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'QUEUED'",
                    (producer.ids,),
                )
                if (left == 0 and waited >= args.window) or waited >= args.cap:
                    break
                time.sleep(0.5)
        cpu = meter.end()
    finally:
        codes = workers.stop(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        late = b_lateness(conn, producer.ids)
        throughput = window_throughput(conn, args.window)
    result = {
        "fair": fair,
        "backlog": args.backlog,
        "seed_s": round(seed_s, 1),
        "run_s": round(time.monotonic() - began, 1),
        "b_lateness": late,
        "throughput": throughput,
        "cpu": cpu,
        "worker_exit_codes": codes,
        "worker_warnings": workers.warnings(),
    }
    workers.cleanup()
    ms = late["ms"]
    note(
        f"B: {late['started']}/{late['tasks']} started; lateness ms p50 {ms['p50']}"
        f" p99 {ms['p99']} max {ms['max']}"
        + (
            f"; {late['not_started']} not started after {args.cap:g}s"
            if late["not_started"]
            else ""
        )
    )
    note(f"throughput {throughput['tasks_per_s']:,}/s over the first {args.window:g}s")
    return result


class Sampler(threading.Thread):
    def __init__(self, dsn: str, task_type: str) -> None:
        super().__init__(name="processing-sampler", daemon=True)
        self.dsn = dsn
        self.task_type = task_type
        self.samples: list[int] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                self.samples.append(
                    int(
                        one(
                            conn,
                            "SELECT count(*) FROM pgsched.tasks"
                            " WHERE status = 'PROCESSING' AND task_type = %s",
                            (self.task_type,),
                        )
                    )
                )
                time.sleep(0.01)


def concurrency_run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    n, limit, processes, sleep_s = 200, 5, 4, 0.05
    step(f"case 2: {n} tasks sleeping {sleep_s * 1000:g} ms, limit {limit}, {processes} workers")
    measure.clear_worked_tasks(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', true)")
        conn.execute(
            "SELECT pgsched.limit_set('task_type', 'sleep', max_processing => %s)", (limit,)
        )
        conn.execute(
            "SELECT count(*) FROM pgsched.schedule_tasks("
            " task_types => array_fill('sleep'::text, ARRAY[%s]),"
            " payloads => array_fill(%s::jsonb, ARRAY[%s]))",
            (n, f'{{"seconds": {sleep_s}}}', n),
        )
    sampler = Sampler(dsn, "sleep")
    workers = measure.pgsched_workers(dsn, "bench-limit", processes, 20, 50)
    sampler.start()
    began = time.monotonic()
    workers.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            finished, _ = measure.wait_until(
                lambda: (measure.completed(conn) >= n, measure.completed(conn)), 300, workers
            )
            rate = measure.drain_rate(conn)
            by_worker: dict[str, int] = dict(
                conn.execute(
                    "SELECT worker, count(*) FROM pgsched.task_runs GROUP BY worker"
                ).fetchall()
            )
            conn.execute("SELECT pgsched.limit_clear('task_type', 'sleep')")
    finally:
        sampler.stop_event.set()
        sampler.join()
        codes = workers.stop(dsn=dsn)
    counts = Counter(sampler.samples)
    busy = [s for s in sampler.samples if s > 0]
    result = {
        "tasks": n,
        "limit": limit,
        "processes": processes,
        "sleep_s": sleep_s,
        "finished": finished,
        "seconds": round(time.monotonic() - began, 1),
        "samples": len(sampler.samples),
        "max_processing": max(sampler.samples),
        "samples_by_processing": dict(sorted(counts.items())),
        "share_at_limit_while_busy": round(counts[limit] / max(len(busy), 1), 3),
        "tasks_per_s": rate.get("tasks_per_s"),
        "ceiling_per_s": round(limit / sleep_s),
        "tasks_by_worker": by_worker,
        "worker_exit_codes": codes,
        "worker_warnings": workers.warnings(),
    }
    workers.cleanup()
    note(
        f"most PROCESSING at once {result['max_processing']} (limit {limit});"
        f" at the limit in {result['share_at_limit_while_busy']:.0%} of busy samples;"
        f" {result['tasks_per_s']}/s (ceiling {result['ceiling_per_s']}/s);"
        f" by worker {sorted(by_worker.values())}"
    )
    return result


def claim_cost(dsn: str, tenant_b: int) -> dict[str, Any]:
    step(f"case 3: claim cost, tenant A 300,000 due, tenant B {tenant_b:,} due")
    seed_backlog(dsn, 300_000)
    per_mode: dict[str, list[float]] = {"on": [], "off": []}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane, status)"
            " SELECT 'noop', 'B', now() - interval '1 minute', 5, 'NORMAL', 'QUEUED'"
            " FROM generate_series(1, %s)",
            (tenant_b,),
        )
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
        with psycopg.connect(dsn, autocommit=True) as claimer:
            claimer.execute("SET synchronous_commit = off")
            for _ in range(40):
                for mode in ("off", "on"):
                    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (mode == "on",))
                    started = time.perf_counter()
                    for _ in range(5):
                        claimer.execute(CLAIM_100).fetchall()
                    per_mode[mode].append((time.perf_counter() - started) / 5 * 1000)
        conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', true)")
    on = statistics.median(per_mode["on"])
    off = statistics.median(per_mode["off"])
    note(f"median ms per claim of 100: on {on:.2f}, off {off:.2f}, on/off {on / off:.3f}")
    return {
        "tenant_b_due": tenant_b,
        "ms_per_claim_median": {"on": round(on, 2), "off": round(off, 2)},
        "on_over_off": round(on / off, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_fairness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--backlog", type=int, default=1_000_000, help="tenant A's due tasks")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--window", type=float, default=30.0, help="throughput window, s (30)")
    parser.add_argument("--cap", type=float, default=600.0, help="longest run per mode, s")
    parser.add_argument(
        "--cases", default="1,2,3", help="which cases to run, comma-separated (1,2,3)"
    )
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "fairness.json")
    args = parser.parse_args(argv)
    cases = {c.strip() for c in args.cases.split(",")}
    runs: list[dict[str, Any]] = []
    ratio = None
    with measure.database(args.dsn) as dsn:
        if "1" in cases:
            runs = [fairness_run(dsn, fair, args) for fair in (True, False)]
            on, off = runs
            ratio = on["throughput"]["tasks_per_s"] / max(off["throughput"]["tasks_per_s"], 1)
            step(f"throughput with fairness on / off: {ratio:.3f}")
        limit = concurrency_run(dsn, args) if "2" in cases else None
        cost = [claim_cost(dsn, b) for b in (0, 30_000)] if "3" in cases else None
    measure.write_json(
        args.out,
        {
            "benchmark": "fairness",
            "command": " ".join(["python -m benchmarks.bench_fairness", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "fairness": runs,
            "throughput_on_over_off": None if ratio is None else round(ratio, 3),
            "concurrency_limit": limit,
            "claim_cost": cost,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
