"""The claim path stays on the hot partition however large the cold backlog grows.

One database, seeded once for the module with two million cold (PENDING) rows and a few
thousand hot (QUEUED/PROCESSING) ones, then ANALYZEd. Two kinds of guard:

- the claim-side queries written out are EXPLAINed: every relation their plans touch must
  be tasks_hot or one of its indexes;
- the shipped functions themselves (task_claim_many, task_promote_due, lease_rescue_expired,
  task_wake_overdue, lane_next_due) run with auto_explain logging every statement inside
  them, with its plan and row counts, as a NOTICE on the test's own connection: a claim or
  sweep must not read tasks_cold, tasks_done or tasks_finished, a claim must use the claim
  index, and promotion must read the slice coming due through the due index, never the whole tier.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from pgsched.queries import query
from tests.support.query_plans import (
    explain,
    logged_plans,
    node_values,
    plan_nodes,
    seeded_database,
)
from tests.support.table_stats import table_stats

if TYPE_CHECKING:
    from tests.conftest import PgServer

COLD_ROWS = 2_000_000
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
    with seeded_database(pg_server, "pgsched_explain_backlog", _seed) as conn:
        yield conn


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
    plan = explain(backlog, query)
    relations = set(node_values(plan, "Relation Name"))
    indexes = set(node_values(plan, "Index Name"))
    assert relations == {"tasks_hot"}, json.dumps(plan, indent=1)
    assert indexes <= _hot_indexes(backlog), json.dumps(plan, indent=1)
    text = json.dumps(plan)
    assert "tasks_cold" not in text
    assert "tasks_done" not in text and "tasks_finished" not in text


def test_claim_uses_the_claim_index(backlog: psycopg.Connection) -> None:
    plan = explain(backlog, CLAIM)
    assert "tasks_hot_claim_idx" in node_values(plan, "Index Name"), json.dumps(plan, indent=1)


def test_generic_claim_plan_also_stays_hot(backlog: psycopg.Connection) -> None:
    """A worker's prepared claim with parameters, planned once for every lane and priority."""
    backlog.execute(
        "PREPARE claim_generic (pgsched.task_lane, integer, integer) AS"
        " SELECT id FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = $1 AND priority = $2"
        " AND next_run_at <= now() ORDER BY next_run_at LIMIT $3 FOR UPDATE SKIP LOCKED"
    )
    try:
        backlog.execute("SET plan_cache_mode = force_generic_plan")
        plan = explain(backlog, "EXECUTE claim_generic('NORMAL', 5, 100)")
    finally:
        backlog.execute("RESET plan_cache_mode")
        backlog.execute("DEALLOCATE claim_generic")
    assert set(node_values(plan, "Relation Name")) == {"tasks_hot"}, json.dumps(plan, indent=1)
    assert "tasks_hot_claim_idx" in node_values(plan, "Index Name"), json.dumps(plan, indent=1)
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


# The shipped functions, with the plans of the statements inside them ----------------------


def _shipped_plans(
    conn: psycopg.Connection, call: str, setup: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Run `setup` then `call` (rolled back) and return the plan of every statement `call`
    executed (query_plans.logged_plans: nested ones too, the statements of a PL/pgSQL
    body, with their actual row counts)."""
    plans: list[dict[str, Any]] = []
    with pytest.raises(_Rollback), conn.transaction():
        for statement in setup:
            conn.execute(statement)
        plans = logged_plans(conn, call)[1]
        raise _Rollback
    assert plans, f"auto_explain logged nothing for {call}"
    return plans


class _Rollback(Exception):
    """Leaves the seeded backlog as it was after each shipped function has run."""


def _statement(plan: dict[str, Any]) -> str:
    return str(plan.get("Query Text", "")).strip()


def _assert_no_cold_or_done(plans: list[dict[str, Any]], what: str) -> None:
    for plan in plans:
        text = json.dumps(plan)
        assert all(t not in text for t in ("tasks_cold", "tasks_done", "tasks_finished")), (
            f"{what} touched the cold or done tier in:\n{_statement(plan)}\n"
            + json.dumps(plan["Plan"], indent=1)
        )


# Fair claims (the default), the lane's plain order (fairness off), and a claim under limits
# (a type limit with room, so the limit path runs to the end).
CLAIM_MODES = {
    "fair": ((), "tasks_hot_tenant_idx"),
    "lane-order": (("SELECT pgsched.lane_set_fairness('NORMAL', false)",), "tasks_hot_claim_idx"),
    "fair-limited": (
        (
            "SELECT pgsched.limit_set('task_type', 'hot', max_processing => 1000, rate => 5000)",
            "SELECT pgsched.limit_set('tenant', 'default', max_processing => 1000)",
        ),
        "tasks_hot_tenant_idx",
    ),
    "lane-order-limited": (
        (
            "SELECT pgsched.lane_set_fairness('NORMAL', false)",
            "SELECT pgsched.limit_set('task_type', 'hot', max_processing => 1000)",
        ),
        "tasks_hot_claim_idx",
    ),
}


@pytest.mark.parametrize("mode", list(CLAIM_MODES))
def test_shipped_claim_reads_only_the_hot_tier_through_its_index(
    backlog: psycopg.Connection, mode: str
) -> None:
    setup, index = CLAIM_MODES[mode]
    plans = _shipped_plans(
        backlog, "SELECT id FROM pgsched.task_claim_many('NORMAL', 100, 'w')", setup
    )
    _assert_no_cold_or_done(plans, "task_claim_many")
    every = [n for p in plans for n in plan_nodes(p)]
    # Small tables (settings, task_limits) may be read whole; no tier of tasks may.
    tier_scans = [
        n
        for n in every
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name", "").startswith("tasks")
    ]
    assert not tier_scans, [_statement(p) for p in plans]
    claim = [p for p in plans if "FOR UPDATE SKIP LOCKED" in _statement(p)]
    assert claim, [_statement(p) for p in plans]
    for plan in claim:
        nodes = list(plan_nodes(plan))
        # What it reads (an UPDATE's target, ModifyTable, names the parent table).
        scanned = {
            n["Relation Name"]
            for n in nodes
            if "Relation Name" in n and n["Node Type"] != "ModifyTable"
        }
        assert scanned == {"tasks_hot"}, json.dumps(plan, indent=1)
        assert index in {n.get("Index Name") for n in nodes}, json.dumps(plan, indent=1)
    # It claimed something, so the plans above are the ones that do the work.
    assert any(n["Node Type"] == "ModifyTable" and n["Actual Rows"] > 0 for n in every)


def test_shipped_promotion_reads_the_due_slice_not_the_cold_tier(
    backlog: psycopg.Connection,
) -> None:
    """Promote with the clock two days on: thousands come due, out of two million."""
    plans = _shipped_plans(
        backlog,
        "SELECT pgsched.task_promote_due(1000, now() + interval '2 days 1 hour')",
    )
    # Two statements (sql/0031): the due range locked, then those rows moved by id.
    lock = [p for p in plans if "FOR UPDATE SKIP LOCKED" in _statement(p)]
    move = [p for p in plans if "SET status = 'QUEUED'" in _statement(p)]
    assert len(lock) == 1 and len(move) == 1, [_statement(p) for p in plans]
    promote = [{"Plan": [lock[0]["Plan"], move[0]["Plan"]]}]
    nodes = list(plan_nodes(promote[0]))
    cold_reads = [n for n in nodes if n.get("Relation Name") == "tasks_cold"]
    assert cold_reads, json.dumps(promote[0], indent=1)
    # Every read of the cold tier goes through an index: the due range, then the UPDATE's
    # probes of the locked rows by primary key.
    assert {n["Node Type"] for n in cold_reads} == {"Index Scan"}, json.dumps(promote[0], indent=1)
    # The promotable index: the cold tier's due times, tasks waiting for parents left out.
    due_range = [n for n in cold_reads if n["Index Name"] == "tasks_cold_promotable_idx"]
    assert len(due_range) == 1, json.dumps(promote[0], indent=1)
    assert "next_run_at" in due_range[0].get("Index Cond", "")
    # It reads the rows it moves (1,000, plus a few it could not lock) and stops.
    assert due_range[0]["Actual Rows"] * due_range[0]["Actual Loops"] <= 2 * 1000, due_range[0]
    for probe in cold_reads:
        if probe is not due_range[0]:
            assert probe["Index Name"] == "tasks_cold_pkey", probe
            assert probe["Actual Rows"] * probe["Actual Loops"] <= 1000, probe
    moved = [n for n in plan_nodes(move[0]["Plan"]) if n["Node Type"] == "ModifyTable"]
    assert moved and moved[0]["Actual Rows"] == 1000
    assert "tasks_done" not in json.dumps(promote[0])
    assert "tasks_finished" not in json.dumps(promote[0])


@pytest.mark.parametrize(
    "call",
    [
        "SELECT pgsched.lease_rescue_expired(NULL, 1000, now() + interval '10 minutes')",
        "SELECT * FROM pgsched.task_wake_overdue('1 minute')",
        "SELECT * FROM pgsched.lane_next_due('NORMAL')",
    ],
    ids=["lease-rescue", "wake-overdue", "lane-next-due"],
)
def test_shipped_sweeps_read_only_the_hot_tier(backlog: psycopg.Connection, call: str) -> None:
    plans = _shipped_plans(backlog, call)
    _assert_no_cold_or_done(plans, call)
    assert any("tasks_hot" in json.dumps(p["Plan"]) for p in plans), "nothing read the hot tier"


# The sweeper leader's queue-depth gauges ---------------------------------------------------


def _ran(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's nodes that ran at least once."""
    return [n for n in plan_nodes(plan["Plan"]) if n.get("Actual Loops", 0) > 0]


def test_queue_depth_per_lane_probes_the_claim_index_for_due_rows_only(
    backlog: psycopg.Connection,
) -> None:
    plan = explain(backlog, query("queue_depth_lanes"), {}, analyze=True)[0]
    ran = _ran(plan)
    text = json.dumps(plan, indent=1)
    assert {n["Relation Name"] for n in ran if "Relation Name" in n} == {"tasks_hot"}, text
    probes = [n for n in ran if "Index Name" in n]
    assert {n["Index Name"] for n in probes} == {"tasks_hot_claim_idx"}, text
    for probe in probes:
        assert "next_run_at <= now()" in probe["Index Cond"], probe
    assert not [n for n in ran if n["Node Type"] == "Seq Scan"], text
    # It reads the due entries (about a hundred, plus the index entries of rows since
    # claimed that vacuum has not removed yet), never the work due later in the day.
    due, queued = backlog.execute(
        "SELECT count(*) FILTER (WHERE next_run_at <= now()), count(*)"
        " FROM pgsched.tasks WHERE status = 'QUEUED'"
    ).fetchone()  # type: ignore[misc]
    assert due > 0 and queued > 10 * due
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in probes)
    assert due <= read < queued / 10, (read, due, queued)


def test_queue_pending_per_tier_reads_no_cold_row(backlog: psycopg.Connection) -> None:
    plan = explain(backlog, query("queue_pending_tiers"), {}, analyze=True)[0]
    text = json.dumps(plan, indent=1)
    assert {n["Relation Name"] for n in _ran(plan) if "Relation Name" in n} <= {
        "tasks_hot",
        "pg_class",
        "settings",
    }, text
    assert all(t not in text for t in ("tasks_cold", "tasks_done", "tasks_finished")), text
    assert "JIT" not in plan, text  # a cheap plan: no compilation every interval
    row = backlog.execute(query("queue_pending_tiers")).fetchone()
    assert row is not None
    assert abs(row[2] - COLD_ROWS) < COLD_ROWS * 0.05, row
    exact = backlog.execute(
        "SELECT count(*) FILTER (WHERE next_run_at < now() + interval '15 minutes'),"
        " count(*) FILTER (WHERE next_run_at >= now() + interval '15 minutes')"
        " FROM pgsched.tasks WHERE status = 'QUEUED' AND next_run_at > now()"
    ).fetchone()
    assert (row[0], row[1]) == exact


def test_queue_overdue_pending_reads_the_due_slice_of_the_cold_tier(
    backlog: psycopg.Connection,
) -> None:
    plan = explain(backlog, query("overdue_pending"), {}, analyze=True)[0]
    ran = _ran(plan)
    text = json.dumps(plan, indent=1)
    assert {n.get("Relation Name") for n in ran if "Relation Name" in n} == {"tasks_cold"}, text
    # Either due-time index of the cold tier (every PENDING task, or the promotable ones).
    used = {n.get("Index Name") for n in ran if "Index Name" in n}
    assert used and used <= {"tasks_cold_due_idx", "tasks_cold_promotable_idx"}, text
    assert not [n for n in ran if n["Node Type"] == "Seq Scan"], text


def test_queue_dead_count_reads_the_dead_lane_only(
    backlog: psycopg.Connection,
) -> None:
    """With 200,000 finished tasks of which 500 are DEAD (rolled back after). Since sql/0027
    the DEAD lane is a partition of its own (tasks_done), so the count reads DEAD rows only,
    never a finished task's."""
    with pytest.raises(_Rollback), backlog.transaction():
        backlog.execute(
            "INSERT INTO pgsched.tasks (task_type, next_run_at, lane, status, priority,"
            " updated_at) SELECT 'done', now() - interval '1 day', 'NORMAL',"
            " CASE WHEN g % 400 = 0 THEN 'FAILED' ELSE 'COMPLETED' END::pgsched.task_status,"
            " 5, now() - g * interval '1 s' FROM generate_series(1, 200000) AS g"
        )
        backlog.execute("ANALYZE pgsched.tasks_done")
        backlog.execute("ANALYZE pgsched.tasks_finished")
        params = {"task_type": None, "tenant_id": None, "since": None}
        plan = explain(backlog, query("dead_count"), params, analyze=True)[0]
        ran = _ran(plan)
        text = json.dumps(plan, indent=1)
        read = {n.get("Relation Name") for n in ran if "Relation Name" in n}
        assert read == {"tasks_done"}, text
        scans = [n for n in ran if "Relation Name" in n]
        assert all(n.get("Actual Rows", 0) <= 500 for n in scans), text
        assert backlog.execute(query("dead_count"), params).fetchone() == (500,)
        raise _Rollback
