"""What each audit writer costs Postgres per task: the transition trigger or the functions.

Who writes task_events is `settings.audit_writer` (sql/code/transitions.sql): the statement
triggers on pgsched.tasks (`trigger`, the default) or the state-changing functions in the
statement that makes each change (`functions`, the distributed mode's way). On one server,
for each variant in turn, round after round (the machine drifts; ratios are within a run):

    trigger     the default: the transition trigger and the settling trigger
    functions   no trigger on updates; claim and finish write their own events
    no-events   functions mode with the event writes switched off: no audit at all, the
                floor the two writers are measured against (never a shipped mode)

a backlog of N no-op tasks due now is loaded, then one connection claims 500
(`task_claim_many`) and completes them (`task_finish_many`) until the lane is empty; the
Postgres CPU of that backend (utime + stime) is divided by the tasks. Per variant: the
median and range over the rounds, and the ratio of medians to `trigger`.

    python -m benchmarks.bench_audit_writer                 # N 100,000, 5 rounds
    python -m benchmarks.bench_audit_writer --tasks 20000 --rounds 1
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
VARIANTS = ("trigger", "functions", "no-events")
CLAIM = "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '1 hour')"
FINISH = "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s)"
# The floor only: the constant the functions' event writes are guarded by, made false
# while the triggers stay dropped. audit_writer_set remakes it.
NO_EVENTS = (
    "CREATE OR REPLACE FUNCTION pgsched.events_by_functions() RETURNS boolean"
    " LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT false'"
)


def set_variant(conn: psycopg.Connection[Any], variant: str) -> None:
    conn.execute(
        "SELECT pgsched.audit_writer_set(%s)", ("trigger" if variant == "trigger" else "functions",)
    )
    if variant == "no-events":
        conn.execute(NO_EVENTS)


def run_round(dsn: str, variant: str, tasks: int) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        set_variant(conn, variant)
    measure.schedule_due_now(dsn, tasks)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
    # A new connection: nothing planned under another variant.
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = int(measure.one(conn, "SELECT pg_backend_pid()"))
        done = 0
        cpu0, wall0 = measure.cpu_seconds(pid), time.perf_counter()
        while claimed := conn.execute(CLAIM, (BATCH,)).fetchall():
            ids = [r[0] for r in claimed]
            conn.execute(FINISH, (ids, [r[1] for r in claimed], ["COMPLETED"] * len(ids)))
            done += len(ids)
        cpu, wall = measure.cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
        events = int(measure.one(conn, "SELECT count(*) FROM pgsched.task_events"))
    if done != tasks:
        raise RuntimeError(f"{variant}: drained {done} of {tasks}")
    expected = 0 if variant == "no-events" else 2 * tasks
    if events != expected:
        raise RuntimeError(f"{variant}: {events} events for {tasks} tasks, expected {expected}")
    return {
        "variant": variant,
        "tasks": done,
        "events": events,
        "pg_cpu_us_per_task": round(cpu / done * 1e6, 1),
        "wall_us_per_task": round(wall / done * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks drained a round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant")
    parser.add_argument(
        "--dsn", default=None, help="a database to use (default: a throwaway server)"
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "audit_writer.json")
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    with measure.database(args.dsn) as dsn:
        try:
            for number in range(args.rounds):
                for variant in VARIANTS:
                    row = {"round": number, **run_round(dsn, variant, args.tasks)}
                    measure.step(str(row))
                    rounds.append(row)
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pgsched.audit_writer_set('trigger')")
    summary: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        values = [r["pg_cpu_us_per_task"] for r in rounds if r["variant"] == variant]
        summary[variant] = {
            "median": round(statistics.median(values), 1),
            "min": min(values),
            "max": max(values),
        }
    base = summary["trigger"]["median"]
    print(f"\n{args.tasks:,} tasks a round, {args.rounds} rounds, claims and finishes of {BATCH}")
    print(f"{'Postgres CPU per task':22}{'median':>10}{'min':>10}{'max':>10}{'/ trigger':>12}")
    for variant, s in summary.items():
        ratio = round(s["median"] / base, 2)
        s["ratio_to_trigger"] = ratio
        print(f"{variant:22}{s['median']:>10}{s['min']:>10}{s['max']:>10}{ratio:>12}")
    measure.write_json(
        args.out,
        {
            "benchmark": "audit_writer",
            "command": " ".join(
                ["python -m benchmarks.bench_audit_writer", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "tasks": args.tasks,
            "batch": BATCH,
            "rounds": rounds,
            "summary": summary,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
