"""Scheduling: 10M future tasks in bulk, their bytes on disk, and calls one at a time.

    python -m benchmarks.bench_schedule                 # 10,000,000 tasks, 10,000 single calls
    python -m benchmarks.bench_schedule --quick         # 200,000 tasks, 2,000 calls (CI)
    python -m benchmarks.bench_schedule --dsn postgresql://...   # an existing (scratch!) database

Bulk: future tasks due uniformly over 365 days from 25 h ahead (all in the cold tier), with a
small payload, through `pgsched.schedule_tasks` with binary arrays, 50,000 rows per call,
over 2 connections in parallel. Then VACUUM ANALYZE and the bytes on disk per relation and
per task. One at a time: calls of `pgsched.schedule_task` from one connection, each its own
transaction (autocommit), then the same number inside one transaction. The suite's case 1
(benchmarks/suite.py), on its own.

Unless --dsn is given it starts its own throwaway, durable Postgres and removes it after.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

TASK_TYPE = "send_reminder"
SPAN_SECONDS = 365 * 86_400
# Knuth's multiplicative constant; prime, so i -> i*K mod SPAN is a bijection on [0, SPAN):
# due times are distinct, uniform over the year, and arrive in scattered (not sorted) order.
SCATTER = 2_654_435_761
RAW_CHUNK = 50_000

RAW_SQL = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[], payloads => %b::jsonb[], run_ats => %b::timestamptz[])"
)
SINGLE_SQL = "SELECT pgsched.schedule_task(task_type => %s, payload => %s, run_at => %s)"
RELATIONS = ("tasks_cold", "tasks_hot", "tasks_done", "idempotency_keys", "task_events")


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------
# input


@dataclass(frozen=True)
class Workload:
    start: datetime  # the earliest due time: 25 h from now, past the 24 h hot window

    def run_at(self, i: int) -> datetime:
        return self.start + timedelta(seconds=(i * SCATTER) % SPAN_SECONDS)

    def arrays(self, lo: int, hi: int) -> tuple[list[str], list[str], list[datetime]]:
        # JSON text for the payloads: what any client language would send; the server parses
        # it into jsonb either way.
        payloads = [f'{{"user": {i}, "kind": "reminder"}}' for i in range(lo, hi)]
        return [TASK_TYPE] * (hi - lo), payloads, [self.run_at(i) for i in range(lo, hi)]


# --------------------------------------------------------------------------------------
# progress


@dataclass
class Progress:
    total: int
    every: int
    t0: float = field(default_factory=time.perf_counter)
    done: int = 0
    next_mark: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.next_mark = self.every

    def add(self, label: str, n: int) -> None:
        with self.lock:
            self.done += n
            if self.done < self.next_mark and self.done < self.total:
                return
            while self.next_mark <= self.done:
                self.next_mark += self.every
            elapsed = time.perf_counter() - self.t0
            log(
                f"  [{label}] {self.done:>12,} / {self.total:,} rows  {elapsed:8.1f} s"
                f"  {self.done / elapsed:>10,.0f} rows/s"
            )


# --------------------------------------------------------------------------------------
# case 1b: raw SQL, binary arrays, parallel connections


def bench_raw(
    dsn: str, work: Workload, lo: int, hi: int, jobs: int, progress: Progress
) -> dict[str, Any]:
    chunks = [(s, min(hi, s + RAW_CHUNK)) for s in range(lo, hi, RAW_CHUNK)]
    lock = threading.Lock()
    per_conn: list[dict[str, float]] = [
        {"rows": 0, "gen_s": 0.0, "call_s": 0.0, "call_cpu_s": 0.0} for _ in range(jobs)
    ]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        stats = per_conn[k]
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while True:
                    with lock:
                        if not chunks or errors:
                            return
                        start, stop = chunks.pop(0)
                    t0 = time.perf_counter()
                    params = work.arrays(start, stop)
                    t1 = time.perf_counter()
                    c0 = time.thread_time()
                    row = conn.execute(RAW_SQL, params).fetchone()
                    c1 = time.thread_time()
                    t2 = time.perf_counter()
                    assert row is not None and row[0] == stop - start, row
                    stats["rows"] += stop - start
                    stats["gen_s"] += t1 - t0
                    stats["call_s"] += t2 - t1
                    stats["call_cpu_s"] += c1 - c0
                    progress.add(f"raw SQL x{jobs}", stop - start)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    rows = hi - lo
    calls = sum(s["call_s"] for s in per_conn)
    return {
        "path": f"raw SQL pgsched.schedule_tasks, binary arrays, {RAW_CHUNK:,} rows per call, "
        f"{jobs} connection(s) in parallel",
        "rows": rows,
        "chunk_size": RAW_CHUNK,
        "connections": jobs,
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall),
        "input_generation_s_summed": round(sum(s["gen_s"] for s in per_conn), 3),
        "call_s_summed": round(calls, 3),
        "call_client_cpu_s_summed": round(sum(s["call_cpu_s"] for s in per_conn), 3),
        "rows_per_s_per_connection": round(rows / calls * 1.0) if calls else None,
        "per_connection": [
            {k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()} for s in per_conn
        ],
    }


# --------------------------------------------------------------------------------------
# sizes


def measure_sizes(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE pgsched.tasks, pgsched.idempotency_keys, pgsched.task_events")
        vacuum_s = time.perf_counter() - t0
        relations: dict[str, Any] = {}
        for name in RELATIONS:
            row = conn.execute(
                "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid),"
                " pg_indexes_size(c.oid)"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'pgsched' AND c.relname = %s",
                (name,),
            ).fetchone()
            assert row is not None, name
            (count,) = conn.execute(f"SELECT count(*) FROM pgsched.{name}").fetchone() or (0,)
            indexes = conn.execute(
                "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)"
                " FROM pg_index i WHERE i.indrelid = %s::regclass ORDER BY 1",
                (f"pgsched.{name}",),
            ).fetchall()
            total, heap, idx = (int(v) for v in row)
            relations[name] = {
                "rows": int(count),
                "total_bytes": total,
                "heap_bytes": heap,
                "indexes_bytes": idx,
                "heap_plus_indexes_bytes": heap + idx,
                "other_bytes": total - heap - idx,  # TOAST, free space map, visibility map
                "indexes": {n: int(b) for n, b in indexes},
            }
        cold_counts = conn.execute(
            "SELECT status::text, count(*) FROM pgsched.tasks GROUP BY 1 ORDER BY 1"
        ).fetchall()
    task_rows = sum(relations[n]["rows"] for n in ("tasks_cold", "tasks_hot", "tasks_done"))
    total = sum(r["total_bytes"] for r in relations.values())
    hot = relations["tasks_hot"]["total_bytes"]
    return {
        "vacuum_analyze_s": round(vacuum_s, 3),
        "relations": relations,
        "status_counts": {s: int(c) for s, c in cold_counts},
        "task_rows": task_rows,
        "total_bytes": total,
        "bytes_per_task": round(total / task_rows, 1) if task_rows else None,
        "hot_bytes": hot,
        "hot_fraction": hot / total if total else None,
    }


# --------------------------------------------------------------------------------------
# case 2: one at a time


def bench_single(dsn: str, work: Workload, n: int, offset: int) -> dict[str, Any]:
    def args(i: int) -> tuple[str, Jsonb, datetime]:
        return TASK_TYPE, Jsonb({"user": i, "kind": "reminder"}), work.run_at(i)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SINGLE_SQL, args(offset - 1), prepare=True)  # warm: plans, caches
        t0 = time.perf_counter()
        for i in range(offset, offset + n):
            conn.execute(SINGLE_SQL, args(i), prepare=True)
        autocommit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with conn.transaction():
            for i in range(offset + n, offset + 2 * n):
                conn.execute(SINGLE_SQL, args(i), prepare=True)
        one_tx_s = time.perf_counter() - t0
    return {
        "calls": n,
        "autocommit": {
            "what": "each call its own transaction (a commit, so a WAL flush, per task)",
            "seconds": round(autocommit_s, 3),
            "rows_per_s": round(n / autocommit_s),
            "ms_per_call": round(autocommit_s / n * 1000, 3),
        },
        "one_transaction": {
            "what": f"{n:,} calls inside one transaction, one commit",
            "seconds": round(one_tx_s, 3),
            "rows_per_s": round(n / one_tx_s),
            "ms_per_call": round(one_tx_s / n * 1000, 3),
        },
    }


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return str(n)


def main(argv: list[str] | None = None) -> int:
    from benchmarks import measure, suite

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_schedule", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=None, help="bulk tasks (10,000,000)")
    parser.add_argument("--single", type=int, default=None, help="single calls (10,000)")
    parser.add_argument("--quick", action="store_true", help="rows=200,000, single=2,000 (CI)")
    parser.add_argument("--dsn", default=None, help="use this (scratch!) database instead")
    parser.add_argument("--out", type=Path, default=None, help="JSON results file")
    args = parser.parse_args(argv)
    plan = suite.Plan.quick_plan() if args.quick else suite.Plan.full()
    plan = replace(
        plan,
        bulk_rows=args.rows or plan.bulk_rows,
        single_calls=args.single or plan.single_calls,
        pg_test_fsync=False,
    )
    out = args.out or measure.RESULTS / ("schedule-quick.json" if args.quick else "schedule.json")
    with measure.database(args.dsn) as dsn:
        result = suite.case1_scheduling(dsn, plan, None)
    result["command"] = " ".join(["python -m benchmarks.bench_schedule", *(argv or sys.argv[1:])])
    result["machine"] = measure.machine_info()
    measure.write_json(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
