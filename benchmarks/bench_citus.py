"""One node against a three-node Citus cluster on the same machine: the overhead of
distribution, not its gain (every node shares this machine's cores).

    python -m benchmarks.bench_citus                 # 20,000 tasks a drain, 300/s paced
    python -m benchmarks.bench_citus --quick         # 2,000 tasks, 100/s for 10 s (CI smoke)
    python -m benchmarks.bench_citus --tasks 50000 --tenants 64 --rate 500 --seconds 30
    python -m benchmarks.bench_citus --future 10000000   # the drain again beside 10M future

Starts a Citus coordinator and two worker nodes (tests/support/citus_cluster.py; Citus must
be installed), and on it two databases: `single`, migrated by `pgsched migrate` (single-node
mode: every table on the coordinator), and `distributed`, migrated by `pgsched migrate
--distributed` (tasks spread by tenant over both worker nodes). On each, in turn:

- drain: N no-op tasks due now, spread over T tenants, run by worker processes; the rate
  is N over first claim -> last completion, from the events (exactly two per task, checked);
- lateness: tasks due at R per second for S seconds (T tenants), scheduled ahead, run by
  the same workers; lateness is each task's claim time minus its due time, from the events;
- backlog flatness (--future F): F tasks due over the year starting 25 h from now (the cold
  tier, which claims never touch) are scheduled, then the drain is run again beside them;
  flatness is that drain's rate over the first one's (target >= 0.9).

CPU: the workers' own, and the machine's (every node's Postgres is on it). Prints the
figures side by side with their ratio (distributed / single) and writes a JSON result.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from tests.support.citus_cluster import CitusCluster, citus_missing

SCHEDULE_SQL = (
    "SELECT count(*) FROM pgsched.schedule_tasks(task_types => %b::text[],"
    " tenant_ids => %b::text[], run_ats => %b::timestamptz[])"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_citus", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks a drain")
    parser.add_argument("--tenants", type=int, default=32, help="tenants the tasks spread over")
    parser.add_argument("--rate", type=int, default=300, help="tasks due a second (lateness)")
    parser.add_argument("--seconds", type=int, default=20, help="seconds of paced load")
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--cap", type=float, default=600.0, help="give a drain up after this")
    parser.add_argument(
        "--future", type=int, default=0, help="future tasks for the flatness drain (0: none)"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 tasks; 100/s for 10 s")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "citus.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.rate, args.seconds = 2_000, 100, 10
    return args


def migrate(dsn: str, *extra: str) -> None:
    subprocess.run(
        [*measure.pgsched_exe(), "--dsn", dsn, "migrate", *extra],
        check=True,
        capture_output=True,
        env={**os.environ},
    )


def schedule(conn: psycopg.Connection[Any], tenants: list[str], run_ats: list[Any]) -> None:
    chunk = 10_000
    for lo in range(0, len(run_ats), chunk):
        part = run_ats[lo : lo + chunk]
        owners = [tenants[(lo + i) % len(tenants)] for i in range(len(part))]
        row = conn.execute(SCHEDULE_SQL, (["noop"] * len(part), owners, part)).fetchone()
        assert row is not None and row[0] == len(part)


def clear(conn: psycopg.Connection[Any], *, keep_cold: bool = False) -> None:
    tiers = "pgsched.tasks_hot, pgsched.tasks_done, pgsched.tasks_finished, pgsched.task_events"
    conn.execute(f"TRUNCATE {tiers}" + ("" if keep_cold else ", pgsched.tasks_cold"))


def fill_future(dsn: str, tenants: list[str], n: int) -> dict[str, Any]:
    """n tasks due over the 365 days starting 25 h from now, two connections at once."""
    started = time.monotonic()
    chunk = 20_000

    def one_chunk(lo: int) -> None:
        size = min(chunk, n - lo)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pgsched.schedule_tasks("
                " task_types => array_fill('noop'::text, ARRAY[%(size)s]),"
                " tenant_ids => ARRAY(SELECT (%(tenants)s::text[])[1 + (%(lo)s + i) %% %(t)s]"
                "   FROM generate_series(0, %(size)s - 1) AS i),"
                " run_ats => ARRAY(SELECT now() + interval '25 hours'"
                "   + ((%(lo)s + i)::float8 / %(n)s) * interval '365 days'"
                "   FROM generate_series(0, %(size)s - 1) AS i))",
                {"size": size, "tenants": tenants, "lo": lo, "t": len(tenants), "n": n},
            ).fetchone()
            assert row is not None and row[0] == size

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one_chunk, range(0, n, chunk)))
    seconds = time.monotonic() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        cold = measure.one(conn, "SELECT count(*) FROM pgsched.tasks_cold")
        # The drain beside them measures the claim path, not the fill's aftermath: its WAL
        # checkpointed and the cold tier vacuumed (on every node), as a day later.
        settle_started = time.monotonic()
        conn.execute("VACUUM (ANALYZE) pgsched.tasks")
        conn.execute("CHECKPOINT")
        conn.execute("SELECT run_command_on_workers('CHECKPOINT')")
        settle_seconds = time.monotonic() - settle_started
    return {
        "future": n,
        "in_cold_tier": cold,
        "seconds": round(seconds, 1),
        "per_s": round(n / seconds) if seconds else None,
        "vacuum_and_checkpoint_seconds": round(settle_seconds, 1),
    }


def lateness(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    rows = conn.execute(
        "SELECT extract(epoch FROM occurred_at - scheduled_for) * 1000 FROM pgsched.task_events"
        " WHERE to_status = 'PROCESSING'"
    ).fetchall()
    return measure.percentiles([float(r[0]) for r in rows])


def node_cpu(postmasters: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each node's Postgres (its postmaster and children)."""
    return {
        node: (measure.server_cpu_seconds(pid) or 0.0) if pid else 0.0
        for node, pid in postmasters.items()
    }


def drain(
    conn: psycopg.Connection[Any],
    dsn: str,
    name: str,
    label: str,
    tenants: list[str],
    args: argparse.Namespace,
    postmasters: dict[str, int | None],
) -> dict[str, Any]:
    """args.tasks no-op tasks due now over the tenants, drained by the workers."""
    now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    measure.step(f"{name}: {label}: {args.tasks:,} tasks due now over {args.tenants} tenants")
    schedule(conn, tenants, [now[0]] * args.tasks)
    check = measure.Drained(conn, args.tasks)
    workers = measure.pgsched_workers(
        dsn, f"{name}-{label}", args.processes, args.batch_size, args.concurrency
    ).start()
    busy0, t0 = measure.machine_busy_seconds(), time.monotonic()
    clients0 = sum(measure.cpu_seconds(p) for p in workers.pids)
    nodes0 = node_cpu(postmasters)
    try:
        finished, _ = measure.wait_until(check, args.cap, workers, idle_timeout=45.0)
    finally:
        clients1 = sum(measure.cpu_seconds(p) for p in workers.pids)
        nodes1 = node_cpu(postmasters)
        busy1, t1 = measure.machine_busy_seconds(), time.monotonic()
        codes = workers.stop(dsn=dsn)
    figures = measure.drain_rate(conn)
    verified = measure.verify_events(conn, args.tasks) if finished else None
    done = figures["completed"] or 1
    result = {
        "finished": finished,
        "tasks_per_s": figures.get("tasks_per_s"),
        "seconds": figures.get("seconds"),
        "machine_cores": round((busy1 - busy0) / (t1 - t0), 2),
        "workers_us_per_task": round((clients1 - clients0) / done * 1e6, 1),
        "machine_us_per_task": round((busy1 - busy0) / done * 1e6, 1),
        # Each node's Postgres: the coordinator's share is what caps a cluster.
        "node_us_per_task": {
            node: round((nodes1[node] - nodes0[node]) / done * 1e6, 1) for node in nodes1
        },
        "verification": verified,
        "worker_exit_codes": codes,
        "worker_warnings": workers.warnings(),
    }
    workers.cleanup()
    measure.note(
        f"{name}: {label} {figures.get('tasks_per_s')}/s,"
        f" {result['machine_us_per_task']} us machine CPU a task"
    )
    return result


def run_one(
    dsn: str, name: str, args: argparse.Namespace, postmasters: dict[str, int | None]
) -> dict[str, Any]:
    tenants = [f"tenant-{i:03d}" for i in range(args.tenants)]
    out: dict[str, Any] = {"mode": name}
    with psycopg.connect(dsn, autocommit=True) as conn:
        clear(conn)
        out["drain"] = drain(conn, dsn, name, "drain", tenants, args, postmasters)

        clear(conn)
        workers = measure.pgsched_workers(
            dsn, f"{name}-paced", args.processes, args.batch_size, args.concurrency
        ).start()
        time.sleep(3.0)  # the workers running before the first task is due
        now = conn.execute("SELECT now()").fetchone()
        assert now is not None
        n = args.rate * args.seconds
        start = now[0] + timedelta(seconds=2)
        run_ats = [start + timedelta(seconds=i / args.rate) for i in range(n)]
        measure.step(f"{name}: {args.rate}/s due for {args.seconds} s")
        schedule(conn, tenants, run_ats)
        check = measure.Drained(conn, n)
        try:
            finished, _ = measure.wait_until(
                check, args.seconds + args.cap, workers, idle_timeout=45.0
            )
        finally:
            codes = workers.stop(dsn=dsn)
        out["lateness"] = {
            "finished": finished,
            "offered_per_s": args.rate,
            "ms": lateness(conn),
            "verification": measure.verify_events(conn, n) if finished else None,
            "worker_exit_codes": codes,
            "worker_warnings": workers.warnings(),
        }
        workers.cleanup()
        ms = out["lateness"]["ms"]
        measure.note(f"{name}: lateness p50 {ms['p50']} ms, p99 {ms['p99']} ms")

        if args.future:
            clear(conn)
            measure.step(f"{name}: scheduling {args.future:,} future tasks (the cold tier)")
            out["future"] = fill_future(dsn, tenants, args.future)
            measure.note(f"{name}: {out['future']['per_s']:,} future tasks/s scheduled")
            clear(conn, keep_cold=True)
            out["drain_beside_future"] = drain(
                conn, dsn, name, "drain beside the future tasks", tenants, args, postmasters
            )
            empty = out["drain"]["tasks_per_s"]
            full = out["drain_beside_future"]["tasks_per_s"]
            out["flatness"] = round(full / empty, 2) if empty and full else None
            measure.note(f"{name}: flatness {out['flatness']} (target >= 0.9)")
            clear(conn)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    missing = citus_missing()
    if missing:
        raise SystemExit(f"bench_citus: {missing}")
    cluster = CitusCluster()
    measure.step("starting a Citus coordinator and two worker nodes")
    cluster.start()
    try:
        single = cluster.new_database("bench_single")
        migrate(single)
        distributed = cluster.new_database("bench_distributed")
        migrate(distributed, "--distributed")
        postmasters = {node.name: measure.postmaster_pid(node.dsn()) for node in cluster.nodes}
        results = [
            run_one(single, "single", args, postmasters),
            run_one(distributed, "distributed", args, postmasters),
        ]
    finally:
        cluster.stop()
    by = {r["mode"]: r for r in results}

    def ratio(path: tuple[str, ...]) -> float | None:
        values = []
        for mode in ("distributed", "single"):
            value: Any = by[mode]
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            values.append(value)
        if not values[0] or not values[1]:
            return None
        return round(float(values[0]) / float(values[1]), 2)

    rows = [
        ("drain tasks/s", ("drain", "tasks_per_s")),
        ("drain machine CPU us/task", ("drain", "machine_us_per_task")),
        ("drain workers CPU us/task", ("drain", "workers_us_per_task")),
        ("drain coordinator CPU us/task", ("drain", "node_us_per_task", "coordinator")),
        ("drain worker-1 CPU us/task", ("drain", "node_us_per_task", "worker-1")),
        ("drain worker-2 CPU us/task", ("drain", "node_us_per_task", "worker-2")),
        ("lateness p50 ms", ("lateness", "ms", "p50")),
        ("lateness p99 ms", ("lateness", "ms", "p99")),
        ("lateness max ms", ("lateness", "ms", "max")),
    ]
    if args.future:
        rows += [
            ("future tasks scheduled/s", ("future", "per_s")),
            ("drain beside future tasks/s", ("drain_beside_future", "tasks_per_s")),
            ("flatness (beside / empty)", ("flatness",)),
        ]
    print(f"\n{'figure':30} {'single':>12} {'distributed':>12} {'ratio':>7}")
    table = []
    for label, path in rows:
        values = []
        for mode in ("single", "distributed"):
            value: Any = by[mode]
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            values.append(value)
        table.append({"figure": label, "single": values[0], "distributed": values[1]})
        table[-1]["ratio"] = ratio(path)
        print(f"{label:30} {values[0]!s:>12} {values[1]!s:>12} {table[-1]['ratio']!s:>7}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    measure.write_json(
        args.out,
        {
            "benchmark": "citus",
            "machine": measure.machine_info(),
            "settings": {k: str(v) for k, v in vars(args).items()},
            "results": results,
            "table": table,
        },
    )
    ok = all(
        r["drain"]["finished"]
        and r["lateness"]["finished"]
        and (not args.future or r["drain_beside_future"]["finished"])
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
