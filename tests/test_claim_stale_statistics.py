"""A claim's work follows the rows it claims, not the rows queued, even when tasks_hot's
statistics are stale.

The tier's statistics are taken while it is empty (as after a quiet night, or a
benchmark's reset), autovacuum is kept off it, and then 20,000 tasks come due, or 50,000
are scheduled ahead and a few come due. The claim
runs with auto_explain (analyze, in this session only) logging the plan of every
statement inside it; the rows its plan nodes produce and discard, all loops counted, must
stay within a small multiple of the rows claimed.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from query_plans import plan_nodes

QUEUED = 20_000
AHEAD = 50_000
CLAIMED = 300


def _claim_plans(conn: psycopg.Connection, call: str) -> tuple[int, list[dict[str, Any]]]:
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            notices.append(diag.message_primary)

    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET auto_explain.log_format = 'json'",
        "SET auto_explain.log_level = 'notice'",
        "SET client_min_messages = 'notice'",
    ):
        conn.execute(setting)
    conn.add_notice_handler(keep)
    try:
        row = conn.execute(call).fetchone()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert row is not None
    return int(row[0]), [json.loads(text.split("plan:", 1)[1]) for text in notices]


def _rows_handled(plan: dict[str, Any]) -> int:
    """Rows every node produced or filtered out, over all its loops."""
    total = 0
    for node in plan_nodes(plan["Plan"]):
        loops = int(node.get("Actual Loops", 1))
        produced = int(node.get("Actual Rows", 0))
        removed = int(node.get("Rows Removed by Filter", 0)) + int(
            node.get("Rows Removed by Join Filter", 0)
        )
        total += (produced + removed) * loops
    return total


def _worst_statement_of_claim(conn: psycopg.Connection) -> tuple[int, str]:
    """Claim CLAIMED rows; the most rows any statement inside the claim handled, and its text."""
    claimed, plans = _claim_plans(
        conn, f"SELECT count(*) FROM pgsched.task_claim_many('NORMAL', {CLAIMED}, 'w')"
    )
    assert claimed == CLAIMED
    handled = {" ".join(str(p.get("Query Text", "")).split())[:80]: _rows_handled(p) for p in plans}
    # The call itself (the outer SELECT) is left out: its one node counts the rows returned.
    inside = {text: n for text, n in handled.items() if "task_claim_many(" not in text}
    assert inside, "auto_explain logged no statement inside the claim"
    text, rows = max(inside.items(), key=lambda item: item[1])
    return rows, text


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain-order"])
def test_claim_with_stale_statistics_handles_rows_in_proportion_to_the_claim(
    conn: psycopg.Connection, fair: bool
) -> None:
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (fair,))
    conn.execute("ALTER TABLE pgsched.tasks_hot SET (autovacuum_enabled = false)")
    conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%s]))",
        (QUEUED,),
    )
    rows, statement = _worst_statement_of_claim(conn)
    assert rows <= 20 * CLAIMED, f"{rows:,} rows handled by: {statement}"


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain-order"])
def test_claim_with_stale_statistics_reads_in_index_order_past_work_scheduled_ahead(
    conn: psycopg.Connection, fair: bool
) -> None:
    # Most of the tier is due later (scheduled ahead): with statistics from the empty tier
    # the planner believed the lane held a row or so and read every one of them through
    # the claim index, then sorted them to find each tenant's head (30 ms a claim at
    # 50,000 queued, seen at 10,000 tasks/s offered).
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (fair,))
    conn.execute("ALTER TABLE pgsched.tasks_hot SET (autovacuum_enabled = false)")
    conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%s]),"
        " run_ats => (SELECT array_agg(now() + interval '100 seconds' + i * interval '1 ms')"
        "             FROM generate_series(1, %s) AS i))",
        (AHEAD, AHEAD),
    )
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%s]))",
        (CLAIMED,),
    )
    rows, statement = _worst_statement_of_claim(conn)
    assert rows <= 20 * CLAIMED, f"{rows:,} rows handled by: {statement}"
