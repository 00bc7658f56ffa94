"""What Citus answers to each step of the distributed design (docs/scaling.md), tried for
real on the cluster: the refusals that shape the design, and a prototype of the
trigger-free audit on distributed copies of pgsched's tables (tests/citus/distributed_probe.sql).

Nothing here changes pgsched's own tables (single-node mode on the coordinator is what
test_coordinator_flows.py runs); the copies live in a schema `probe` of one database for
the module, each test with tenants of its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from tests.support.citus_cluster import CitusCluster, CitusNode, dbname_of
from tests.support.worker_helpers import run_cli

PROBE_SQL = Path(__file__).with_name("distributed_probe.sql")

# Citus draws the ids a worker node makes from a bigint sequence from that node's own
# range, above 2**48 (the coordinator's are the sequence's plain values).
NODE_RANGE_START = 2**48


@pytest.fixture(scope="module")
def probe_dsn(citus: CitusCluster) -> Iterator[str]:
    dsn = citus.new_database("pgsched_probe")
    done = run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate", timeout=300)
    assert done.returncode == 0, f"pgsched migrate failed:\n{done.stdout}\n{done.stderr}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PROBE_SQL.read_text())
    yield dsn
    citus.drop_database(dbname_of(dsn))


@pytest.fixture
def pconn(probe_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(probe_dsn, autocommit=True) as conn:
        yield conn


def queue_tasks(conn: psycopg.Connection, tenant: str, n: int) -> list[int]:
    rows = conn.execute(
        "INSERT INTO probe.tasks (tenant_id, task_type, next_run_at, lane, status)"
        " SELECT %s, 'probe', now() - interval '1 second', 'NORMAL', 'QUEUED'"
        " FROM generate_series(1, %s) RETURNING id",
        (tenant, n),
    ).fetchall()
    return sorted(r[0] for r in rows)


def shard_port(conn: psycopg.Connection, tenant: str) -> int:
    row = conn.execute(
        "SELECT nodeport FROM citus_shards WHERE table_name = 'probe.tasks'::regclass"
        " AND shardid = get_shard_id_for_distribution_column('probe.tasks', %s::text)",
        (tenant,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim(conn: psycopg.Connection, tenant: str, n: int, worker: str = "w1") -> list[int]:
    rows = conn.execute(
        "SELECT * FROM probe.claim(%s, 'NORMAL', %s, %s, '30 seconds')", (tenant, n, worker)
    ).fetchall()
    return sorted(r[0] for r in rows)


def node_for(citus: CitusCluster, port: int) -> CitusNode:
    return next(n for n in citus.nodes if n.port == port)


# -- what pgsched's own tables meet ---------------------------------------------------------


def test_migrate_on_the_coordinator_leaves_every_pgsched_table_local(
    citus: CitusCluster, pconn: psycopg.Connection
) -> None:
    nodes = pconn.execute("SELECT count(*) FROM citus_get_active_worker_nodes()").fetchone()
    assert nodes == (len(citus.workers),)
    in_citus = pconn.execute(
        "SELECT table_name::text FROM citus_tables WHERE table_name::text LIKE 'pgsched.%'"
    ).fetchall()
    assert in_citus == []


def test_tasks_cannot_be_distributed_with_its_statement_triggers(
    pconn: psycopg.Connection,
) -> None:
    with pytest.raises(psycopg.Error, match='"tasks" because it has triggers'):
        pconn.execute("SELECT create_distributed_table('pgsched.tasks', 'tenant_id')")
    assert pconn.execute(
        "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'pgsched.tasks'::regclass"
    ).fetchone() == (0,)


def test_keys_must_carry_the_tenant_and_partitions_stay_one_level(
    pconn: psycopg.Connection,
) -> None:
    pconn.execute("DROP SCHEMA IF EXISTS refused CASCADE; CREATE SCHEMA refused")
    pconn.execute(
        "CREATE TABLE refused.tasks (LIKE pgsched.tasks INCLUDING DEFAULTS)"
        " PARTITION BY LIST (status);"
        " CREATE TABLE refused.tasks_hot PARTITION OF refused.tasks"
        " FOR VALUES IN ('QUEUED', 'PROCESSING');"
        " ALTER TABLE refused.tasks ADD PRIMARY KEY (id, status, updated_at)"
    )
    # pgsched's primary key (id, status, updated_at) does not hold the tenant.
    with pytest.raises(psycopg.Error, match="do not include the partition column"):
        pconn.execute("SELECT create_distributed_table('refused.tasks', 'tenant_id')")
    pconn.execute(
        "ALTER TABLE refused.tasks DROP CONSTRAINT tasks_pkey;"
        " ALTER TABLE refused.tasks ADD PRIMARY KEY (tenant_id, id, status, updated_at);"
        # tasks_finished is partitioned again by time in pgsched: a second level.
        " CREATE TABLE refused.tasks_finished PARTITION OF refused.tasks"
        " FOR VALUES IN ('COMPLETED', 'CANCELLED') PARTITION BY RANGE (updated_at);"
        " CREATE TABLE refused.tasks_finished_default PARTITION OF refused.tasks_finished"
        " DEFAULT"
    )
    with pytest.raises(psycopg.Error, match="multi-level partitioned tables is not supported"):
        pconn.execute("SELECT create_distributed_table('refused.tasks', 'tenant_id')")
    pconn.execute("DROP SCHEMA refused CASCADE")


def test_a_statement_trigger_with_transition_tables_cannot_run_on_the_shards(
    pconn: psycopg.Connection,
) -> None:
    pconn.execute(
        "DROP SCHEMA IF EXISTS trig CASCADE; CREATE SCHEMA trig;"
        " CREATE TABLE trig.t (tenant_id text, id bigint, status text,"
        " PRIMARY KEY (tenant_id, id));"
        " CREATE TABLE trig.ev (tenant_id text, task_id bigint, status text);"
        " SELECT create_distributed_table('trig.t', 'tenant_id');"
        " SELECT create_distributed_table('trig.ev', 'tenant_id', colocate_with => 'trig.t');"
        " CREATE FUNCTION trig.record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO trig.ev SELECT n.tenant_id, n.id, n.status FROM new_rows AS n;"
        " RETURN NULL; END $$;"
        " INSERT INTO trig.t VALUES ('a', 1, 'QUEUED')"
    )
    create = (
        "CREATE TRIGGER t_record AFTER UPDATE ON trig.t REFERENCING NEW TABLE AS new_rows"
        " FOR EACH STATEMENT EXECUTE FUNCTION trig.record()"
    )
    with pytest.raises(psycopg.Error, match="triggers are not supported on distributed tables"):
        pconn.execute(create)
    # Citus's escape hatch lets the trigger be made; it then fails on the shard: the
    # transition table is not there for the statement the trigger runs.
    pconn.execute("SET citus.enable_unsafe_triggers = on")
    pconn.execute(create)
    with pytest.raises(psycopg.Error, match='could not find named tuplestore "new_rows"'):
        pconn.execute("UPDATE trig.t SET status = 'PROCESSING' WHERE tenant_id = 'a'")
    assert pconn.execute("SELECT status FROM trig.t").fetchall() == [("QUEUED",)]
    pconn.execute("RESET citus.enable_unsafe_triggers; DROP SCHEMA trig CASCADE")


# -- the distributed copies and the trigger-free audit ----------------------------------


def test_the_copies_are_distributed_by_tenant_colocated_and_spread_over_both_nodes(
    citus: CitusCluster, pconn: psycopg.Connection
) -> None:
    placed: dict[str, str] = dict(
        pconn.execute(
            "SELECT table_name::text, citus_table_type || ':' || distribution_column"
            " || ':' || colocation_id FROM citus_tables WHERE table_name::text LIKE 'probe.%'"
        ).fetchall()
    )
    colocation = placed["probe.tasks"].rsplit(":", 1)[1]
    for table in ("probe.tasks", "probe.task_events", "probe.idempotency_keys"):
        assert placed[table] == f"distributed:tenant_id:{colocation}", table
    assert placed["probe.completed_work"] == f"distributed:tenant_id:{colocation}"
    assert placed["probe.tenants"].startswith("reference:")
    assert placed["probe.settings"].startswith("reference:")
    ports = {
        r[0]
        for r in pconn.execute(
            "SELECT DISTINCT nodeport FROM citus_shards WHERE table_name = 'probe.tasks'::regclass"
        ).fetchall()
    }
    assert ports == {w.port for w in citus.workers}


def test_a_claim_runs_on_the_shards_node_and_writes_its_events_there(
    citus: CitusCluster, pconn: psycopg.Connection
) -> None:
    ids = queue_tasks(pconn, "claim-a", 4)
    port = shard_port(pconn, "claim-a")
    assert port in {w.port for w in citus.workers}
    claimed = claim(pconn, "claim-a", 2)
    assert claimed == ids[:2]
    events = pconn.execute(
        "SELECT task_id, from_status::text, to_status::text, attempt, worker, detail, id"
        " FROM probe.task_events WHERE tenant_id = 'claim-a' ORDER BY task_id"
    ).fetchall()
    assert [e[:6] for e in events] == [
        (i, "QUEUED", "PROCESSING", 1, "w1", f"port {port}") for i in claimed
    ]
    # Written on the worker node: ids from that node's range of the sequence.
    assert all(e[6] > NODE_RANGE_START for e in events)
    # The rows say the same as the events, on the node.
    with node_for(citus, port).connect(dbname_of(pconn.info.dsn)) as node:
        on_node = node.execute(
            "SELECT id, status::text, locked_by FROM probe.tasks WHERE tenant_id = 'claim-a'"
            " AND status = 'PROCESSING' ORDER BY id"
        ).fetchall()
    assert on_node == [(i, "PROCESSING", "w1") for i in claimed]


def test_a_claim_skips_rows_another_session_holds(
    probe_dsn: str, pconn: psycopg.Connection
) -> None:
    ids = queue_tasks(pconn, "claim-b", 3)
    with psycopg.connect(probe_dsn) as holder:
        # A router query: one shard, FOR UPDATE taken there.
        held = holder.execute(
            "SELECT id FROM probe.tasks WHERE tenant_id = 'claim-b' AND status = 'QUEUED'"
            " ORDER BY id LIMIT 1 FOR UPDATE"
        ).fetchone()
        assert held == (ids[0],)
        assert claim(pconn, "claim-b", 3) == ids[1:]
        holder.rollback()
    assert claim(pconn, "claim-b", 3) == ids[:1]


def test_a_worker_pass_claims_tenant_by_tenant_over_every_node(
    citus: CitusCluster, pconn: psycopg.Connection
) -> None:
    """The design's claim loop: a lock-free read of the tenants with due work (across
    every shard), then a router claim per tenant in turn, a share of the batch each."""
    tenants = [f"pass-{i}" for i in range(8)]
    for tenant in tenants:
        queue_tasks(pconn, tenant, 3)
    assert {shard_port(pconn, t) for t in tenants} == {w.port for w in citus.workers}
    due = pconn.execute(
        "SELECT tenant_id, count(*) FROM probe.tasks WHERE status = 'QUEUED'"
        " AND lane = 'NORMAL' AND next_run_at <= now() AND tenant_id LIKE 'pass-%'"
        " GROUP BY tenant_id ORDER BY tenant_id"
    ).fetchall()
    assert due == [(t, 3) for t in tenants]
    # One pass: one task from each tenant, whichever node holds it.
    for tenant, _ in due:
        assert len(claim(pconn, tenant, 1, worker="pass")) == 1
    per_tenant = pconn.execute(
        "SELECT tenant_id, count(*) FILTER (WHERE status = 'PROCESSING'),"
        " count(*) FILTER (WHERE status = 'QUEUED') FROM probe.tasks"
        " WHERE tenant_id LIKE 'pass-%' GROUP BY tenant_id ORDER BY tenant_id"
    ).fetchall()
    assert per_tenant == [(t, 1, 2) for t in tenants]
    written_on = {
        r[0]
        for r in pconn.execute(
            "SELECT DISTINCT detail FROM probe.task_events WHERE worker = 'pass'"
        ).fetchall()
    }
    assert written_on == {f"port {w.port}" for w in citus.workers}


def test_a_finish_and_its_event_commit_or_roll_back_together(
    pconn: psycopg.Connection,
) -> None:
    [task_id] = queue_tasks(pconn, "finish-a", 1)
    assert claim(pconn, "finish-a", 1) == [task_id]

    def story() -> list[tuple[str, str]]:
        return pconn.execute(
            "SELECT from_status::text, to_status::text FROM probe.task_events"
            " WHERE tenant_id = 'finish-a' ORDER BY occurred_at, id"
        ).fetchall()

    with pytest.raises(psycopg.Error, match="failing after the event was written"):
        pconn.execute("SELECT probe.finish('finish-a', %s, 'w1', true)", (task_id,))
    assert pconn.execute(
        "SELECT status::text FROM probe.tasks WHERE tenant_id = 'finish-a'"
    ).fetchall() == [("PROCESSING",)]
    assert story() == [("QUEUED", "PROCESSING")]

    done = pconn.execute("SELECT probe.finish('finish-a', %s, 'w1', false)", (task_id,))
    assert done.fetchone() == ("completed",)
    # The row moved partition (tasks_hot to tasks_finished) on its shard: read on the
    # node, its table is that partition's shard (probe.tasks_finished_<shard id>).
    [(status, table)] = pconn.execute(
        "SELECT status::text, tableoid::regclass::text FROM probe.tasks"
        " WHERE tenant_id = 'finish-a'"
    ).fetchall()
    assert status == "COMPLETED"
    assert table.startswith("probe.tasks_finished_"), table
    assert story() == [("QUEUED", "PROCESSING"), ("PROCESSING", "COMPLETED")]
    # A second report is stale and writes nothing.
    again = pconn.execute("SELECT probe.finish('finish-a', %s, 'w1', false)", (task_id,))
    assert again.fetchone() == ("stale",)
    assert len(story()) == 2


def test_row_locks_across_shards_and_volatile_updates_are_refused(
    pconn: psycopg.Connection,
) -> None:
    queue_tasks(pconn, "refuse-a", 1)
    queue_tasks(pconn, "refuse-b", 1)
    # Today's claim walks every tenant of a lane in one statement: across shards, no.
    with pytest.raises(psycopg.Error, match="could not run distributed query with FOR UPDATE"):
        pconn.execute(
            "SELECT id FROM probe.tasks WHERE status = 'QUEUED' ORDER BY id LIMIT 2"
            " FOR UPDATE SKIP LOCKED"
        )
    # Today's claim draws each lease token with gen_random_uuid() in its UPDATE.
    with pytest.raises(psycopg.Error, match="must not be VOLATILE"):
        pconn.execute(
            "UPDATE probe.tasks SET status = 'PROCESSING', lease_token = gen_random_uuid()"
            " WHERE tenant_id = 'refuse-a'"
        )


def test_a_notify_from_a_delegated_function_is_heard_on_its_node_only(
    citus: CitusCluster, pconn: psycopg.Connection
) -> None:
    pconn.execute(
        "CREATE OR REPLACE FUNCTION probe.wake(tenant text) RETURNS integer LANGUAGE plpgsql"
        " AS $$ BEGIN PERFORM pg_notify('probe_wake', tenant);"
        " RETURN inet_server_port(); END $$;"
        " SELECT create_distributed_function('probe.wake(text)',"
        " distribution_arg_name => 'tenant', colocate_with => 'probe.tasks')"
    )
    dbname = dbname_of(pconn.info.dsn)
    port = shard_port(pconn, "wake-a")
    with (
        psycopg.connect(pconn.info.dsn, autocommit=True) as on_coordinator,
        node_for(citus, port).connect(dbname) as on_node,
    ):
        on_coordinator.execute("LISTEN probe_wake")
        on_node.execute("LISTEN probe_wake")
        # Run whole on the node of the tenant's shard, the notification sent there.
        assert pconn.execute("SELECT probe.wake('wake-a')").fetchone() == (port,)
        heard = [n.payload for n in on_node.notifies(timeout=10, stop_after=1)]
        assert heard == ["wake-a"]
        time.sleep(0.5)
        assert [n.payload for n in on_coordinator.notifies(timeout=1)] == []


def test_the_sweep_fence_on_the_coordinator_holds_with_writes_on_every_shard(
    probe_dsn: str, pconn: psycopg.Connection
) -> None:
    queue_tasks(pconn, "fence-a", 1)
    queue_tasks(pconn, "fence-b", 1)
    with psycopg.connect(probe_dsn) as sweeper:
        sweeper.execute("SELECT id FROM pgsched.sweep_leader FOR SHARE")
        sweeper.execute(
            "UPDATE probe.tasks SET priority = 6 WHERE tenant_id IN ('fence-a', 'fence-b')"
        )
        # A leader change (FOR UPDATE on the row) must wait for the sweep's transaction.
        with pytest.raises(errors.LockNotAvailable):
            pconn.execute("SELECT id FROM pgsched.sweep_leader FOR UPDATE NOWAIT")
        sweeper.rollback()
    priorities = pconn.execute(
        "SELECT DISTINCT priority FROM probe.tasks WHERE tenant_id IN ('fence-a', 'fence-b')"
    ).fetchall()
    assert priorities == [(5,)]
