"""Postgres-only claims against claims through the Redis hot tier, side by side in one run.

    python -m benchmarks.bench_hot_tier                # 50,000 tasks; 1 and 4 processes; 1,000/s
    python -m benchmarks.bench_hot_tier --quick        # 10,000 tasks; 1 and 2 processes; 5 s
    python -m benchmarks.bench_hot_tier --tasks 100000 --processes 1 2 4 --rate 1000 5000

On one database and one redis-server, for each mode (`postgres`: workers as shipped;
`redis`: the same workers with `--redis`, the sweeper with `--redis` mirroring the window):

    drain     N no-op tasks due now, P worker processes (batch 100, concurrency 50) and a
              sweeper: throughput from the events (checked: two per task), CPU per task of
              the workers + sweeper, of Postgres and of redis-server, and in redis mode how
              many tasks were claimed by id (popped from Redis) and how many by the top-up
    lateness  R tasks/s for D seconds scheduled ahead, one worker: claim lateness p50 / p99
              / max (task_runs.started_at - scheduled_for, by the database clock)
    memory    Redis bytes per mirrored id (a lane's sorted set) at 10k / 100k / 1M ids

The hot tier serves lanes whose claims are in plain priority order, so NORMAL's fair
claims across tenants are turned off (`lane_set_fairness`) for both modes alike.

Ratios redis / postgres are printed per case and written with the figures to
benchmarks/results/hot_tier.json. Without --dsn a throwaway, durable Postgres cluster is
started (benchmarks/pgserver.py); redis-server always is (benchmarks/redisserver.py).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.redisserver import RedisServer
from pgsched.hot_tier.keys import LaneKeys, score

MODES = ("postgres", "redis")
BATCH = 100
CONCURRENCY = 50


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_hot_tier", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks per drain (50,000)")
    parser.add_argument("--processes", type=int, nargs="+", default=None, help="1 4")
    parser.add_argument("--rate", type=int, nargs="+", default=None, help="tasks/s (1000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per rate (20)")
    parser.add_argument(
        "--memory-sizes", type=int, nargs="+", default=None, help="10000 100000 1000000"
    )
    parser.add_argument("--quick", action="store_true", help="10,000 tasks, 1 and 2, 5 s")
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "hot_tier.json")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tasks = args.tasks or (10_000 if quick else 50_000)
    args.processes = args.processes or ([1, 2] if quick else [1, 4])
    args.rate = args.rate or [1000]
    args.duration = args.duration or (5.0 if quick else 20.0)
    args.memory_sizes = args.memory_sizes or (
        [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
    )
    return args


def start_sweeper(dsn: str, mode: str, redis: RedisServer) -> measure.Procs:
    argv = [*measure.pgsched_exe(), "--dsn", dsn, "sweeper", "--log-level", "WARNING"]
    if mode == "redis":
        argv += ["--redis", redis.url]
    sweeper = measure.Procs("bench-sweeper", [argv]).start()
    if mode == "redis":
        keys = LaneKeys("pgsched", "NORMAL")
        deadline = time.monotonic() + 30
        with redis.client() as c:
            while not c.exists(keys.meta):
                sweeper.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("the sweeper did not build the mirror within 30 s")
                time.sleep(0.05)
    return sweeper


def worker_extra(mode: str, redis: RedisServer) -> list[str]:
    # INFO: the worker's last line says where its claims came from.
    extra = ["--log-level", "INFO"]
    return [*extra, "--redis", redis.url] if mode == "redis" else extra


def claim_split(log_text: str) -> dict[str, int] | None:
    found = re.findall(
        r"(\d+) ids popped, (\d+) claimed by id, (\d+) dropped .*?, (\d+) claimed from Postgres",
        log_text,
    )
    if not found:
        return None
    totals = [sum(int(row[i]) for row in found) for i in range(4)]
    return dict(zip(("popped", "claimed_by_id", "dropped", "topped_up"), totals, strict=True))


def drain(dsn: str, redis: RedisServer, mode: str, n: int, processes: int) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    with redis.client() as c:
        c.flushall()
    measure.schedule_due_now(dsn, n)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgsched.tasks_hot")
    sweeper = start_sweeper(dsn, mode, redis)
    pm = measure.postmaster_pid(dsn)
    progress = psycopg.connect(dsn, autocommit=True)
    check = measure.Drained(progress, n)
    workers = measure.pgsched_workers(
        dsn, "bench-hot", processes, BATCH, CONCURRENCY, extra=worker_extra(mode, redis)
    ).start()
    meter = measure.CpuMeter([*workers.pids, *sweeper.pids], pm)
    meter.begin()
    redis_cpu = measure.cpu_seconds(redis.pid)
    try:
        finished, _ = measure.wait_until(check, 300.0, workers, idle_timeout=45.0)
        cpu = meter.end()
        redis_cpu = measure.cpu_seconds(redis.pid) - redis_cpu
    finally:
        workers.stop(dsn=dsn)
        sweeper.stop(dsn=dsn)
        progress.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        figures = measure.drain_rate(conn)
        checked = measure.verify_events(conn, n) if finished else None
    done = max(figures["completed"], 1)
    result = {
        "case": "drain",
        "mode": mode,
        "tasks": n,
        "processes": processes,
        "finished": finished,
        "tasks_per_s": figures["tasks_per_s"],
        "seconds": figures["seconds"],
        "cpu_us_per_task": {
            "workers_and_sweeper": round(cpu["clients_cpu_s"] / done * 1e6, 1),
            "postgres": round(cpu["postgres_cpu_s"] / done * 1e6, 1),
            "redis": round(redis_cpu / done * 1e6, 1),
        },
        "claims": claim_split(workers.log_text()),
        "events_ok": bool(checked and checked["ok"]),
        "warnings": workers.warnings() + sweeper.warnings(),
    }
    workers.cleanup()
    sweeper.cleanup()
    return result


def lateness(dsn: str, redis: RedisServer, mode: str, rate: int, duration: float) -> dict[str, Any]:
    n = int(rate * duration)
    measure.clear_worked_tasks(dsn)
    with redis.client() as c:
        c.flushall()
    sweeper = start_sweeper(dsn, mode, redis)
    workers = measure.pgsched_workers(
        dsn, "bench-hot", 1, 500, 500, extra=worker_extra(mode, redis)
    ).start()
    pm = measure.postmaster_pid(dsn)
    try:
        workers.wait_listening(dsn)
        lead = 3.0 + n / 15_000
        first_due = measure.db_now(dsn) + timedelta(seconds=lead)
        run_ats = [first_due + timedelta(seconds=i / rate) for i in range(n)]
        lo, hi, _ = measure.schedule_at(dsn, run_ats)
        meter = measure.CpuMeter([*workers.pids, *sweeper.pids], pm)
        meter.begin()
        while (wait := (run_ats[-1] - measure.db_now(dsn)).total_seconds()) > 0:
            workers.check_alive()
            time.sleep(min(wait, 0.5))
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed, _ = measure.wait_until(measure.Drained(conn, n, 0), 120.0, workers, 30.0)
        cpu = meter.end()
    finally:
        workers.stop(dsn=dsn)
        sweeper.stop(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        values = measure.lateness_of_tasks(conn, lo, hi)
    figures = measure.lateness_figures(values, n)
    figures.pop("cdf")
    result = {
        "case": "lateness",
        "mode": mode,
        "rate_per_s": rate,
        "duration_s": duration,
        "all_completed": completed,
        **figures,
        "cpu_us_per_task": {
            "workers_and_sweeper": round(cpu["clients_cpu_s"] / max(n, 1) * 1e6, 1),
            "postgres": round(cpu["postgres_cpu_s"] / max(n, 1) * 1e6, 1),
        },
        "claims": claim_split(workers.log_text()),
        "warnings": workers.warnings() + sweeper.warnings(),
    }
    workers.cleanup()
    sweeper.cleanup()
    return result


def memory_per_id(redis: RedisServer, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Bytes a lane's sorted set costs per mirrored id, ids and scores as the mirror writes
    them (ids from a bigint sequence, due times a millisecond apart)."""
    results = []
    due = datetime.now()
    with redis.client() as c:
        for size in sizes:
            c.flushall()
            before = int(c.info("memory")["used_memory"])
            key = LaneKeys("bench", "NORMAL").due
            for lo in range(0, size, 10_000):
                chunk = range(lo, min(size, lo + 10_000))
                c.zadd(
                    key,
                    {str(1_000_000 + i): score(5, due + timedelta(milliseconds=i)) for i in chunk},
                )
            after = int(c.info("memory")["used_memory"])
            results.append({"ids": size, "bytes_per_id": round((after - before) / size, 1)})
        c.flushall()
    return results


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    with measure.database(args.dsn) as dsn, RedisServer() as redis:
        server = measure.server_settings(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")
        measure.step(f"{server['version']}; redis-server on port {redis.port}")
        for processes in args.processes:
            pair = {}
            for mode in MODES:
                measure.step(f"drain {args.tasks:,} tasks, {processes} process(es), {mode}")
                run = drain(dsn, redis, mode, args.tasks, processes)
                measure.note(
                    f"{run['tasks_per_s']} tasks/s; CPU us/task {run['cpu_us_per_task']};"
                    f" claims {run['claims']}; events ok {run['events_ok']}"
                )
                results.append(run)
                pair[mode] = run
            comparisons.append(
                {
                    "case": f"drain, {processes} process(es)",
                    "throughput_redis_over_postgres": ratio(
                        pair["redis"]["tasks_per_s"], pair["postgres"]["tasks_per_s"]
                    ),
                    "postgres_cpu_redis_over_postgres": ratio(
                        pair["redis"]["cpu_us_per_task"]["postgres"],
                        pair["postgres"]["cpu_us_per_task"]["postgres"],
                    ),
                }
            )
        for rate in args.rate:
            pair = {}
            for mode in MODES:
                measure.step(f"lateness at {rate:,}/s for {args.duration:g}s, {mode}")
                run = lateness(dsn, redis, mode, rate, args.duration)
                ms = run["ms"]
                measure.note(
                    f"{run['started']:,}/{run['tasks']:,} started; ms p50 {ms['p50']}"
                    f" p99 {ms['p99']} max {ms['max']}; CPU us/task {run['cpu_us_per_task']}"
                )
                results.append(run)
                pair[mode] = run
            comparisons.append(
                {
                    "case": f"lateness at {rate}/s",
                    "p99_redis_over_postgres": ratio(
                        pair["redis"]["ms"]["p99"], pair["postgres"]["ms"]["p99"]
                    ),
                    "postgres_cpu_redis_over_postgres": ratio(
                        pair["redis"]["cpu_us_per_task"]["postgres"],
                        pair["postgres"]["cpu_us_per_task"]["postgres"],
                    ),
                }
            )
        measure.step("Redis memory per mirrored id")
        memory = memory_per_id(redis, args.memory_sizes)
        for m in memory:
            measure.note(f"{m['ids']:,} ids: {m['bytes_per_id']} bytes per id")
    measure.step("redis / postgres")
    for c in comparisons:
        measure.note(", ".join(f"{k} {v}" for k, v in c.items()))
    measure.write_json(
        args.out,
        {
            "benchmark": "hot_tier",
            "command": " ".join(["python -m benchmarks.bench_hot_tier", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "postgres": server,
            "results": results,
            "comparisons": comparisons,
            "redis_memory": memory,
        },
    )
    drains_ok = all(r["events_ok"] for r in results if r["case"] == "drain")
    late_ok = all(r["all_completed"] for r in results if r["case"] == "lateness")
    return 0 if drains_ok and late_ok else 1


if __name__ == "__main__":
    sys.exit(main())
