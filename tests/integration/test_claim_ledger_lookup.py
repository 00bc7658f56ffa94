"""A claim looks up its keyed tasks in the completed-work ledger by key, however large the
ledger: the worker's claim statements (sql/queries.sql: task_claim_many, task_claim_ids)
read a few ledger rows per claimed task, never the whole ledger.

Found in a soak (400 tasks/s, a quarter of them keyed): the claim joined the ledger by
hashing, planned for the 1,000 rows a set-returning function is assumed to return, so
every claim read the whole ledger (689 million rows read by 61,869 sequential scans), and
Postgres's CPU per task grew with the ledger until retention pruned it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.queries import query
from tests.support.query_plans import explain, plan_nodes

LEDGER = 30_000  # keyed work already done (what 30 days of retention keep, in small)
CLAIMED = 20


def _ledger_rows_read(plan: list[dict[str, Any]]) -> int:
    """Rows every plan node on pgsched.completed_work produced or filtered out, all loops
    counted."""
    return sum(
        (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0))
        * node.get("Actual Loops", 1)
        for node in plan_nodes(plan)
        if node.get("Relation Name") == "completed_work"
    )


def _fill_ledger_and_schedule(conn: psycopg.Connection) -> list[int]:
    conn.execute(
        "INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key, task_id)"
        " SELECT 'default', 't', 'done-' || i, i FROM generate_series(1, %s) AS i",
        (LEDGER,),
    )
    conn.execute("ANALYZE pgsched.completed_work")
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks("
        " task_types => array_fill('t'::text, ARRAY[%(n)s]),"
        " idempotency_keys => (SELECT array_agg('new-' || i) FROM generate_series(1, %(n)s) AS i))"
        " ORDER BY ordinal",
        {"n": 2 * CLAIMED},
    ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize("name", ["task_claim_many", "task_claim_ids"])
def test_a_claim_reads_the_ledger_by_key_not_whole(conn: psycopg.Connection, name: str) -> None:
    if name == "task_claim_ids":
        # Claims by id (the Redis hot tier's) serve lanes claimed in plain order.
        conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', FALSE)")
    ids = _fill_ledger_and_schedule(conn)
    # One of them was done already (an earlier run completed it): the claim says by whom.
    conn.execute(
        "INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key, task_id)"
        " VALUES ('default', 't', 'new-1', 0)"
    )

    def params(batch: list[int]) -> dict[str, Any]:
        common = {"lane": "NORMAL", "worker": "w", "lease": timedelta(seconds=30)}
        if name == "task_claim_many":
            return common | {"max_tasks": len(batch), "as_of": None, "not_before": None}
        return common | {"ids": batch}

    first, second = ids[:CLAIMED], ids[CLAIMED:]
    with conn.cursor(row_factory=dict_row) as cur:
        claimed = cur.execute(query(name), params(first)).fetchall()
    assert len(claimed) == CLAIMED
    done_by = {row["idempotency_key"]: row["done_by"] for row in claimed}

    read = _ledger_rows_read(explain(conn, query(name), params(second), analyze=True))
    assert read <= 2 * CLAIMED, f"{read:,} ledger rows read to claim {CLAIMED} tasks"

    # The lookup still finds what it is for: the keyed task done before, and only that one.
    rest = conn.execute(
        "SELECT idempotency_key FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'PROCESSING'",
        (second,),
    ).fetchall()
    assert len(rest) == CLAIMED
    # The first batch is the first keys scheduled, new-1 among them (claims go in id order
    # among tasks due at the same time).
    assert done_by.pop("new-1") == 0
    assert set(done_by.values()) == {None}
