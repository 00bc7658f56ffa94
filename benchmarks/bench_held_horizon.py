"""Claims while VACUUM's horizon is held back: a steady rate, then a snapshot held open.

Every claim leaves a dead row version in `pgsched.tasks_hot` (QUEUED -> PROCESSING is not
a HOT update, and the outcome moves the row out). While another session holds an old
snapshot, vacuum may not remove them, nor may a btree scan mark their entries dead: they
pile up where each claim's index ranges begin. On one server, with one worker process
(`pgsched worker`, default flags) on the NORMAL lane and a producer scheduling R tasks/s
due now:

    phase 1 (unheld)  M minutes as is
    phase 2 (held)    M minutes while another session sits idle in a REPEATABLE READ
                      transaction that has read a table (its snapshot holds the horizon)

Every interval (a minute unless --interval) one line: the claims' cost as the worker saw
it (the time from sending `task_claim_many` to having its rows, round trip included, from
the worker's DEBUG log line for each claim) p50 / p99, the lateness of the tasks scheduled
in that interval (`pgsched.task_runs.started_at - scheduled_for`, both by the database
clock) p50 / p99, and the dead tuples and index size of `tasks_hot`. Then each phase's
figures and the held phase's ratios to the unheld one, from the same run.

    python -m benchmarks.bench_held_horizon                    # 1,000 tasks/s, 2 + 2 minutes
    python -m benchmarks.bench_held_horizon --minutes 30       # the full run: 30 + 30
    python -m benchmarks.bench_held_horizon --minutes 10 --held-minutes 30   # 10 + 30

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from pgsched.worker.config import WorkerConfig

NAME = "bench-horizon"
TICK = 0.1
CLAIM_LINE = re.compile(r"claim on lane NORMAL: (\d+) of (\d+) rows in ([0-9.]+) ms")
SCHEDULE_SQL = (
    "SELECT min(task_id), max(task_id), count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[])"
)
HOT_STATS = (
    "SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0), autovacuum_count,"
    " pg_indexes_size('pgsched.tasks_hot')"
    " FROM pg_stat_all_tables WHERE relid = 'pgsched.tasks_hot'::regclass"
)


class Producer(threading.Thread):
    """`rate` tasks/s due now, in a batch every TICK seconds on a fixed cadence; remembers
    the id range scheduled, so each interval's tasks can be found again."""

    def __init__(self, dsn: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rate = rate
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.lo: int | None = None
        self.hi: int | None = None
        self.scheduled = 0
        self.behind = 0
        self.error: BaseException | None = None

    def take_range(self) -> tuple[int | None, int | None]:
        """The ids scheduled since the last call."""
        with self.lock:
            lo, hi = self.lo, self.hi
            self.lo = self.hi = None
        return lo, hi

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                started = time.monotonic()
                ticks = 0
                while not self.stop_event.is_set():
                    ticks += 1
                    due = int(self.rate * ticks * TICK) - int(self.rate * (ticks - 1) * TICK)
                    if due:
                        row = conn.execute(SCHEDULE_SQL, (["noop"] * due,)).fetchone()
                        assert row is not None and row[2] == due
                        with self.lock:
                            self.lo = row[0] if self.lo is None else self.lo
                            self.hi = row[1]
                            self.scheduled += due
                    wait = started + ticks * TICK - time.monotonic()
                    if wait > 0:
                        self.stop_event.wait(wait)
                    else:
                        self.behind += 1
        except BaseException as exc:  # reported by the main thread
            self.error = exc


class ClaimLog:
    """The worker's claim lines, read on from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[float]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        text = data[:end].decode(errors="replace")
        return [float(m.group(3)) for m in CLAIM_LINE.finditer(text)]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def interval_row(
    conn: psycopg.Connection[Any],
    phase: str,
    t: float,
    claims: list[float],
    ids: tuple[int | None, int | None],
) -> dict[str, Any]:
    lo, hi = ids
    late = measure.lateness_of_tasks(conn, lo, hi) if lo is not None and hi is not None else []
    dead, live, vacuums, index = conn.execute(HOT_STATS).fetchone() or (0, 0, 0, 0)
    xmin_age = measure.one(
        conn,
        "SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL",
    )
    return {
        "phase": phase,
        "t_s": round(t),
        "claims": len(claims),
        "claim_ms_p50": pct(claims, 0.5),
        "claim_ms_p99": pct(claims, 0.99),
        "tasks": (hi - lo + 1) if lo is not None and hi is not None else 0,
        "started": len(late),
        "late_ms_p50": pct(late, 0.5),
        "late_ms_p99": pct(late, 0.99),
        "dead": dead,
        "live": live,
        "autovacuums": vacuums,
        "index_mb": round(index / 2**20, 1),
        "xmin_age": xmin_age,
        "_claims": claims,
        "_late": late,
    }


COLUMNS = (
    "phase",
    "t_s",
    "claims",
    "claim_ms_p50",
    "claim_ms_p99",
    "started",
    "late_ms_p50",
    "late_ms_p99",
    "dead",
    "index_mb",
    "xmin_age",
)


def line(row: dict[str, Any]) -> str:
    return "".join(f"{'' if row.get(c) is None else row[c]!s:>13}" for c in COLUMNS)


def phase_summary(rows: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    mine = [r for r in rows if r["phase"] == phase]
    claims = [v for r in mine for v in r["_claims"]]
    late = [v for r in mine for v in r["_late"]]
    last = mine[-1] if mine else {}
    return {
        "phase": phase,
        "intervals": len(mine),
        "claims": len(claims),
        "claim_ms_p50": pct(claims, 0.5),
        "claim_ms_p99": pct(claims, 0.99),
        "last_claim_ms_p99": last.get("claim_ms_p99"),
        "tasks": sum(r["tasks"] for r in mine),
        "started": len(late),
        "late_ms_p50": pct(late, 0.5),
        "late_ms_p99": pct(late, 0.99),
        "last_late_ms_p99": last.get("late_ms_p99"),
        "dead_max": max((r["dead"] for r in mine), default=0),
        "index_mb_end": last.get("index_mb"),
    }


def run(
    dsn: str, rate: float, minutes: float, interval: float, warmup: float, held_minutes: float
) -> list[dict[str, Any]]:
    measure.clear_worked_tasks(dsn)
    defaults = WorkerConfig()
    workers = measure.pgsched_workers(
        dsn,
        NAME,
        1,
        defaults.batch_size,
        defaults.concurrency,
        extra=["--log-level", "DEBUG"],
    )
    workers.start()
    producer = Producer(dsn, rate)
    rows: list[dict[str, Any]] = []
    holder: psycopg.Connection[Any] | None = None
    try:
        workers.wait_listening(dsn)
        claim_log = ClaimLog(workers.logs[0])
        producer.start()
        time.sleep(warmup)
        claim_log.read()
        producer.take_range()
        print("".join(f"{c:>13}" for c in COLUMNS), flush=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for phase in ("unheld", "held"):
                if phase == "held":
                    holder = psycopg.connect(dsn, autocommit=True)
                    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    holder.execute("SELECT 1 FROM pgsched.settings")
                began = time.monotonic()
                t = 0.0
                length = 60 * (held_minutes if phase == "held" else minutes)
                while t < length - 1e-6:
                    t = min(t + interval, length)
                    while (left := began + t - time.monotonic()) > 0:
                        workers.check_alive()
                        if producer.error is not None:
                            raise RuntimeError(f"producer failed: {producer.error}")
                        time.sleep(min(left, 1.0))
                    ids = producer.take_range()
                    # The interval's last tasks were due just now: let them start.
                    time.sleep(0.5)
                    row = interval_row(conn, phase, t, claim_log.read(), ids)
                    print(line(row), flush=True)
                    rows.append(row)
                if holder is not None:
                    holder.close()
                    holder = None
    finally:
        producer.stop_event.set()
        producer.join(10)
        if holder is not None:
            holder.close()
        workers.stop(dsn=dsn)
        workers.cleanup()
    if producer.behind:
        measure.note(f"the producer fell behind its cadence {producer.behind} times")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_held_horizon", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="tasks/s due now (1000)")
    parser.add_argument("--minutes", type=float, default=2.0, help="minutes per phase (2)")
    parser.add_argument("--held-minutes", type=float, default=None, help="minutes held (--minutes)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per line (60)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds not counted (10)")
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "held_horizon.json")
    args = parser.parse_args(argv)
    held_minutes = args.minutes if args.held_minutes is None else args.held_minutes
    with measure.database(args.dsn) as dsn:
        measure.step(
            f"{args.rate:g} tasks/s due now; {args.minutes:g} min unheld, then"
            f" {held_minutes:g} min with a REPEATABLE READ snapshot held"
        )
        rows = run(dsn, args.rate, args.minutes, args.interval, args.warmup, held_minutes)
    summaries = [phase_summary(rows, p) for p in ("unheld", "held")]
    figures = ["claim_ms_p50", "claim_ms_p99", "late_ms_p50", "late_ms_p99", "dead_max"]
    print(f"\n{'':10}" + "".join(f"{f:>14}" for f in ["claims", "started", *figures]))
    for s in summaries:
        print(
            f"{s['phase']:10}" + "".join(f"{s[f]!s:>14}" for f in ["claims", "started", *figures])
        )
    unheld, held = summaries
    ratios = {
        f: round(held[f] / unheld[f], 2) if held[f] is not None and unheld[f] else None
        for f in figures
    }
    print(
        f"{'held/unheld':10}"
        + "".join(f"{'':>14}" * 2)
        + "".join(f"{ratios[f]!s:>14}" for f in figures)
    )
    measure.write_json(
        args.out,
        {
            "benchmark": "held_horizon",
            "command": " ".join(
                ["python -m benchmarks.bench_held_horizon", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "rate_per_s": args.rate,
            "minutes_per_phase": args.minutes,
            "held_minutes": held_minutes,
            "summaries": summaries,
            "ratios_held_to_unheld": ratios,
            "intervals": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
        },
    )
    return 0 if all(s["started"] >= 0.99 * s["tasks"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
