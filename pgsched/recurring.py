"""Recurring schedules: which occurrence to arm next, and arming it.

The next occurrence is armed when the current one has finished (by the worker right after
the completion is written, or by the recurring sweep within a minute if that worker died),
so the schedule advances only when the work finished and one schedule never runs two
occurrences at once. Arming is a compare-and-set in `pgsched.schedule_arm`, and each
(schedule, fire time) has one row in `pgsched.schedule_occurrences`: several schedulers can
race, crash and restart without ever creating an occurrence twice.

Misfires (fire times that passed while nothing ran, older than `MISFIRE_GRACE`), per schedule:

    run_once  (default) one run now stands for all that were missed; the rest are recorded
    skip      every missed fire time is recorded; the next future one is armed
    catch_up  each missed fire time runs, oldest first, at most `catch_up_limit` of them
              (older ones beyond the cap are recorded as missed)
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row

from pgsched.cron import CronError, parse
from pgsched.queries import query

log = logging.getLogger("pgsched.recurring")

MISFIRE_GRACE = timedelta(seconds=60)
MAX_MISSED_RECORDED = 10_000


@dataclass(frozen=True)
class ScheduleRow:
    id: int
    cron_expression: str
    timezone: str
    misfire_policy: str
    catch_up_limit: int
    last_fire_at: datetime | None
    armed_task_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class ArmPlan:
    fire_at: datetime
    missed: list[datetime]


def plan_next(schedule: ScheduleRow, now: datetime) -> ArmPlan:
    """The occurrence to arm next and the fire times to record as missed. Raises CronError
    when the row's expression or zone is unusable (the caller quarantines it)."""
    cron = parse(schedule.cron_expression, schedule.timezone)
    after = schedule.last_fire_at or schedule.created_at
    cutoff = now - MISFIRE_GRACE
    missed: list[datetime] = []
    upcoming: datetime | None = None
    for fire in cron.fires_after(after):
        if fire >= cutoff:
            upcoming = fire
            break
        missed.append(fire)
        if len(missed) > MAX_MISSED_RECORDED:
            missed.pop(0)  # a very long outage: keep the newest ones
    if upcoming is None and not missed:
        raise CronError(f"cron expression {schedule.cron_expression!r} never fires again")
    if not missed:
        assert upcoming is not None
        return ArmPlan(upcoming, [])
    policy = schedule.misfire_policy
    if policy == "skip":
        future = upcoming if upcoming is not None else cron.next_fire(now)
        return ArmPlan(future, missed)
    if policy == "catch_up":
        keep = missed[-schedule.catch_up_limit :]
        return ArmPlan(keep[0], missed[: len(missed) - len(keep)])
    # run_once: the newest missed fire time runs now and stands for the others.
    return ArmPlan(missed[-1], missed[:-1])


def database_now(conn: psycopg.Connection[Any]) -> datetime:
    """The database's clock: misfires are judged by it, never by this host's."""
    row = conn.execute(query("database_now")).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def is_row_fault(exc: Exception) -> bool:
    """True when arming failed because of what the schedule row holds (so quarantining it
    is right), False for faults of the connection, the server or the schema, which would
    otherwise take every schedule out of service at once."""
    if isinstance(exc, psycopg.Error):
        # 22: data exception (22023 from the SQL API's checks), 23: integrity constraint,
        # P0: a RAISE in a pgsched function.
        return exc.sqlstate is not None and exc.sqlstate[:2] in ("22", "23", "P0")
    # Planning is a pure function of the row and `now`: whatever it raises is the row's.
    return True


def quarantine(conn: psycopg.Connection[Any], schedule_id: int, reason: str, now: datetime) -> None:
    log.error(
        "schedule %s quarantined: %s",
        schedule_id,
        reason,
        extra={"schedule_id": schedule_id, "event": "schedule_quarantined", "error": reason},
    )
    conn.execute(
        query("schedule_quarantine"), {"schedule_id": schedule_id, "reason": reason, "now": now}
    )


def arm(
    conn: psycopg.Connection[Any], schedule: ScheduleRow, now: datetime | None = None
) -> int | None:
    """Arm the schedule's next occurrence; returns the task id, or None when another
    scheduler got there first. A schedule whose row cannot be armed (its expression, its
    zone, or a value the database refuses) is quarantined with the reason; any other fault
    is raised. `now` defaults to the database's clock."""
    now = now or database_now(conn)
    try:
        plan = plan_next(schedule, now)
        # A savepoint when the caller holds a transaction: a refused row leaves it usable.
        idle = conn.info.transaction_status == TransactionStatus.IDLE
        with contextlib.nullcontext() if idle else conn.transaction():
            row = conn.execute(
                query("schedule_arm"),
                {
                    "schedule_id": schedule.id,
                    "expected_task_id": schedule.armed_task_id,
                    "fire_at": plan.fire_at,
                    "missed": plan.missed,
                    "now": now,
                },
            ).fetchone()
    except Exception as exc:
        if not is_row_fault(exc):
            raise
        quarantine(conn, schedule.id, quarantine_reason(exc), now)
        return None
    return int(row[0]) if row and row[0] is not None else None


def quarantine_reason(exc: Exception) -> str:
    if isinstance(exc, CronError):
        return str(exc)
    if isinstance(exc, psycopg.Error):
        message = exc.diag.message_primary or str(exc)
        return f"arming refused by the database ({exc.sqlstate}): {message}"
    return f"cannot compute the next fire time: {type(exc).__name__}: {exc}"


def arm_after_task(conn: psycopg.Connection[Any], task_id: int) -> int | None:
    """Arm the next occurrence of the schedule whose current occurrence was `task_id`."""
    with conn.cursor(row_factory=class_row(ScheduleRow)) as cur:
        schedule = cur.execute(query("schedule_for_task"), {"task_id": task_id}).fetchone()
    if schedule is None:
        return None
    return arm(conn, schedule)
