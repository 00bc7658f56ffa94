"""The transition trigger's work grows with the rows a statement changes, not their square.

task_record_transitions pairs the statement's old and new rows (its transition tables).
PL/pgSQL plans its statements once per connection, from the row counts of the first call,
so a connection whose first transition was one row could keep a plan that rescans new_rows
once per old row. These tests change one row first (the plan is made then), then many, and
count with auto_explain (analyze, in this session only) how many transition-table rows the
trigger's statements read: each table read once means at most one of each per changed row.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from query_plans import plan_nodes

CLAIM_BY_HAND = (
    "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
    " locked_by = 'w', lease_token = gen_random_uuid(), updated_at = clock_timestamp()"
    " WHERE id = ANY(%s)"
)


def _schedule(conn: psycopg.Connection, n: int) -> list[int]:
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%s])) ORDER BY ordinal",
        (n,),
    ).fetchall()
    return [r[0] for r in rows]


def _trigger_plans(conn: psycopg.Connection, statement: str, params: Any) -> list[dict[str, Any]]:
    """Run `statement` with auto_explain logging every nested statement's plan as a NOTICE;
    return the plans of the statements that read a transition table."""
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
        conn.execute(statement, params)
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SET auto_explain.log_min_duration = -1")
    plans = [json.loads(text.split("plan:", 1)[1]) for text in notices]
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
    first, *many = _schedule(conn, 1 + rows)
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
