"""The recurring sweep with many every-minute schedules: what arming costs, and where.

    python -m benchmarks.bench_recurring_sweep                  # 300 schedules a zone
    python -m benchmarks.bench_recurring_sweep --schedules 100  # quicker
    python -m benchmarks.bench_recurring_sweep --dsn postgresql://...   # a scratch database

For each zone in turn (UTC, then Europe/Berlin, a zone with DST): make `--schedules`
schedules firing every minute, complete each one's armed occurrence (claimed and finished
as a worker would, without arming the next), then run the recurring sweep once: it finds
every schedule unarmed and arms each. Printed and written to JSON: the sweep's time, per
schedule, and the part of it spent planning the next fire time in Python
(`pgsched.recurring.plan_next`, timed alone over the same schedules, as cold as the sweep).
The rest is the database's: one `pgsched.schedule_arm` statement, and its commit, per
schedule (the sweep's time less the planning's, two timings apart: noisy, even below 0).
The two zones run in one process against one database, so their ratio is this run's own.

Unless --dsn is given it starts its own throwaway, durable Postgres and removes it after.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from benchmarks import measure

ZONES = ("UTC", "Europe/Berlin")
TASK_TYPE = "bench_tick"

COMPLETE_ARMED_SQL = """
WITH claimed AS (
    SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %(n)s, 'bench', '30 s')
)
SELECT count(*) FROM pgsched.task_finish_many(
    (SELECT array_agg(id) FROM claimed), (SELECT array_agg(lease_token) FROM claimed),
    (SELECT array_agg('COMPLETED'::text) FROM claimed), NULL::text[], NULL::interval[])
"""


def complete_armed(conn: psycopg.Connection[Any], n: int) -> int:
    """Make every armed occurrence due, then claim and complete them (without arming)."""
    conn.execute(
        "UPDATE pgsched.tasks SET next_run_at = now() - interval '1 s'"
        " WHERE task_type = %s AND status IN ('PENDING', 'QUEUED')",
        (TASK_TYPE,),
    )
    conn.execute("SELECT pgsched.task_promote_due(%s, now(), interval '1 hour')", (n,))
    return int(measure.one(conn, COMPLETE_ARMED_SQL, {"n": n}))


def forget_fire_times() -> None:
    """Empty the days' fire times kept between arms (where this pgsched keeps them)."""
    from pgsched.cron import CronSchedule

    cache_clear = getattr(CronSchedule._fires_on, "cache_clear", None)
    if cache_clear is not None:
        cache_clear()


def one_zone(conn: psycopg.Connection[Any], zone: str, n: int) -> dict[str, Any]:
    from pgsched import App
    from pgsched.recurring import ScheduleRow, database_now, plan_next
    from pgsched.sweeps import RecurringSweep

    app = App(conn.info.dsn)
    ids = [
        app.schedule_recurring(
            TASK_TYPE, "* * * * *", timezone=zone, idempotency_key=f"{zone}-{i}", conn=conn
        )
        for i in range(n)
    ]
    completed = complete_armed(conn, n)
    with conn.cursor(row_factory=class_row(ScheduleRow)) as cur:
        unarmed = cur.execute(
            "SELECT id, cron_expression, timezone, misfire_policy::text AS misfire_policy,"
            " catch_up_limit, last_fire_at, armed_task_id, created_at"
            " FROM pgsched.schedules_unarmed(%s)",
            (n + 1,),
        ).fetchall()
    now = database_now(conn)
    forget_fire_times()
    started = time.perf_counter()
    for schedule in unarmed:
        plan_next(schedule, now)
    planning_s = time.perf_counter() - started
    forget_fire_times()  # the sweep starts as cold as the planning did
    started = time.perf_counter()
    counts = RecurringSweep(batch=max(n, 1)).run_once(conn, database_now(conn))
    sweep_s = time.perf_counter() - started
    for schedule_id in ids:  # out of the next zone's way
        conn.execute("SELECT pgsched.schedule_delete(%s)", (schedule_id,))
    return {
        "zone": zone,
        "schedules": n,
        "completed": completed,
        "unarmed": len(unarmed),
        "counts": counts,
        "sweep_s": round(sweep_s, 3),
        "sweep_ms_per_schedule": round(sweep_s * 1000 / max(len(unarmed), 1), 2),
        "planning_s": round(planning_s, 3),
        "planning_ms_per_schedule": round(planning_s * 1000 / max(len(unarmed), 1), 3),
        "database_ms_per_schedule": round((sweep_s - planning_s) * 1000 / max(len(unarmed), 1), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_recurring_sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--schedules", type=int, default=300, help="per zone (300)")
    parser.add_argument("--dsn", default=None, help="use this (scratch!) database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "recurring_sweep.json")
    args = parser.parse_args(argv)
    load_before = measure.loadavg()
    zones = []
    with measure.database(args.dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for zone in ZONES:
            measure.step(f"{args.schedules} every-minute schedules in {zone}")
            z = one_zone(conn, zone, args.schedules)
            measure.note(
                f"{zone}: sweep {z['sweep_s']} s for {z['unarmed']} unarmed"
                f" ({z['sweep_ms_per_schedule']} ms each: planning"
                f" {z['planning_ms_per_schedule']} ms, database {z['database_ms_per_schedule']}"
                f" ms), armed {z['counts'].get('armed')}"
            )
            zones.append(z)
    by_zone = {z["zone"]: z for z in zones}
    ratio = by_zone[ZONES[1]]["sweep_s"] / max(by_zone[ZONES[0]]["sweep_s"], 1e-9)
    measure.note(f"sweep time {ZONES[1]} / {ZONES[0]}: x{ratio:.2f}")
    result = {
        "benchmark": "recurring_sweep",
        "command": " ".join(
            ["python -m benchmarks.bench_recurring_sweep", *(argv or sys.argv[1:])]
        ),
        "zones": zones,
        "sweep_ratio_dst_zone_to_utc": round(ratio, 2),
        "loadavg_before": load_before,
        "loadavg_after": measure.loadavg(),
        "machine": measure.machine_info(),
    }
    measure.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
