"""Case 2, backlog flatness: does a large cold tier slow the claim path down?

The same no-op workload (N tasks due now, one `pgsched worker --lanes normal` process, the
same batch size and concurrency) is run with an empty cold tier, then with 1M and 10M
future tasks present (quick: 0 and 200k), each point at least twice; the figure is the
median throughput at the largest backlog over the median with none (target >= 0.9).

The backlog is built with the bulk path of case 1 (raw pgsched.schedule_tasks, binary
arrays, 2 connections; benchmarks/bench_schedule.py), due uniformly over the 365 days
starting 25 h from now, so every backlog task is PENDING in tasks_cold. Between runs the
hot and done tiers and the events are emptied; the cold tier stays.

The suite (benchmarks/__main__.py) interleaves this with case 1: the 10M point reuses the
10M tasks that case 1 schedules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.measure import drain_line, note, one, step
from benchmarks.suite import Plan


def cold_count(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(one(conn, "SELECT count(*) FROM pgsched.tasks_cold"))


def fill_backlog(dsn: str, target: int) -> dict[str, Any]:
    """Bring the cold tier up to `target` future tasks (bench_schedule's bulk path)."""
    from benchmarks import bench_schedule as bs

    present = cold_count(dsn)
    extra = target - present
    if extra <= 0:
        return {"scheduled": 0, "present": present}
    step(f"case 2: building the backlog: {extra:,} future tasks over 365 days (bulk path)")
    work = bs.Workload(start=datetime.now(UTC) + timedelta(hours=25))
    progress = bs.Progress(total=extra, every=max(bs.RAW_CHUNK, min(1_000_000, extra // 4)))
    raw = bs.bench_raw(dsn, work, present, target, 2, progress)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgsched.tasks")
    note(f"{extra:,} in {raw['wall_s']:.1f}s ({raw['rows_per_s']:,} rows/s)")
    return {"scheduled": extra, "seconds": raw["wall_s"], "rows_per_s": raw["rows_per_s"]}


def reset_all(dsn: str) -> None:
    """Empty every pgsched table (between the backlog points and case 1's timed load)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE pgsched.tasks, pgsched.task_events, pgsched.idempotency_keys RESTART IDENTITY"
        )
        conn.execute("VACUUM ANALYZE pgsched.tasks")
        conn.execute("CHECKPOINT")


def measure_point(dsn: str, plan: Plan, backlog_label: int) -> dict[str, Any]:
    """The flatness workload, plan.backlog_repeats times, with the cold tier as it is."""
    present = cold_count(dsn)
    runs = []
    for k in range(plan.backlog_repeats):
        step(
            f"case 2: pgsched with {present:,} future tasks, run {k + 1}/{plan.backlog_repeats}:"
            f" {plan.backlog_tasks:,} no-op tasks, 1 worker process, batch {plan.backlog_batch},"
            f" concurrency {plan.backlog_concurrency}"
        )
        r = measure.pgsched_drain(
            dsn,
            plan.backlog_tasks,
            processes=1,
            batch_size=plan.backlog_batch,
            concurrency=plan.backlog_concurrency,
            cap_s=plan.backlog_cap_s,
            name="bench-backlog",
        )
        note(drain_line(r))
        runs.append(r)
    return {
        "backlog": backlog_label,
        "cold_tasks_present": present,
        "runs": runs,
        "median_tasks_per_s": measure.median([r.get("tasks_per_s") for r in runs]),
    }


def buffer_cache_use(dsn: str) -> dict[str, int] | None:
    """How many of the server's shared buffers hold a page (pg_buffercache), or None when
    the server lacks that contrib extension."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE relfilenode IS NOT NULL), count(*)"
                " FROM pg_buffercache"
            ).fetchone()
    except psycopg.Error:
        return None
    return {"used": int(row[0]), "total": int(row[1])} if row else None


def control_summary(point: dict[str, Any], case2: dict[str, Any]) -> dict[str, Any]:
    """The control point: no backlog in its database, but the buffer cache as full as the
    largest backlog left it. Compared with both the empty run and the largest backlog."""
    points = case2["points"]
    empty, largest = points[0]["median_tasks_per_s"], points[-1]["median_tasks_per_s"]
    rate = point["median_tasks_per_s"]
    point["ratio_to_empty"] = round(rate / empty, 3) if empty and rate else None
    point["largest_to_control"] = round(largest / rate, 3) if largest and rate else None
    return point


def summarize(points: list[dict[str, Any]], plan: Plan) -> dict[str, Any]:
    base = points[0]["median_tasks_per_s"] if points else None
    for p in points:
        rate = p["median_tasks_per_s"]
        p["ratio_to_empty"] = round(rate / base, 3) if base and rate else None
    largest = max(points, key=lambda p: p["backlog"]) if points else None
    return {
        "points": sorted(points, key=lambda p: p["backlog"]),
        "tasks_per_run": plan.backlog_tasks,
        "repeats": plan.backlog_repeats,
        "worker": {
            "processes": 1,
            "batch_size": plan.backlog_batch,
            "concurrency": plan.backlog_concurrency,
        },
        "flatness": largest["ratio_to_empty"] if largest else None,
        "largest_backlog": largest["backlog"] if largest else None,
    }
