"""Tiers whose planner statistics are stale: taken while the tier was empty (a quiet night,
a benchmark's reset), autovacuum kept off it, then a burst of tasks arrives before any
ANALYZE sees them. The planner then believes a tier of thousands holds a row or so; a
statement whose work follows the rows it handles only when the planner knows better shows
it here (count its rows with query_plans.logged_plans and rows_handled)."""

from __future__ import annotations

import psycopg

# What the planner of a tier analyzed empty is shown in these tests.
DUE = 20_000  # due now, in one lane
AHEAD = 50_000  # scheduled a little ahead (the hot tier) or far ahead (the cold tier)


def analyze_empty(conn: psycopg.Connection, *tables: str) -> None:
    """Statistics of each table (empty now) taken, and kept: autovacuum off on it."""
    for table in tables:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        conn.execute(f"VACUUM ANALYZE {table}")


def schedule(conn: psycopg.Connection, count: int, ahead: str | None = None) -> list[int]:
    """Schedule `count` tasks in the NORMAL lane, due now or `ahead` (an interval, 1 ms
    apart from there); their ids in order."""
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%(n)s]),"
        " run_ats => CASE WHEN %(ahead)s::interval IS NOT NULL THEN ("
        "   SELECT array_agg(now() + %(ahead)s::interval + i * interval '1 ms')"
        "     FROM generate_series(1, %(n)s) AS i) END)"
        " ORDER BY ordinal",
        {"n": count, "ahead": ahead},
    ).fetchall()
    return [row[0] for row in rows]


def stale_hot_tier(conn: psycopg.Connection, scenario: str, due: int) -> list[int]:
    """tasks_hot analyzed empty, then the burst of `scenario`: "due" (DUE tasks due now, the
    first `due` of them returned) or "ahead" (AHEAD tasks 100 s ahead, then `due` due now,
    returned)."""
    analyze_empty(conn, "pgsched.tasks_hot")
    if scenario == "due":
        return schedule(conn, max(DUE, due))[:due]
    assert scenario == "ahead", scenario
    schedule(conn, AHEAD, "100 seconds")
    return schedule(conn, due)
