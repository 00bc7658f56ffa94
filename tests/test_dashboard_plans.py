"""The dashboard's reads stay off the big tiers: EXPLAINed on a seeded backlog.

200,000 cold (PENDING) tasks, 100,000 done two days ago, a few hundred recent, running and
DEAD ones, ANALYZEd. No page statement may read tasks_cold or tasks_done sequentially: the
cold tier is where millions of future tasks live, the done tier grows with history.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from query_plans import explain, plan_nodes, seeded_database

from pgsched.queries import query

if TYPE_CHECKING:
    from conftest import PgServer

pytestmark = pytest.mark.slow

BIG_TIERS = {"tasks_cold", "tasks_done"}


@pytest.fixture(scope="module")
def backlog(pg_server: PgServer) -> Iterator[psycopg.Connection]:
    with seeded_database(pg_server, "pgsched_dashboard_plans", _seed) as conn:
        yield conn


def _schedule(conn: psycopg.Connection, n: int, first_due: str, step: str, type_: str) -> None:
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill(%(type)s::text, ARRAY[%(n)s]),"
        " tenant_ids => ARRAY(SELECT 't' || (g %% 100) FROM generate_series(1, %(n)s) g),"
        " run_ats => ARRAY(SELECT now() + %(first)s::interval + g * %(step)s::interval"
        "                  FROM generate_series(1, %(n)s) g))",
        {"n": n, "first": first_due, "step": step, "type": type_},
    )


def _seed(conn: psycopg.Connection) -> None:
    _schedule(conn, 200_000, "2 days", "2 minutes", "future")
    # Done two days ago: queued, run and finished by set-based transitions.
    _schedule(conn, 100_000, "-3 days", "1 second", "old")
    for status, attempts in (("PROCESSING", "1"), ("COMPLETED", "1")):
        conn.execute(
            "UPDATE pgsched.tasks SET status = %s::pgsched.task_status,"
            " attempts = " + attempts + ", updated_at = now() - interval '2 days',"
            " last_run_at = now() - interval '2 days'"
            " WHERE task_type = 'old'",
            (status,),
        )
    _schedule(conn, 600, "-10 minutes", "1 second", "recent")
    conn.execute("SELECT count(*) FROM pgsched.task_claim_many('NORMAL', 600, 'w', '10 minutes')")
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'COMPLETED', lease_token = NULL"
        " WHERE task_type = 'recent' AND id % 3 = 0"
    )
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'FAILED', lease_token = NULL, last_error = 'x'"
        " WHERE task_type = 'recent' AND id % 3 = 1"
    )
    conn.execute("ANALYZE")


SEARCH = {
    "task_id": None,
    "task_type": None,
    "tenant_id": None,
    "status": None,
    "idempotency_key": None,
    "due_from": None,
    "due_until": None,
    "max_rows": 50,
}

STATEMENTS: list[tuple[str, dict[str, Any]]] = [
    ("dashboard_lanes_live", {}),
    ("dashboard_lanes_recent", {}),
    ("dashboard_throughput", {}),
    ("dashboard_dead_count", {}),
    ("dashboard_dead_list", {"task_type": None, "max_rows": 200}),
    ("dashboard_task", {"task_id": 12345}),
    ("dashboard_task_events", {"task_id": 12345}),
    ("dashboard_task_outcomes", {"task_id": 12345}),
    ("dashboard_task_search", {**SEARCH, "task_id": 12345}),
    ("dashboard_task_search", {**SEARCH, "idempotency_key": "k", "tenant_id": "t1"}),
    ("dashboard_task_search", {**SEARCH, "status": "FAILED"}),
    ("dashboard_task_search", {**SEARCH, "task_type": "future"}),
    ("dashboard_schedules", {"max_rows": 200}),
    ("dashboard_workers", {}),
    ("dashboard_worker_leases", {"max_rows": 200}),
]


@pytest.mark.parametrize(("name", "params"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_no_page_reads_a_big_tier_sequentially(
    backlog: psycopg.Connection, name: str, params: dict[str, Any]
) -> None:
    plan = explain(backlog, query(name), params)
    scans = [(n["Node Type"], n["Relation Name"]) for n in plan_nodes(plan) if "Relation Name" in n]
    assert scans, "the plan reads no table"
    seq = [(node, rel) for node, rel in scans if node == "Seq Scan" and rel in BIG_TIERS]
    assert seq == [], f"{name} reads {seq} sequentially"
