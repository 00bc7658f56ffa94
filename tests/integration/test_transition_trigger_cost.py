"""The transition trigger's work grows with the rows a statement changes, not their square.

task_record_transitions pairs the statement's old and new rows (its transition tables).
PL/pgSQL plans its statements once per connection, from the row counts of the first call,
so a connection whose first transition was one row could keep a plan that rescans new_rows
once per old row. These tests change one row first (the plan is made then), then many, and
count with auto_explain (analyze, in this session only) how many transition-table rows the
trigger's statements read: each table read once means at most one of each per changed row.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.query_plans import logged_plans, plan_nodes
from tests.support.stale_statistics import schedule

CLAIM_BY_HAND = (
    "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
    " locked_by = 'w', lease_token = gen_random_uuid(), updated_at = clock_timestamp()"
    " WHERE id = ANY(%s)"
)


def _trigger_plans(conn: psycopg.Connection, statement: str, params: Any) -> list[dict[str, Any]]:
    """Run `statement`; the plans of the trigger's statements that read a transition table."""
    _, plans = logged_plans(conn, statement, params)
    return [p for p in plans if "old_rows" in str(p.get("Query Text", ""))]


def _transition_rows_read(plans: list[dict[str, Any]]) -> int:
    return sum(
        int(node["Actual Rows"]) * int(node["Actual Loops"])
        for plan in plans
        for node in plan_nodes(plan["Plan"])
        if node["Node Type"] == "Named Tuplestore Scan"
    )


@pytest.mark.parametrize("rows", [10, 1000])
def test_trigger_reads_each_transition_row_once_after_a_one_row_first_call(
    conn: psycopg.Connection, rows: int
) -> None:
    first, *many = schedule(conn, 1 + rows)
    # The connection's first transition: one row (the trigger's plans are made here).
    conn.execute(CLAIM_BY_HAND, ([first],))
    plans = _trigger_plans(conn, CLAIM_BY_HAND, (many,))
    assert plans, "auto_explain logged no statement of the trigger"
    read = _transition_rows_read(plans)
    # Linear: old_rows and new_rows read once by each statement of the trigger (at most
    # two), not new_rows once per old row.
    assert read <= 4 * rows, f"{read} transition rows read for {rows} changed"
    events = conn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = ANY(%s)"
        " AND from_status = 'QUEUED' AND to_status = 'PROCESSING'",
        (many,),
    ).fetchone()
    assert events == (rows,)
