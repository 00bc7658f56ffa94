"""The dashboard's reads stay off the big tiers: EXPLAINed on a seeded backlog.

200,000 cold (PENDING) tasks, 100,000 done two days ago, a few hundred recent, running and
DEAD ones, a few cancelled and a few keyed, ANALYZEd. No page statement may read tasks_cold
or a partition of tasks_finished (COMPLETED and CANCELLED, sql/0027) sequentially: the cold
tier is where millions of future tasks live, the finished tier grows with history. The DEAD
lane (tasks_done, FAILED only since sql/0027) holds a few hundred rows here, and a scan of
it reads DEAD rows only.

Every task search (each filter alone and in combinations, with values each tier has many,
few or none of) is also run under EXPLAIN ANALYZE: it must read fewer buffers than a
fraction of either big tier, which an index range answers and a walk of a tier's primary
key looking for a rare value does not; and it must return what a plain query over
pgsched.tasks returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from pgsched.dashboard.app import STATUSES
from pgsched.queries import query
from tests.support.query_plans import explain, plan_nodes, seeded_database

if TYPE_CHECKING:
    from tests.conftest import PgServer

pytestmark = pytest.mark.slow

# The tables walked by test_the_budget_is_below_a_walk_of_either_big_tier.
BIG_TIERS = ("tasks_cold", "tasks_finished")


def is_big_tier(relation: str) -> bool:
    """The cold tier, or any partition of the finished tier (its periods, its archive, its
    default partition)."""
    return relation == "tasks_cold" or relation.startswith("tasks_finished")


@pytest.fixture(scope="module")
def backlog(pg_server: PgServer) -> Iterator[psycopg.Connection]:
    with seeded_database(pg_server, "pgsched_dashboard_plans", _seed) as conn:
        yield conn


@pytest.fixture(scope="module")
def empty_partitions(backlog: psycopg.Connection) -> set[str]:
    """The finished tier's partitions the seed left empty (the periods made ahead, the
    default partition: the seed's finished rows are all in the archive, as in a database
    migrated today). The planner reads an empty partition sequentially, and that reads
    nothing; a partition holding rows must be read by index."""
    rows = backlog.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_inherits AS i ON i.inhrelid = c.oid"
        " WHERE i.inhparent = 'pgsched.tasks_finished'::regclass"
        " AND NOT EXISTS (SELECT FROM pg_stats AS s WHERE s.schemaname = 'pgsched'"
        "                 AND s.tablename = c.relname)"
    ).fetchall()
    names = {r[0] for r in rows}
    assert "tasks_finished_archive" not in names
    return names


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
    # Autovacuum keeps the hot tier to its live rows in production; 100,000 rows just went
    # through it.
    conn.execute("VACUUM pgsched.tasks_hot")
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
    # A few cancelled (done tier, the rarest status) and a few keyed ones (cold tier).
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'CANCELLED', status_reason = 'test'"
        " WHERE task_type = 'future' AND id % 20000 = 7"
    )
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('keyed'::text, ARRAY[%(n)s]),"
        " tenant_ids => array_fill('t5'::text, ARRAY[%(n)s]),"
        " idempotency_keys => ARRAY(SELECT 'key-' || g FROM generate_series(1, %(n)s) g),"
        " run_ats => array_fill(now() + interval '3 days', ARRAY[%(n)s]))",
        {"n": 20},
    )
    conn.execute("VACUUM ANALYZE")


SEARCH = {
    "task_id": None,
    "task_type": None,
    "tenant_id": None,
    "status": None,
    "idempotency_key": None,
    "due_from": None,
    "due_until": None,
    "before_id": None,
    "after_due": None,
    "after_id": None,
    "max_rows": 50,
}

NOW = datetime.now(UTC)

STATEMENTS: list[tuple[str, dict[str, Any]]] = [
    ("dashboard_lanes_live", {}),
    ("dashboard_lanes_recent", {}),
    ("dashboard_throughput", {}),
    ("dashboard_dead_count", {}),
    ("dashboard_tiers", {}),
    ("dashboard_coming_due", {"cap": 100_001}),
    (
        "dashboard_dead_list",
        {"task_type": None, "error_class": None, "max_rows": 100, "skip_rows": 0},
    ),
    (
        "dashboard_dead_list",
        {"task_type": "recent", "error_class": "x", "max_rows": 100, "skip_rows": 100},
    ),
    ("dashboard_dead_matching", {"task_type": None, "error_class": "x", "cap": 10_001}),
    ("dashboard_dead_classes", {"task_type": None, "max_rows": 50}),
    (
        "dashboard_dead_matching_ids",
        {"task_type": "recent", "error_class": None, "failed_until": NOW, "cap": 10_001},
    ),
    ("dashboard_schedule", {"schedule_id": 1}),
    ("dashboard_task", {"task_id": 12345}),
    ("dashboard_task_events", {"task_id": 12345, "after_id": 0, "max_rows": 101}),
    ("dashboard_task_event_count", {"task_id": 12345, "after_id": 0}),
    ("dashboard_task_outcomes", {"task_id": 12345}),
    ("dashboard_task_batch", {"task_id": 12345}),
    ("dashboard_schedules", {"max_rows": 200}),
    ("dashboard_workers", {}),
    ("dashboard_worker_leases", {"max_rows": 200}),
]


# Each filter alone, with a value the tiers have many, few or none of, and combinations.
# The seed: cold 'future' (tenants t0..t99, due from 2 days ahead over 277 days), done 'old'
# (the same tenants, due 3 days ago over 28 hours), 'recent' running / COMPLETED / FAILED,
# 10 'future' ones CANCELLED, 20 'keyed' ones of tenant t5 with keys key-1..key-20.
SEARCHES: dict[str, dict[str, Any]] = {
    "id (cold)": {"task_id": 12345},
    "id (done)": {"task_id": 250_000},
    "id (none)": {"task_id": 10**12},
    "key with its tenant": {"idempotency_key": "key-7", "tenant_id": "t5"},
    "key (default tenant)": {"idempotency_key": "key-7"},
    "type (cold)": {"task_type": "future"},
    "type (done)": {"task_type": "old"},
    "type (recent)": {"task_type": "recent"},
    "type (none)": {"task_type": "no_such_type"},
    "tenant": {"tenant_id": "t7"},
    "tenant (few, cold)": {"tenant_id": "t5"},
    "tenant (none)": {"tenant_id": "no_such_tenant"},
    **{f"status {s}": {"status": s} for s in STATUSES},
    "due range (done only)": {
        "due_from": NOW - timedelta(days=3, hours=-1),
        "due_until": NOW - timedelta(days=3, hours=-2),
    },
    "due range (cold, a day)": {
        "due_from": NOW + timedelta(days=30),
        "due_until": NOW + timedelta(days=31),
    },
    "due range (none)": {
        "due_from": NOW + timedelta(days=3000),
        "due_until": NOW + timedelta(days=3001),
    },
    "due from (far ahead)": {"due_from": NOW + timedelta(days=3000)},
    "due until (long ago)": {"due_until": NOW - timedelta(days=300)},
    "type + tenant": {"task_type": "old", "tenant_id": "t7"},
    "type + tenant (none)": {"task_type": "future", "tenant_id": "no_such_tenant"},
    "type + status": {"task_type": "recent", "status": "FAILED"},
    "type + status (none)": {"task_type": "future", "status": "FAILED"},
    "tenant + status": {"tenant_id": "t7", "status": "CANCELLED"},
    "tenant + status (done)": {"tenant_id": "t7", "status": "COMPLETED"},
    "type + due range": {
        "task_type": "old",
        "due_from": NOW - timedelta(days=3, hours=-1),
        "due_until": NOW - timedelta(days=3, hours=-2),
    },
    "tenant + due range": {
        "tenant_id": "t7",
        "due_from": NOW + timedelta(days=30),
        "due_until": NOW + timedelta(days=31),
    },
    "status + due range": {
        "status": "PENDING",
        "due_from": NOW + timedelta(days=30),
        "due_until": NOW + timedelta(days=31),
    },
    "id + type (mismatch)": {"task_id": 12345, "task_type": "old"},
    "key + status": {"idempotency_key": "key-7", "tenant_id": "t5", "status": "PENDING"},
    "all of them": {
        "task_type": "future",
        "tenant_id": "t7",
        "status": "PENDING",
        "due_from": NOW + timedelta(days=2),
        "due_until": NOW + timedelta(days=200),
    },
}

# What a search may read at most (shared buffers, hit or read): 50 rows from each tier and
# their indexes, and the 50 rows merged, fetched once more by primary key. Walking either
# big tier's primary key for a value it lacks reads thousands
# (test_the_budget_is_below_a_walk_of_either_big_tier).
SEARCH_BUFFERS = 700


def _scans(plan: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(n["Node Type"], n["Relation Name"]) for n in plan_nodes(plan) if "Relation Name" in n]


def _buffers(plan: list[dict[str, Any]]) -> int:
    """Buffers the scans of the big tiers read (their heaps and indexes). The hot tier is
    left out: it is small by design, but how small depends on when autovacuum last
    truncated it (a VACUUM's truncation yields to any lock request on the table), and its
    sequential scan, which reads every page, empty or not, would be counted too."""
    return sum(
        int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])
        for node in plan_nodes(plan)
        if is_big_tier(node.get("Relation Name", ""))
    )


def _reference(conn: psycopg.Connection, f: dict[str, Any]) -> list[int]:
    """The same search written plainly, one filter at a time, over pgsched.tasks."""
    where: list[sql.Composable] = []
    if f["task_id"] is not None:
        where.append(sql.SQL("id = {}").format(f["task_id"]))
    if f["idempotency_key"] is not None:
        where.append(
            sql.SQL(
                "id IN (SELECT task_id FROM pgsched.idempotency_keys"
                " WHERE tenant_id = {} AND idempotency_key = {})"
            ).format(f["tenant_id"] or "default", f["idempotency_key"])
        )
    for column, key in (("task_type", "task_type"), ("tenant_id", "tenant_id")):
        if f[key] is not None:
            where.append(sql.SQL("{} = {}").format(sql.Identifier(column), f[key]))
    if f["status"] is not None:
        where.append(sql.SQL("status::text = {}").format(f["status"]))
    if f["due_from"] is not None:
        where.append(sql.SQL("next_run_at >= {}").format(f["due_from"]))
    if f["due_until"] is not None:
        where.append(sql.SQL("next_run_at < {}").format(f["due_until"]))
    # Newest first; with a due range, earliest due first.
    ranged = f["due_from"] is not None or f["due_until"] is not None
    statement = sql.SQL(
        "SELECT id FROM pgsched.tasks WHERE {} ORDER BY {} id DESC LIMIT {}"
    ).format(sql.SQL(" AND ").join(where), sql.SQL("next_run_at," if ranged else ""), f["max_rows"])
    return [r[0] for r in conn.execute(statement)]


@pytest.mark.parametrize(("name", "params"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_no_page_reads_a_big_tier_sequentially(
    backlog: psycopg.Connection, empty_partitions: set[str], name: str, params: dict[str, Any]
) -> None:
    plan = explain(backlog, query(name), params)
    scans = _scans(plan)
    assert scans, "the plan reads no table"
    seq = [
        (node, rel)
        for node, rel in scans
        if node == "Seq Scan" and is_big_tier(rel) and rel not in empty_partitions
    ]
    assert seq == [], f"{name} reads {seq} sequentially"


@pytest.mark.parametrize("name", ["dashboard_throughput", "dashboard_lanes_recent"])
def test_the_recent_pages_read_the_last_hour_not_the_archive(
    backlog: psycopg.Connection, name: str
) -> None:
    # The finished tier's updated_at index is a BRIN since migration 0050: a block range
    # of the archive whose tasks finished two days ago must be skipped, not read. The
    # archive holds 100,000 of them (about 2,000 pages); the last hour, a few hundred.
    plan = explain(backlog, query(name), {}, analyze=True)
    finished = sum(
        int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])
        for node in plan_nodes(plan)
        if node.get("Relation Name", "").startswith("tasks_finished")
        or node.get("Index Name", "").startswith("tasks_finished")
    )
    assert finished <= 300, json.dumps(plan, indent=1)


@pytest.mark.parametrize("filters", SEARCHES.values(), ids=SEARCHES.keys())
def test_every_task_search_reads_an_index_range_of_the_big_tiers(
    backlog: psycopg.Connection, empty_partitions: set[str], filters: dict[str, Any]
) -> None:
    params = {**SEARCH, **filters}
    plan = explain(backlog, query("dashboard_task_search"), params, analyze=True)
    shown = json.dumps(plan, indent=1)
    seq = [
        (node, rel)
        for node, rel in _scans(plan)
        if node == "Seq Scan" and is_big_tier(rel) and rel not in empty_partitions
    ]
    assert seq == [], f"reads {seq} sequentially:\n{shown}"
    assert _buffers(plan) <= SEARCH_BUFFERS, (
        f"read {_buffers(plan)} buffers (at most {SEARCH_BUFFERS}):\n{shown}"
    )


@pytest.mark.parametrize("filters", SEARCHES.values(), ids=SEARCHES.keys())
def test_every_task_search_finds_what_a_plain_query_finds(
    backlog: psycopg.Connection, filters: dict[str, Any]
) -> None:
    params = {**SEARCH, **filters}
    found = [r[0] for r in backlog.execute(query("dashboard_task_search"), params)]
    assert found == _reference(backlog, params)


def test_the_searches_see_rows_of_every_tier(backlog: psycopg.Connection) -> None:
    """The searches above prove little unless some find rows, in every tier."""
    found = {
        name: backlog.execute(query("dashboard_task_search"), {**SEARCH, **f}).fetchall()
        for name, f in SEARCHES.items()
    }
    assert found["status PENDING"] and found["status COMPLETED"] and found["status PROCESSING"]
    assert found["status CANCELLED"] and found["status FAILED"]
    assert found["type (done)"] and found["due range (done only)"] and found["type + tenant"]
    assert len(found["key with its tenant"]) == 1
    assert found["type (none)"] == [] and found["tenant (none)"] == []


def test_the_budget_is_below_a_walk_of_either_big_tier(backlog: psycopg.Connection) -> None:
    """Reading a big tier's primary key backwards for a value it lacks costs far more than
    SEARCH_BUFFERS: the budget tells an index range from a walk."""
    for tier in BIG_TIERS:
        plan = explain(
            backlog,
            sql.SQL(
                "SELECT id FROM pgsched.{} WHERE last_error = 'no such error'"
                " ORDER BY id DESC LIMIT 50"
            ).format(sql.Identifier(tier)),
            analyze=True,
        )
        assert _buffers(plan) > 2 * SEARCH_BUFFERS, (tier, _buffers(plan))


def test_throughput_counts_each_minutes_completions(backlog: psycopg.Connection) -> None:
    """The chart's statement against a count made in Python, with the hour's completions
    spread over its minutes (and some just outside it), in a transaction rolled back."""
    with backlog.transaction(force_rollback=True):
        backlog.execute(
            "UPDATE pgsched.tasks SET updated_at = now() - (id % 67) * interval '1 minute'"
            " - interval '7 seconds' WHERE task_type = 'recent' AND status = 'COMPLETED'"
        )
        row = backlog.execute(
            "SELECT now(), array_agg(updated_at) FROM pgsched.tasks"
            " WHERE status = 'COMPLETED' AND updated_at > now() - interval '60 minutes'"
        ).fetchone()
        assert row is not None
        now, stamps = row
        chart = [r[:2] for r in backlog.execute(query("dashboard_throughput")).fetchall()]
    this_minute = now.replace(second=0, microsecond=0)
    minutes = [this_minute - timedelta(minutes=59 - k) for k in range(60)]
    counted = {m: 0 for m in minutes}
    for stamp in stamps:
        minute = stamp.replace(second=0, microsecond=0)
        if minute in counted:  # the hour ends at the start of the minute 59 minutes back
            counted[minute] += 1
    assert len({c for c in counted.values()}) > 1, "the completions must differ per minute"
    assert [(m, n) for m, n in chart] == list(counted.items())


# A count reads up to COUNT_CAP (10,000) matching rows: an index-only range of that many
# entries, with the heap of a tier whose visibility map is not set. Far below a walk of a
# big tier for a value it lacks (hundreds of thousands of rows here).
COUNT_BUFFERS = 3_000


@pytest.mark.parametrize("filters", SEARCHES.values(), ids=SEARCHES.keys())
def test_every_search_count_stops_at_the_cap_on_an_index_range(
    backlog: psycopg.Connection, empty_partitions: set[str], filters: dict[str, Any]
) -> None:
    params = {**SEARCH, **filters, "cap": 10_001}
    plan = explain(backlog, query("dashboard_task_count"), params, analyze=True)
    shown = json.dumps(plan, indent=1)
    assert _buffers(plan) <= COUNT_BUFFERS, (
        f"read {_buffers(plan)} buffers (at most {COUNT_BUFFERS}):\n{shown}"
    )
    counted = backlog.execute(query("dashboard_task_count"), params).fetchone()
    assert counted is not None
    reference = _reference(backlog, {**params, "max_rows": 10_001})
    assert counted[0] == len(reference)


@pytest.mark.parametrize(
    "filters",
    [{"task_type": "future"}, {"task_type": "old"}, {"due_from": NOW + timedelta(days=30)}],
    ids=["type (cold)", "type (done)", "due from (cold)"],
)
def test_search_pages_follow_on_by_keyset(
    backlog: psycopg.Connection, empty_partitions: set[str], filters: dict[str, Any]
) -> None:
    """The third page, reached by the cursor of the second, reads an index range as the
    first does, and is what a plain query's rows 101-150 are."""
    params = {**SEARCH, **filters}
    ranged = params["due_from"] is not None
    reference = _reference(backlog, {**params, "max_rows": 150})[100:]
    cursor_row = backlog.execute(
        "SELECT id, next_run_at FROM pgsched.tasks WHERE id = %s",
        (_reference(backlog, {**params, "max_rows": 100})[-1],),
    ).fetchone()
    assert cursor_row is not None
    if ranged:
        params.update(after_due=cursor_row[1], after_id=cursor_row[0])
    else:
        params.update(before_id=cursor_row[0])
    found = [r[0] for r in backlog.execute(query("dashboard_task_search"), params)]
    assert found == reference
    plan = explain(backlog, query("dashboard_task_search"), params, analyze=True)
    assert _buffers(plan) <= SEARCH_BUFFERS, json.dumps(plan, indent=1)
