"""The sweep leader's count of workflow transitions reads only the newest events.

task_events has no btree on id since migration 0050: its ids are read through a BRIN
index (a block range's lowest and highest id), which serves "the events after id N" but
cannot give the highest id. Seeded with 300,000 events in the archive and today's period,
ANALYZEd: the count after a recent id must not read a partition that holds rows
sequentially, and where the count starts is read from the id sequence, not from the
table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from pgsched.queries import query
from tests.support.query_plans import explain, plan_nodes, seeded_database

if TYPE_CHECKING:
    from tests.conftest import PgServer

pytestmark = pytest.mark.slow

EVENTS = 300_000


def _seed(conn: psycopg.Connection) -> None:
    # Written as the triggers write them: ids from the sequence, in time order, old ones in
    # the archive and the newest in today's period.
    conn.execute(
        "INSERT INTO pgsched.task_events (id, task_id, tenant_id, task_type, from_status,"
        " to_status, occurred_at, scheduled_for, attempt, detail)"
        " SELECT nextval('pgsched.task_events_id_seq'), g, 'tenant_' || g %% 7, 'noop',"
        " 'QUEUED', 'PROCESSING', now() - (%s - g) * interval '10 ms', now(), 1,"
        " CASE WHEN g %% 1000 = 0 THEN 'released: parent task ' || g END"
        " FROM generate_series(1, %s) AS g",
        (EVENTS, EVENTS),
    )
    # What autovacuum does to a table that only grows: the BRIN's full ranges summarized.
    conn.execute("VACUUM ANALYZE pgsched.task_events")


@pytest.fixture(scope="module")
def events(pg_server: PgServer) -> Iterator[psycopg.Connection]:
    with seeded_database(pg_server, "pgsched_event_count_plans", _seed) as conn:
        yield conn


def _one(conn: psycopg.Connection, statement: str | sql.SQL) -> int:
    row = conn.execute(statement).fetchone()
    assert row is not None
    return int(row[0])


def _partitions_with_rows(conn: psycopg.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_inherits AS i ON i.inhrelid = c.oid"
        " WHERE i.inhparent = 'pgsched.task_events'::regclass AND c.reltuples > 0"
    ).fetchall()
    return {r[0] for r in rows}


def test_where_the_count_starts_is_the_sequence_not_a_scan(events: psycopg.Connection) -> None:
    plan = explain(events, query("workflow_events_last"))
    relations = {n.get("Relation Name") for n in plan_nodes(plan)}
    assert relations == {"task_events_id_seq"}
    last = _one(events, query("workflow_events_last"))
    assert last == _one(events, "SELECT max(id) FROM pgsched.task_events")


def test_the_count_after_a_recent_id_reads_by_index(events: psycopg.Connection) -> None:
    last = _one(events, query("workflow_events_last"))
    after = last - 5_000
    with_rows = _partitions_with_rows(events)
    assert with_rows, "the seed left every partition empty"
    plan = explain(events, query("workflow_events_since"), {"after": after}, analyze=True)
    walked = [
        n["Relation Name"]
        for n in plan_nodes(plan)
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in with_rows
    ]
    assert walked == [], plan
    indexes = {str(n["Index Name"]) for n in plan_nodes(plan) if n.get("Index Name")}
    assert indexes and all(name.endswith("id_idx") for name in indexes), indexes
    options = events.execute(
        "SELECT array_agg(DISTINCT array_to_string(c.reloptions, ',')) FROM pg_class AS c"
        " JOIN pg_am AS a ON a.oid = c.relam"
        " WHERE c.relname LIKE 'task_events%%' AND a.amname = 'brin'"
    ).fetchone()[0]
    assert options == ["autosummarize=on"]
    # A block range's worth of rows (128 pages) around the boundary, not the table.
    top = plan[0]["Plan"]
    assert top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0) < 1_000
    row = events.execute(query("workflow_events_since"), {"after": after}).fetchone()
    assert row == (last, 5, 0, 0)
