"""Workflows through real worker processes: how soon a child runs after its last parent, what
an edge costs, and whether waiting steps slow the claims down.

    python -m benchmarks.bench_workflows                       # the full sizes
    python -m benchmarks.bench_workflows --smoke               # tiny sizes (the test's)
    python -m benchmarks.bench_workflows --fan 100000 --chain 10000 --batch 1000000 \\
        --waiting 1000000 --drain 100000 --dsn postgresql://... --out results.json

Scenarios, each on an emptied task table, with `pgsched worker --app benchmarks.noop_app:app`
processes draining the NORMAL lane:

  fan-out / fan-in  one parent, N children of it (`schedule_tasks(depends_on => [parent])`),
                    one final task waiting for every child: 1 -> N -> 1
  chain             K tasks, each waiting for the one before
  batch             `schedule_batch`: M members and a callback

Release latency is read from pgsched.task_events: a child's claim (QUEUED -> PROCESSING)
minus its last parent's completion (PROCESSING -> COMPLETED), p50 / p99 over the children
(fan-out), the links (chain), and the one fan-in or callback. CPU per edge is the workers'
and Postgres's CPU over the scenario (benchmarks/measure.py) over its edges, the edges of
the run whether released or not. Claim flatness: the drain rate of `--drain` no-op tasks
with `--waiting` steps waiting in the cold tier (children of a parent that never runs),
over the rate with none (>= 0.9 is the issue's bar). Before each of the two drains the
tables are vacuumed and analyzed and a checkpoint is taken, as bench_backlog does: without
it, the drain beside a million rows just written shared the two cores with autovacuum's
pass over them and measured that.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure

FULL = {"fan": 100_000, "chain": 10_000, "batch": 1_000_000, "waiting": 1_000_000, "drain": 100_000}
SMOKE = {"fan": 50, "chain": 10, "batch": 100, "waiting": 500, "drain": 300}
CHUNK = 20_000


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_workflows", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    for name, size in FULL.items():
        parser.add_argument(f"--{name}", type=int, default=None, help=f"default {size:,}")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--batch-size", type=int, default=250, help="claim batch (250)")
    parser.add_argument("--concurrency", type=int, default=500, help="per worker (500)")
    parser.add_argument("--cap", type=float, default=3600.0, help="seconds a scenario may take")
    parser.add_argument("--dsn", default=None, help="a database to use (else a throwaway one)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    return parser.parse_args(argv)


def empty(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE pgsched.tasks, pgsched.task_events, pgsched.task_dependencies,"
            " pgsched.idempotency_keys, pgsched.completed_work"
        )
        conn.execute("ANALYZE pgsched.tasks_hot")


def schedule_children(conn: psycopg.Connection[Any], n: int, parents: list[int]) -> list[int]:
    ids: list[int] = []
    for lo in range(0, n, CHUNK):
        count = min(CHUNK, n - lo)
        ids += [
            r[0]
            for r in conn.execute(
                "SELECT task_id FROM pgsched.schedule_tasks("
                " array_fill('noop'::text, ARRAY[%s]), depends_on => %s::bigint[])",
                (count, parents),
            )
        ]
    return ids


def latencies(conn: psycopg.Connection[Any], pairs_sql: str) -> list[float]:
    """Seconds from a parent's completion to its child's claim, one per child, from
    `pairs_sql` (child id, its last parent's id)."""
    rows = conn.execute(
        f"""
        WITH pairs AS ({pairs_sql}),
        done AS (
            SELECT e.task_id, max(e.occurred_at) AS at FROM pgsched.task_events AS e
             WHERE e.to_status = 'COMPLETED' AND e.task_id IN (SELECT parent FROM pairs)
             GROUP BY e.task_id
        ),
        claimed AS (
            SELECT e.task_id, min(e.occurred_at) AS at FROM pgsched.task_events AS e
             WHERE e.to_status = 'PROCESSING' AND e.task_id IN (SELECT child FROM pairs)
             GROUP BY e.task_id
        )
        SELECT extract(EPOCH FROM c.at - d.at)::float8
          FROM pairs AS p
          JOIN done AS d ON d.task_id = p.parent
          JOIN claimed AS c ON c.task_id = p.child
        """
    ).fetchall()
    return [r[0] for r in rows]


def completed(conn: psycopg.Connection[Any], task_id: int) -> bool:
    row = conn.execute(
        "SELECT status = 'COMPLETED' FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    return bool(row and row[0])


def run_scenario(
    args: argparse.Namespace, dsn: str, name: str, edges: int, last: int, pairs_sql: str
) -> dict[str, Any]:
    """Start the workers, wait for task `last` to complete, measure."""
    postmaster = measure.postmaster_pid(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        workers = measure.pgsched_workers(
            dsn, f"wf-{name}", args.processes, args.batch_size, args.concurrency
        ).start()
        try:
            meter = measure.CpuMeter(workers.pids, postmaster)
            meter.begin()
            done, took = measure.wait_until(
                lambda: (
                    completed(conn, last),
                    conn.execute(
                        "SELECT count(*) FROM pgsched.task_events WHERE to_status = 'COMPLETED'"
                    ).fetchone(),
                ),
                args.cap,
                workers,
            )
            cpu = meter.end()
        finally:
            workers.stop()
        if not done:
            raise SystemExit(f"{name}: task {last} not completed within {took:.0f}s")
        lat = latencies(conn, pairs_sql)
    cpu_s = cpu["clients_cpu_s"] + cpu["postgres_cpu_s"]
    return {
        "scenario": name,
        "edges": edges,
        "seconds": round(took, 2),
        "latency_s": measure.percentiles(lat),
        "cpu_s": round(cpu_s, 2),
        "cpu_us_per_edge": round(cpu_s / max(edges, 1) * 1e6, 1),
        "cpu": cpu,
    }


def fan(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    empty(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = measure.one(conn, "SELECT pgsched.schedule_task('noop')")
        children = schedule_children(conn, args.fan, [parent])
        final = measure.one(
            conn, "SELECT pgsched.schedule_task('noop', depends_on => %s::bigint[])", (children,)
        )
    out = run_scenario(
        args,
        dsn,
        "fan-out",
        2 * len(children),
        final,
        f"SELECT d.child_id AS child, d.parent_id AS parent FROM pgsched.task_dependencies AS d"
        f" WHERE d.parent_id = {int(parent)}",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        fan_in = latencies(
            conn,
            f"SELECT {int(final)}::bigint AS child, (SELECT e.task_id FROM pgsched.task_events AS e"
            " WHERE e.to_status = 'COMPLETED' AND e.task_id = ANY("
            "ARRAY(SELECT d.parent_id FROM pgsched.task_dependencies AS d"
            f" WHERE d.child_id = {int(final)}))"
            " ORDER BY e.occurred_at DESC LIMIT 1) AS parent",
        )
    fan_in_row = dict(out, scenario="fan-in", latency_s=measure.percentiles(fan_in))
    return [out, fan_in_row]


def chain(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    empty(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [measure.one(conn, "SELECT pgsched.schedule_task('noop')")]
        with conn.transaction():
            for _ in range(args.chain - 1):
                ids.append(
                    measure.one(
                        conn,
                        "SELECT pgsched.schedule_task('noop', depends_on => ARRAY[%s]::bigint[])",
                        (ids[-1],),
                    )
                )
    return run_scenario(
        args,
        dsn,
        "chain",
        len(ids) - 1,
        ids[-1],
        "SELECT d.child_id AS child, d.parent_id AS parent FROM pgsched.task_dependencies AS d",
    )


def batch(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    empty(dsn)
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        callback = measure.one(
            conn,
            "SELECT callback_id FROM pgsched.schedule_batch(array_fill('noop'::text, ARRAY[%s]),"
            " on_complete_type => 'noop')",
            (args.batch,),
        )
    scheduled_s = time.perf_counter() - started
    out = run_scenario(
        args,
        dsn,
        "batch",
        args.batch,
        callback,
        f"SELECT {int(callback)}::bigint AS child, (SELECT e.task_id FROM pgsched.task_events AS e"
        " WHERE e.to_status = 'COMPLETED' AND e.task_id <> "
        f"{int(callback)} ORDER BY e.occurred_at DESC LIMIT 1) AS parent",
    )
    out["schedule_s"] = round(scheduled_s, 2)
    return out


def drain_rate(args: argparse.Namespace, dsn: str, waiting: int) -> dict[str, Any]:
    empty(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if waiting:
            # A parent far in the future: its children wait in the cold tier all along.
            blocker = measure.one(
                conn, "SELECT pgsched.schedule_task('noop', run_at => now() + interval '30 days')"
            )
            schedule_children(conn, waiting, [blocker])
    measure.schedule_due_now(dsn, args.drain)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgsched.tasks, pgsched.task_dependencies")
        conn.execute("CHECKPOINT")
    with psycopg.connect(dsn, autocommit=True) as conn:
        workers = measure.pgsched_workers(
            dsn, "wf-drain", args.processes, args.batch_size, args.concurrency
        ).start()
        try:
            target = args.drain
            done, took = measure.wait_until(
                lambda: (
                    (
                        n := measure.one(
                            conn, "SELECT count(*) FROM pgsched.tasks WHERE status = 'COMPLETED'"
                        )
                    )
                    >= target,
                    n,
                ),
                args.cap,
                workers,
            )
        finally:
            workers.stop()
        rate = measure.drain_rate(conn)
    if not done:
        raise SystemExit(f"drain with {waiting} waiting: not drained within {took:.0f}s")
    return {"waiting": waiting, "tasks_per_s": rate.get("tasks_per_s")}


def table(results: dict[str, Any]) -> str:
    lines = [
        "| scenario | edges | seconds | release p50 | release p99 | CPU per edge |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results["scenarios"]:
        lat = r["latency_s"]
        lines.append(
            f"| {r['scenario']} | {r['edges']:,} | {r['seconds']} | {ms(lat.get('p50'))} |"
            f" {ms(lat.get('p99'))} | {r['cpu_us_per_edge']} µs |"
        )
    f = results["flatness"]
    lines.append("")
    lines.append(
        f"claim flatness: {f['with_waiting']['tasks_per_s']} tasks/s with "
        f"{f['with_waiting']['waiting']:,} waiting steps, {f['empty']['tasks_per_s']} with none:"
        f" {f['ratio']}"
    )
    return "\n".join(lines)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    for name, size in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, size)
    with measure.database(args.dsn) as dsn:
        measure.step(f"fan-out / fan-in 1 -> {args.fan:,} -> 1")
        scenarios = fan(args, dsn)
        measure.step(f"chain of {args.chain:,}")
        scenarios.append(chain(args, dsn))
        measure.step(f"batch of {args.batch:,}")
        scenarios.append(batch(args, dsn))
        measure.step(f"claim flatness: {args.drain:,} due, {args.waiting:,} waiting")
        empty_rate = drain_rate(args, dsn, 0)
        waiting_rate = drain_rate(args, dsn, args.waiting)
        empty(dsn)
    ratio = None
    if empty_rate["tasks_per_s"] and waiting_rate["tasks_per_s"]:
        ratio = round(waiting_rate["tasks_per_s"] / empty_rate["tasks_per_s"], 3)
    results = {
        "benchmark": "workflows",
        "sizes": {name: getattr(args, name) for name in FULL},
        "processes": args.processes,
        "scenarios": scenarios,
        "flatness": {"empty": empty_rate, "with_waiting": waiting_rate, "ratio": ratio},
        "machine": measure.machine_info(),
    }
    print(table(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
