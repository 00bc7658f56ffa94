"""What the task-search indexes cost writes: with and without them, in one server.

The indexes are those of the migration named task_search_indexes (on the cold and done
tiers). Each round empties the tables, drops or builds those indexes, then from one
connection (its backend's CPU read from /proc, the WAL position before and after):

- schedules N future tasks through `pgsched.schedule_tasks` (8 types, 100 tenants, due
  from two days ahead: inserts into the cold tier), 10,000 per call;
- schedules N tasks due now (hot tier, not timed), then claims and finishes them
  (`task_claim_many` / `task_finish_many`, 500 a batch: the hot-to-done move).

Rounds alternate without / with; the figures are the medians per variant. CPU time of one
backend is steadier than a rate on a shared machine; WAL bytes are exact.

    python -m benchmarks.bench_search_index_cost --rounds 5 --tasks 50000
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from pgsched.sql_files import migrations

MIGRATION = "task_search_indexes"
CHUNK = 10_000
BATCH = 500

FUTURE = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    " task_types => ARRAY(SELECT 'type' || (g %% 8) FROM generate_series(1, %(n)s) g),"
    " tenant_ids => ARRAY(SELECT 't' || (g %% 100) FROM generate_series(1, %(n)s) g),"
    " run_ats => ARRAY(SELECT now() + interval '2 days' + g * interval '1 s'"
    "                  FROM generate_series(1, %(n)s) g))"
)
DUE_NOW = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    " task_types => ARRAY(SELECT 'type' || (g %% 8) FROM generate_series(1, %(n)s) g),"
    " tenant_ids => ARRAY(SELECT 't' || (g %% 100) FROM generate_series(1, %(n)s) g),"
    " run_ats => array_fill(now() - interval '1 minute', ARRAY[%(n)s]))"
)


def search_indexes() -> list[tuple[str, str]]:
    """(name, CREATE INDEX statement) of each index the migration builds."""
    found = [m for m in migrations() if m.name == MIGRATION]
    if not found:
        raise SystemExit(f"no migration named {MIGRATION} in sql/")
    statements = [s.strip() for s in found[0].sql.split(";")]
    creates = [
        "CREATE INDEX" + s.split("CREATE INDEX", 1)[1] for s in statements if "CREATE INDEX" in s
    ]
    names = [re.search(r"CREATE INDEX (\S+)", c) for c in creates]
    return [(m.group(1), c) for m, c in zip(names, creates, strict=True) if m]


class Probe:
    """One connection's backend CPU seconds and WAL position."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.pid = int(measure.one(conn, "SELECT pg_backend_pid()"))

    def read(self) -> tuple[float, str]:
        return measure.cpu_seconds(self.pid), str(
            measure.one(self.conn, "SELECT pg_current_wal_lsn()")
        )

    def wal_bytes(self, start: str, end: str) -> int:
        return int(
            measure.one(self.conn, "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start))
        )


def one_round(
    conn: psycopg.Connection[Any], indexes: list[tuple[str, str]], on: bool, n: int
) -> dict[str, Any]:
    conn.execute("TRUNCATE pgsched.tasks, pgsched.task_events, pgsched.idempotency_keys")
    for name, create in indexes:
        conn.execute(f"DROP INDEX IF EXISTS pgsched.{name}")
        if on:
            conn.execute(create)
    conn.execute("CHECKPOINT")
    probe = Probe(conn)
    cpu0, wal0 = probe.read()
    for lo in range(0, n, CHUNK):
        conn.execute(FUTURE, {"n": min(CHUNK, n - lo)})
    cpu1, wal1 = probe.read()
    conn.execute(DUE_NOW, {"n": n})
    conn.execute("ANALYZE pgsched.tasks_hot")
    cpu2, wal2 = probe.read()
    finished = 0
    while finished < n:
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '1 hour')",
            (BATCH,),
        ).fetchall()
        if not claimed:
            break
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
    cpu3, wal3 = probe.read()
    if finished != n:
        raise RuntimeError(f"claimed and finished {finished} of {n} tasks")
    return {
        "indexes": on,
        "schedule_future_cpu_us": round((cpu1 - cpu0) / n * 1e6, 2),
        "schedule_future_wal_bytes": round(probe.wal_bytes(wal0, wal1) / n),
        "claim_finish_cpu_us": round((cpu3 - cpu2) / n * 1e6, 2),
        "claim_finish_wal_bytes": round(probe.wal_bytes(wal2, wal3) / n),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per variant")
    parser.add_argument("--tasks", type=int, default=50_000, help="tasks per step")
    parser.add_argument(
        "--out", type=Path, default=measure.RESULTS / "search_index_cost.json", help="JSON file"
    )
    args = parser.parse_args(argv)
    indexes = search_indexes()
    rounds: list[dict[str, Any]] = []
    server = measure.start_server()
    try:
        dsn = measure.pgsched_database(server, "bench")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for k in range(args.rounds):
                for on in (False, True):
                    row = one_round(conn, indexes, on, args.tasks)
                    measure.step(f"round {k + 1}/{args.rounds}: {row}")
                    rounds.append(row)
    finally:
        server.stop()
    figures = [key for key in rounds[0] if key != "indexes"]
    medians = {
        variant: {f: statistics.median(r[f] for r in rounds if r["indexes"] == on) for f in figures}
        for variant, on in (("without", False), ("with", True))
    }
    print(f"\n{args.tasks:,} tasks a step, {args.rounds} rounds; medians (one backend)")
    print(f"{'':28} {'without':>10} {'with':>10} {'ratio':>7}")
    for f in figures:
        a, b = medians["without"][f], medians["with"][f]
        print(f"{f:28} {a:10} {b:10} {b / a if a else float('nan'):7.2f}")
    measure.write_json(
        args.out,
        {
            "benchmark": "search_index_cost",
            "command": " ".join(
                ["python -m benchmarks.bench_search_index_cost", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "indexes": [name for name, _ in indexes],
            "tasks_per_step": args.tasks,
            "rounds": rounds,
            "medians": medians,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
