"""What the hot partition's autovacuum settings buy: claim latency under dead tuples.

Every claim rewrites a hot row (QUEUED -> PROCESSING) and every outcome moves it out
(PROCESSING -> done tier), so each task leaves dead tuples in `pgsched.tasks_hot`, and
their index entries sit at the head of the claim index where the next claim starts its
SKIP LOCKED scan. On one server, for each variant of the partition's reloptions:

    off       autovacuum_enabled = false (what a held-back vacuum looks like)
    default   Postgres's built-in table defaults (all reloptions reset)
    shipped   the reloptions the migrations set (read from the catalog after migrating)

a backlog of B tasks due now is loaded, then one connection loops for D seconds: schedule
500 tasks due now, claim 500 (`task_claim_many`, timed), finish them (`task_finish_many`).
The backlog stays at B; every few seconds the partition's dead and live tuples, its size
and autovacuum count are sampled. Per variant: claim latency p50 / p99, tasks/s, dead
tuples mean / max; ratios against `shipped` in the same run.

    python -m benchmarks.bench_hot_vacuum                          # B 200,000, D 180 s
    python -m benchmarks.bench_hot_vacuum --backlog 50000 --seconds 60

The server is the throwaway one of benchmarks/pgserver.py with Postgres's autovacuum
defaults (naptime 1 min: a database is visited at most once a minute, whatever the
table's thresholds); `--naptime` changes that server setting for the run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure

BATCH = 500
SAMPLE_EVERY = 2.0

HOT_STATS = (
    "SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0), autovacuum_count,"
    " pg_relation_size('pgsched.tasks_hot'), pg_indexes_size('pgsched.tasks_hot')"
    " FROM pg_stat_all_tables WHERE relid = 'pgsched.tasks_hot'::regclass"
)
CLAIM = "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '1 hour')"
FINISH = "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s, %s)"


def shipped_reloptions(conn: psycopg.Connection[Any]) -> list[str]:
    options = measure.one(
        conn, "SELECT reloptions FROM pg_class WHERE oid = 'pgsched.tasks_hot'::regclass"
    )
    if not options:
        raise SystemExit("the migrations set no reloptions on pgsched.tasks_hot")
    return list(options)


def apply_variant(conn: psycopg.Connection[Any], variant: str, shipped: list[str]) -> None:
    names = sorted({o.split("=", 1)[0] for o in shipped} | {"autovacuum_enabled"})
    conn.execute(f"ALTER TABLE pgsched.tasks_hot RESET ({', '.join(names)})")
    if variant == "off":
        conn.execute("ALTER TABLE pgsched.tasks_hot SET (autovacuum_enabled = false)")
    elif variant == "shipped":
        conn.execute(f"ALTER TABLE pgsched.tasks_hot SET ({', '.join(shipped)})")


def run_variant(
    dsn: str, variant: str, shipped: list[str], backlog: int, seconds: float
) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_variant(conn, variant, shipped)
        measure.schedule_due_now(dsn, backlog)
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
        conn.execute("SELECT pg_stat_reset_single_table_counters('pgsched.tasks_hot'::regclass)")
        claim_ms: list[float] = []
        samples: list[dict[str, Any]] = []
        window: list[float] = []
        done = 0
        started = time.monotonic()
        next_sample = started
        while (now := time.monotonic()) - started < seconds:
            if now >= next_sample:
                dead, live, vacuums, heap, index = conn.execute(HOT_STATS).fetchone() or (
                    0,
                    0,
                    0,
                    0,
                    0,
                )
                samples.append(
                    {
                        "t": round(now - started, 1),
                        "dead": dead,
                        "live": live,
                        "autovacuums": vacuums,
                        "heap_mb": round(heap / 2**20, 1),
                        "index_mb": round(index / 2**20, 1),
                        "claim_ms_p50": round(statistics.median(window), 2) if window else None,
                    }
                )
                window = []
                next_sample += SAMPLE_EVERY
            measure.one(conn, measure.SCHEDULE_NOW_SQL, (["noop"] * BATCH, None))
            t0 = time.perf_counter()
            claimed = conn.execute(CLAIM, (BATCH,)).fetchall()
            ms = (time.perf_counter() - t0) * 1e3
            claim_ms.append(ms)
            window.append(ms)
            if len(claimed) != BATCH:
                raise RuntimeError(f"claimed {len(claimed)} of {BATCH} with a backlog of {backlog}")
            conn.execute(
                FINISH,
                (
                    [r[0] for r in claimed],
                    [r[1] for r in claimed],
                    ["COMPLETED"] * BATCH,
                    [None] * BATCH,
                ),
            )
            done += BATCH
        ran = time.monotonic() - started
    dead_values = [s["dead"] for s in samples]
    ms_sorted = sorted(claim_ms)
    return {
        "variant": variant,
        "seconds": round(ran, 1),
        "tasks_per_s": round(done / ran),
        "claims": len(claim_ms),
        "claim_ms_p50": round(statistics.median(claim_ms), 2),
        "claim_ms_p99": round(ms_sorted[int(0.99 * (len(ms_sorted) - 1))], 2),
        "claim_ms_max": round(ms_sorted[-1], 2),
        "dead_mean": round(statistics.mean(dead_values)),
        "dead_max": max(dead_values),
        "autovacuums": samples[-1]["autovacuums"],
        "heap_mb_end": samples[-1]["heap_mb"],
        "index_mb_end": samples[-1]["index_mb"],
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200_000, help="tasks due, kept steady")
    parser.add_argument("--seconds", type=float, default=180.0, help="loop time per variant")
    parser.add_argument("--naptime", default=None, help="autovacuum_naptime (default 1min)")
    parser.add_argument(
        "--variants", nargs="+", default=["off", "default", "shipped"], help="off default shipped"
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "hot_vacuum.json")
    args = parser.parse_args(argv)
    server = measure.start_server()
    results: list[dict[str, Any]] = []
    try:
        dsn = measure.pgsched_database(server, "bench")
        with psycopg.connect(dsn, autocommit=True) as conn:
            shipped = shipped_reloptions(conn)
            if args.naptime:
                conn.execute("ALTER SYSTEM SET autovacuum_naptime = %s", (args.naptime,))
                conn.execute("SELECT pg_reload_conf()")
            naptime = str(measure.one(conn, "SHOW autovacuum_naptime"))
        measure.step(f"shipped reloptions: {', '.join(shipped)}; autovacuum_naptime {naptime}")
        for variant in args.variants:
            row = run_variant(dsn, variant, shipped, args.backlog, args.seconds)
            summary = {k: v for k, v in row.items() if k != "samples"}
            measure.step(f"{variant}: {summary}")
            results.append(row)
    finally:
        server.stop()
    figures = ["tasks_per_s", "claim_ms_p50", "claim_ms_p99", "dead_mean", "dead_max"]
    base = next((r for r in results if r["variant"] == "shipped"), None)
    print(f"\nbacklog {args.backlog:,}, {args.seconds:.0f} s a variant, naptime {naptime}")
    print(f"{'':10}" + "".join(f"{f:>14}" for f in [*figures, "autovacuums"]))
    for r in results:
        print(f"{r['variant']:10}" + "".join(f"{r[f]:>14}" for f in [*figures, "autovacuums"]))
    ratios: dict[str, dict[str, float]] = {}
    if base:
        print("ratio to shipped:")
        for r in results:
            ratios[r["variant"]] = {
                f: round(r[f] / base[f], 2) if base[f] else float("nan") for f in figures
            }
            print(f"{r['variant']:10}" + "".join(f"{ratios[r['variant']][f]:>14}" for f in figures))
    measure.write_json(
        args.out,
        {
            "benchmark": "hot_vacuum",
            "command": " ".join(["python -m benchmarks.bench_hot_vacuum", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "shipped_reloptions": shipped,
            "autovacuum_naptime": naptime,
            "backlog": args.backlog,
            "batch": BATCH,
            "results": results,
            "ratios_to_shipped": ratios,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
