"""What retention costs today (deleting rows) against dropping a partition of the same rows.

N tasks due now are claimed and completed (500 a batch), leaving N rows in
`pgsched.tasks_done` and 2N in `pgsched.task_events`. Then, from one connection (its
backend's CPU read from /proc, the WAL position before and after):

    prune   `pgsched.retention_prune` with `as_of` a month ahead (every row is past
            retention), 10,000 rows a call as the sweeper does, until nothing is left;
            then the dead tuples and the bytes the two tables still hold
    drop    the same events copied into a range-partitioned table with one partition
            (not timed), then DROP TABLE of that partition

    python -m benchmarks.bench_retention_prune --tasks 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.bench_search_index_cost import BATCH, DUE_NOW, Probe

PRUNE = (
    "SELECT tasks, events FROM pgsched.retention_prune("
    "'30 days', 10000, now() + interval '31 days')"
)
TABLE_STATS = (
    "SELECT coalesce(n_dead_tup, 0), pg_total_relation_size(relid)"
    " FROM pg_stat_all_tables WHERE relid = %s::regclass"
)


def complete_tasks(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(DUE_NOW, {"n": n})
    finished = 0
    while finished < n:
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '1 hour')",
            (BATCH,),
        ).fetchall()
        if not claimed:
            raise RuntimeError(f"claimed and finished {finished} of {n} tasks")
        conn.execute(
            "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s, %s)",
            (
                [r[0] for r in claimed],
                [r[1] for r in claimed],
                ["COMPLETED"] * len(claimed),
                [None] * len(claimed),
            ),
        )
        finished += len(claimed)


def table_stats(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    time.sleep(1.5)  # backends flush their table counters at most once a second
    dead, size = conn.execute(TABLE_STATS, (table,)).fetchone() or (0, 0)
    return {"dead_tuples": int(dead), "total_bytes": int(size)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="completed tasks to prune")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "retention_prune.json")
    args = parser.parse_args(argv)
    server = measure.start_server()
    try:
        dsn = measure.pgsched_database(server, "bench")
        with psycopg.connect(dsn, autocommit=True) as conn:
            complete_tasks(conn, args.tasks)
            conn.execute(
                "CREATE TABLE bench_events (LIKE pgsched.task_events)"
                " PARTITION BY RANGE (occurred_at)"
            )
            conn.execute(
                "CREATE TABLE bench_events_p PARTITION OF bench_events"
                " FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '1 day')"
            )
            conn.execute("INSERT INTO bench_events SELECT * FROM pgsched.task_events")
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
            events = int(measure.one(conn, "SELECT count(*) FROM pgsched.task_events"))
            before = {
                t: table_stats(conn, t) for t in ("pgsched.tasks_done", "pgsched.task_events")
            }
            probe = Probe(conn)
            cpu0, wal0 = probe.read()
            t0 = time.perf_counter()
            calls, pruned_tasks, pruned_events = 0, 0, 0
            while True:
                tasks, evs = conn.execute(PRUNE).fetchone() or (0, 0)
                calls += 1
                pruned_tasks += tasks
                pruned_events += evs
                if tasks == 0 and evs == 0:
                    break
            prune_s = time.perf_counter() - t0
            cpu1, wal1 = probe.read()
            after = {t: table_stats(conn, t) for t in ("pgsched.tasks_done", "pgsched.task_events")}
            conn.execute("CHECKPOINT")
            cpu2, wal2 = probe.read()
            t1 = time.perf_counter()
            conn.execute("DROP TABLE bench_events_p")
            drop_s = time.perf_counter() - t1
            cpu3, wal3 = probe.read()
            prune_wal = probe.wal_bytes(wal0, wal1)
            drop_wal = probe.wal_bytes(wal2, wal3)
    finally:
        server.stop()
    if pruned_tasks != args.tasks or pruned_events != events:
        raise RuntimeError(f"pruned {pruned_tasks} tasks / {pruned_events} events of {events}")
    prune: dict[str, Any] = {
        "seconds": round(prune_s, 2),
        "calls": calls,
        "cpu_s": round(cpu1 - cpu0, 2),
        "wal_bytes": prune_wal,
        "before": before,
        "after": after,
    }
    drop = {
        "seconds": round(drop_s, 4),
        "cpu_s": round(cpu3 - cpu2, 3),
        "wal_bytes": drop_wal,
    }
    print(f"\n{args.tasks:,} completed tasks, {events:,} events past retention")
    print(
        f"prune (delete): {prune['seconds']} s, {calls} calls, backend CPU {prune['cpu_s']} s,"
        f" WAL {prune['wal_bytes'] / 2**20:.1f} MiB"
    )
    for t in before:
        print(
            f"  {t}: {before[t]['total_bytes'] / 2**20:.1f} MiB before,"
            f" {after[t]['total_bytes'] / 2**20:.1f} MiB after,"
            f" {after[t]['dead_tuples']:,} dead tuples left for vacuum"
        )
    print(
        f"drop partition (the same events): {drop['seconds'] * 1e3:.1f} ms,"
        f" WAL {drop['wal_bytes'] / 1024:.1f} KiB"
    )
    measure.write_json(
        args.out,
        {
            "benchmark": "retention_prune",
            "command": " ".join(
                ["python -m benchmarks.bench_retention_prune", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "tasks": args.tasks,
            "events": events,
            "prune": prune,
            "drop_partition": drop,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
