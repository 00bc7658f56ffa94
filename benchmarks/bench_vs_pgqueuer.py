"""pgsched against PGQueuer's best configuration, one run, one server, same no-op work.

    python -m benchmarks.bench_vs_pgqueuer                      # 20,000 tasks per setting
    python -m benchmarks.bench_vs_pgqueuer --tasks 50000 --rounds 2
    python -m benchmarks.bench_vs_pgqueuer --pgqueuer asyncpg:2:1:100   # its best setting only

PGQueuer is tried with both of its drivers (psycopg, asyncpg), 1 and 2 worker processes,
1, 5 and 10 QueueManagers per process and dequeue batches of 10 and 100; pgsched with its
default flags and tuned ones (--batch-size 500 --concurrency 500), 1 and 2 processes. Each
drains the same number of no-op tasks due now, in its own database on one durable server;
rounds alternate the systems so both see the same load. Reported: tasks/s (first start to
last completion, from each system's own log), CPU per task of the workers and of Postgres,
and the ratio of pgsched's best to PGQueuer's best in the same run. CPU per task is counted
from the first claim to the last completion (the processes' start-up and their idle wait
after the last task left out); the whole run of the processes is shown beside it.

What each writes per task differs (benchmarks/peers.py): pgsched keeps the task row (moved
to the done tier) and two task_events rows; PGQueuer deletes the job and writes three
pgqueuer_log rows.

The server first writes and recycles about the WAL the run will write (at most 4 GB;
--fresh-wal skips it), so both systems write into reused segments, as on a server that has
run before, not into 16 MB segments made (zero-filled and synced) during their drains
(benchmarks/pgserver.py, PgServer.recycle_wal).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import measure, peers
from pgsched.worker.config import WorkerConfig

PGQ_SETTINGS = [
    {"driver": d, "processes": p, "managers": m, "batch_size": b}
    for d, p, m, b in itertools.product(("psycopg", "asyncpg"), (1, 2), (1, 5, 10), (10, 100))
]
TUNED = (500, 500)


def pgsched_settings() -> list[dict[str, Any]]:
    d = WorkerConfig()
    return [
        {"label": label, "processes": p, "batch_size": b, "concurrency": c}
        for p in (1, 2)
        for label, b, c in (("default", d.batch_size, d.concurrency), ("tuned", *TUNED))
    ]


def pgq_setting(text: str) -> dict[str, Any]:
    """`asyncpg:2:1:100` -> one of PGQ_SETTINGS."""
    parts = text.split(":")
    try:
        driver, procs, managers, batch = parts[0], *map(int, parts[1:])
        setting = {"driver": driver, "processes": procs, "managers": managers, "batch_size": batch}
    except ValueError:
        setting = None
    if setting not in PGQ_SETTINGS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of the settings (DRIVER:PROCS:MANAGERS:BATCH, driver psycopg"
            " or asyncpg, 1 or 2 processes, 1, 5 or 10 managers, batch 10 or 100)"
        )
    return setting


def cpu_note(r: dict[str, Any]) -> str:
    return (
        f"; CPU µs/task while working {r['cpu_us_per_task']},"
        f" whole run of the processes {r['cpu_us_per_task_whole_run']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_vs_pgqueuer", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per setting (20,000)")
    parser.add_argument("--rounds", type=int, default=1, help="times each setting runs (1)")
    parser.add_argument("--cap", type=float, default=120.0, help="give a setting up after (s)")
    parser.add_argument(
        "--pgqueuer",
        action="append",
        type=pgq_setting,
        metavar="DRIVER:PROCS:MANAGERS:BATCH",
        help="only these PGQueuer settings (repeatable; default: all 24)",
    )
    parser.add_argument(
        "--fresh-wal",
        action="store_true",
        help="do not recycle WAL first (measure.start_server): segments made during the run",
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "vs_pgqueuer.json")
    args = parser.parse_args(argv)
    pgq_settings = args.pgqueuer or PGQ_SETTINGS
    drained = args.tasks * args.rounds * (len(pgsched_settings()) + len(pgq_settings))
    recycled_mb = 0 if args.fresh_wal else measure.wal_to_recycle_mb(drained)
    server = measure.start_server(recycled_mb)
    pgq = peers.PgQueuer()
    runs: list[dict[str, Any]] = []
    try:
        dsn = measure.pgsched_database(server, "bench")
        pgq_dsn = measure.create_database(server, "peer_pgqueuer")
        pgq.setup(pgq_dsn)
        for round_no in range(1, args.rounds + 1):
            for s in pgsched_settings():
                measure.step(
                    f"round {round_no}: pgsched {s['label']}, {s['processes']} process(es),"
                    f" batch {s['batch_size']}, concurrency {s['concurrency']}"
                )
                r = measure.pgsched_drain(
                    dsn,
                    args.tasks,
                    processes=s["processes"],
                    batch_size=s["batch_size"],
                    concurrency=s["concurrency"],
                    cap_s=args.cap,
                    name="bench-vs",
                )
                r |= {"setting": f"pgsched {s['label']} x{s['processes']}", "round": round_no}
                measure.note(measure.drain_line(r) + cpu_note(r))
                runs.append(r)
            for s in pgq_settings:
                label = (
                    f"PGQueuer {s['driver']}, {s['processes']} proc x {s['managers']}"
                    f" QueueManager(s), batch {s['batch_size']}"
                )
                measure.step(f"round {round_no}: {label}")
                r = peers.peer_drain(
                    pgq, pgq_dsn, args.tasks, s | {"label": label}, args.cap, "bench-vs-pgq"
                )
                r["round"] = round_no
                measure.note(measure.drain_line(r) + cpu_note(r))
                runs.append(r)
    finally:
        server.stop()

    def best(system: str) -> dict[str, Any] | None:
        mine = [r for r in runs if r["system"] == system and r.get("tasks_per_s")]
        return max(mine, key=lambda r: r["tasks_per_s"], default=None)

    ours, theirs = best("pgsched"), best("PGQueuer")
    ratio = round(ours["tasks_per_s"] / theirs["tasks_per_s"], 2) if ours and theirs else None
    for name, chosen in (("pgsched", ours), ("PGQueuer", theirs)):
        if chosen:
            measure.note(
                f"best {name}: {chosen['tasks_per_s']:,} tasks/s ({chosen['setting']});"
                f" CPU µs/task {chosen['cpu_us_per_task']}"
            )
    measure.note(f"pgsched best / PGQueuer best: {ratio}")
    measure.write_json(
        args.out,
        {
            "benchmark": "vs_pgqueuer",
            "command": " ".join([f"python -m {__spec__.name}", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "tasks": args.tasks,
            "wal_recycled_mb": recycled_mb,
            "best": {"pgsched": ours, "PGQueuer": theirs, "ratio": ratio},
            "results": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
