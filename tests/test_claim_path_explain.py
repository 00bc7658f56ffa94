"""The claim path stays on the hot partition however large the cold backlog grows.

One database, seeded once for the module with a million cold (PENDING) rows and a few
thousand hot (QUEUED/PROCESSING) ones, then ANALYZEd; the claim-side queries are EXPLAINed
and every relation their plans touch must be tasks_hot or one of its indexes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from table_stats import table_stats

if TYPE_CHECKING:
    from conftest import PgServer

COLD_ROWS = 1_000_000
COLD_VIA_API = 100_000  # the rest goes in with one set-based INSERT through pgsched.tasks
HOT_ROWS = 3_000

CLAIM = (
    "SELECT id FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = 'NORMAL' AND priority = 5"
    " AND next_run_at <= now() ORDER BY next_run_at LIMIT 100 FOR UPDATE SKIP LOCKED"
)
NEXT_DUE = "SELECT min(next_run_at) FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = 'NORMAL'"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backlog(pg_server: PgServer) -> Iterator[psycopg.Connection]:
    name = "pgsched_explain_backlog"
    pg_server.drop_database(name)
    pg_server.create_database(name, template=pg_server.template_dbname)
    try:
        with pg_server.connect(name) as conn:
            _seed(conn)
            yield conn
    finally:
        pg_server.drop_database(name)


def _seed(conn: psycopg.Connection) -> None:
    # Cold: run_ats spread over the year after the hot window, through the API...
    rows = conn.execute(
        "SELECT count(*) FILTER (WHERE created), count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('seed'::text, ARRAY[%(n)s]),"
        " run_ats => ARRAY(SELECT now() + interval '2 days' + g * interval '5 minutes'"
        "                  FROM generate_series(1, %(n)s) AS g),"
        " priorities => ARRAY(SELECT g %% 11 FROM generate_series(1, %(n)s) AS g))",
        {"n": COLD_VIA_API},
    ).fetchone()
    assert rows == (COLD_VIA_API, COLD_VIA_API)
    # ...and the rest set-based, as a migration or an import would write them.
    conn.execute(
        "INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane, status)"
        " SELECT 'seed', 'tenant_' || (g %% 50), now() + interval '2 days' + g * interval '30 s',"
        "        g %% 11, CASE WHEN g %% 11 >= 8 THEN 'HIGH'::pgsched.task_lane"
        "        WHEN g %% 11 >= 4 THEN 'NORMAL' ELSE 'LOW' END, 'PENDING'"
        " FROM generate_series(1, %s) AS g",
        (COLD_ROWS - COLD_VIA_API,),
    )
    # Hot: due a while ago through the next 23 hours, every lane and priority.
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('hot'::text, ARRAY[%(n)s]),"
        " run_ats => ARRAY(SELECT now() - interval '1 hour' + g * interval '28 s'"
        "                  FROM generate_series(1, %(n)s) AS g),"
        " priorities => ARRAY(SELECT g %% 11 FROM generate_series(1, %(n)s) AS g))",
        {"n": HOT_ROWS},
    )
    # A few are running.
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = 1, locked_by = 'w',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes'"
        " WHERE id IN (SELECT id FROM pgsched.tasks WHERE status = 'QUEUED' LIMIT 50)"
    )
    # On a partitioned table this also analyzes every partition.
    conn.execute("ANALYZE pgsched.tasks")


def _walk(node: Any, key: str) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, str):
                found.append(v)
            else:
                found.extend(_walk(v, key))
    elif isinstance(node, list):
        for item in node:
            found.extend(_walk(item, key))
    return found


def _explain(conn: psycopg.Connection, query: str) -> Any:
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {query}").fetchone()
    assert row is not None
    plan = row[0]
    return json.loads(plan) if isinstance(plan, str) else plan


def _hot_indexes(conn: psycopg.Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgsched'"
            " AND tablename = 'tasks_hot'"
        )
    }


def test_seeded_as_intended(backlog: psycopg.Connection) -> None:
    by_partition: dict[str, int] = dict(
        backlog.execute(
            "SELECT tableoid::regclass::text, count(*) FROM pgsched.tasks GROUP BY 1"
        ).fetchall()
    )
    assert by_partition == {"pgsched.tasks_cold": COLD_ROWS, "pgsched.tasks_hot": HOT_ROWS}
    due = backlog.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = 'NORMAL'"
        " AND priority = 5 AND next_run_at <= now()"
    ).fetchone()[0]
    assert due > 0, "the claim must have due rows to find, or its plan proves little"


@pytest.mark.parametrize("query", [CLAIM, NEXT_DUE], ids=["claim", "next-due"])
def test_plan_reads_only_the_hot_partition(backlog: psycopg.Connection, query: str) -> None:
    plan = _explain(backlog, query)
    relations = set(_walk(plan, "Relation Name"))
    indexes = set(_walk(plan, "Index Name"))
    assert relations == {"tasks_hot"}, json.dumps(plan, indent=1)
    assert indexes <= _hot_indexes(backlog), json.dumps(plan, indent=1)
    text = json.dumps(plan)
    assert "tasks_cold" not in text
    assert "tasks_done" not in text


def test_claim_uses_the_claim_index(backlog: psycopg.Connection) -> None:
    plan = _explain(backlog, CLAIM)
    assert "tasks_hot_claim_idx" in _walk(plan, "Index Name"), json.dumps(plan, indent=1)


def test_generic_claim_plan_also_stays_hot(backlog: psycopg.Connection) -> None:
    """A worker's prepared claim with parameters, planned once for every lane and priority."""
    backlog.execute(
        "PREPARE claim_generic (pgsched.task_lane, integer, integer) AS"
        " SELECT id FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = $1 AND priority = $2"
        " AND next_run_at <= now() ORDER BY next_run_at LIMIT $3 FOR UPDATE SKIP LOCKED"
    )
    try:
        backlog.execute("SET plan_cache_mode = force_generic_plan")
        plan = _explain(backlog, "EXECUTE claim_generic('NORMAL', 5, 100)")
    finally:
        backlog.execute("RESET plan_cache_mode")
        backlog.execute("DEALLOCATE claim_generic")
    assert set(_walk(plan, "Relation Name")) == {"tasks_hot"}, json.dumps(plan, indent=1)
    assert "tasks_hot_claim_idx" in _walk(plan, "Index Name"), json.dumps(plan, indent=1)
    assert "tasks_cold" not in json.dumps(plan)


def test_claim_returns_the_due_rows_in_order(backlog: psycopg.Connection) -> None:
    with backlog.transaction():
        ids = [r[0] for r in backlog.execute(CLAIM)]
        expected = [
            r[0]
            for r in backlog.execute(
                "SELECT id FROM pgsched.tasks_hot WHERE status = 'QUEUED' AND lane = 'NORMAL'"
                " AND priority = 5 AND next_run_at <= now() ORDER BY next_run_at LIMIT 100"
            )
        ]
    assert ids
    assert ids == expected


def test_hot_partition_is_a_small_fraction_of_cold(backlog: psycopg.Connection) -> None:
    sizes = backlog.execute(
        "SELECT pg_total_relation_size('pgsched.tasks_hot'),"
        " pg_total_relation_size('pgsched.tasks_cold')"
    ).fetchone()
    assert sizes is not None
    hot, cold = sizes
    assert cold > 50 * 1024 * 1024
    assert hot < cold * 0.02, (hot, cold)


def test_claim_probes_the_rows_it_locked_instead_of_hashing_the_hot_tier(
    conn: psycopg.Connection,
) -> None:
    """With the partitioned parent analyzed (ids known unique) and thousands of rows
    queued, the planner used to join the claim's locked ids back to tasks_hot by hashing
    every queued row: a sequential scan of the hot tier per claim."""
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        "  task_types => array_fill('hot'::text, ARRAY[20000]))"
    )
    conn.execute("ANALYZE pgsched.tasks")
    conn.execute("ANALYZE pgsched.tasks_hot")

    def hot_seq_scans() -> int:
        return table_stats(conn, "pgsched.tasks_hot")["seq_scan"]

    before = hot_seq_scans()
    for _ in range(3):
        claimed = conn.execute(
            "SELECT count(*) FROM pgsched.task_claim_many('NORMAL', 500, 'w1')"
        ).fetchone()
        assert claimed == (500,)
    assert hot_seq_scans() - before == 0
