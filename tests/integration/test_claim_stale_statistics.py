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

import psycopg
import pytest

from tests.support.query_plans import heaviest_statement, logged_plans
from tests.support.stale_statistics import stale_hot_tier

CLAIMED = 300


def _worst_statement_of_claim(conn: psycopg.Connection) -> tuple[int, str]:
    """Claim CLAIMED rows; the most rows any statement inside the claim handled, and its text."""
    rows, plans = logged_plans(
        conn, f"SELECT count(*) FROM pgsched.task_claim_many('NORMAL', {CLAIMED}, 'w')"
    )
    assert rows[0][0] == CLAIMED
    return heaviest_statement(plans, leave_out="task_claim_many(")


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain-order"])
def test_claim_with_stale_statistics_handles_rows_in_proportion_to_the_claim(
    conn: psycopg.Connection, fair: bool
) -> None:
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (fair,))
    stale_hot_tier(conn, "due", CLAIMED)
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
    stale_hot_tier(conn, "ahead", CLAIMED)
    rows, statement = _worst_statement_of_claim(conn)
    assert rows <= 20 * CLAIMED, f"{rows:,} rows handled by: {statement}"
