"""`pgsched migrate --distributed` on a Citus coordinator, run as a user runs it: the tables
placed as `pgsched.distribution_placement()` says (by tenant, colocated; reference; kept on
the coordinator), the keys widened with tenant_id, tasks_finished one table, the audit
written by the functions; refused, with nothing changed, where Citus or its worker nodes
are missing; scheduling then works from plain SQL and from Python, each row on its
tenant's node (workers and the sweeper run there: test_distributed_worker.py); a worker
or sweeper given the Redis hot tier refuses to start, naming why."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import errors

from pgsched import App
from tests.support.citus_cluster import CitusCluster, dbname_of
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED, run_cli

NOT_YET = "Not supported on a distributed database yet: the Redis hot tier, task limits"


@pytest.fixture
def bare_dsn(citus: CitusCluster) -> Iterator[str]:
    """A database on the cluster with Citus and the nodes, pgsched not installed."""
    dsn = citus.new_database("pgsched_bare")
    yield dsn
    citus.drop_database(dbname_of(dsn))


@pytest.fixture
def distributed_dsn(bare_dsn: str) -> str:
    done = run_cli({**os.environ, "PGSCHED_DSN": bare_dsn}, "migrate", "--distributed")
    assert done.returncode == 0, done
    return bare_dsn


def pgsched_schema(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('pgsched') IS NOT NULL").fetchone()
    assert row is not None
    return bool(row[0])


def placements(conn: psycopg.Connection) -> dict[str, str]:
    """Each of pgsched's tables (not partitions): 'distributed', 'reference' or
    'coordinator', as Citus's metadata says."""
    rows = conn.execute(
        "SELECT c.relname::text, coalesce(t.citus_table_type, 'coordinator')"
        "  FROM pg_class AS c"
        "  LEFT JOIN citus_tables AS t ON t.table_name = c.oid::regclass"
        " WHERE c.relnamespace = 'pgsched'::regnamespace AND c.relkind IN ('r', 'p')"
        "   AND NOT c.relispartition"
    ).fetchall()
    return {str(name): str(placement) for name, placement in rows}


def test_migrate_distributed_places_every_table_as_the_design_says(bare_dsn: str) -> None:
    env = {**os.environ, "PGSCHED_DSN": bare_dsn}
    done = run_cli(env, "migrate", "--distributed")
    assert done.returncode == 0, done
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("applied 0033"), lines
    assert lines[1] == "distributed: tables placed by tenant over the Citus worker nodes"
    assert NOT_YET in lines[2]

    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        designed: dict[str, str] = dict(
            conn.execute(
                "SELECT table_name, placement FROM pgsched.distribution_placement()"
            ).fetchall()
        )
        assert placements(conn) == designed
        assert designed["tasks"] == "distributed" and designed["tenants"] == "reference"
        # Every distributed table is split by tenant_id and in one colocation group.
        groups = conn.execute(
            "SELECT DISTINCT distribution_column, colocation_id FROM citus_tables"
            " WHERE citus_table_type = 'distributed' AND table_name::text LIKE 'pgsched.%'"
        ).fetchall()
        assert len(groups) == 1 and groups[0][0] == "tenant_id", groups
        # Shards on both worker nodes.
        ports = conn.execute(
            "SELECT count(DISTINCT nodeport) FROM citus_shards"
            " WHERE table_name = 'pgsched.tasks'::regclass"
        ).fetchone()
        assert ports == (2,)
        keys: dict[str, str] = dict(
            conn.execute(
                "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conname IN ('tasks_pkey', 'task_events_pkey')"
                " AND conrelid IN ('pgsched.tasks'::regclass, 'pgsched.task_events'::regclass)"
            ).fetchall()
        )
        assert keys == {
            "pgsched.tasks": "PRIMARY KEY (tenant_id, id, status, updated_at)",
            "pgsched.task_events": "PRIMARY KEY (tenant_id, id, occurred_at)",
        }
        # tasks_finished is one table with its own indexes under their names.
        finished = conn.execute(
            "SELECT c.relkind::text, array_agg(i.relname::text ORDER BY i.relname)"
            "  FROM pg_class AS c JOIN pg_index AS x ON x.indrelid = c.oid"
            "  JOIN pg_class AS i ON i.oid = x.indexrelid"
            " WHERE c.oid = 'pgsched.tasks_finished'::regclass GROUP BY c.relkind"
        ).fetchone()
        assert finished is not None and finished[0] == "r"
        own = {"tasks_finished_pkey", "tasks_finished_tenant_idx", "tasks_finished_type_idx"}
        assert own <= set(finished[1])
        assert conn.execute("SELECT audit_writer FROM pgsched.settings").fetchone() == (
            "functions",
        )
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgsched.tasks'::regclass"
            " AND NOT tgisinternal"
        ).fetchone()
        assert triggers == (0,)
        assert conn.execute("SELECT pgsched.is_distributed()").fetchone() == (True,)
        # Tenant readers are not supported: no policy, and the readers lost the tables.
        assert conn.execute("SELECT count(*) FROM pg_policy").fetchone() == (0,)
        readable = conn.execute(
            "SELECT has_table_privilege('pgsched_tenant_reader', 'pgsched.tasks', 'SELECT')"
        ).fetchone()
        assert readable == (False,)

    again = run_cli(env, "migrate", "--distributed")
    assert again.returncode == 0, again
    assert again.stdout.splitlines()[:2] == [
        "up to date at schema version " + lines[0].rsplit(" ", 1)[1],
        "already distributed: tables placed by tenant over the Citus worker nodes",
    ]
    # A plain migrate of a distributed database is fine too, and so is every code file of
    # sql/code/ applied again (as after a new numbered migration): each must leave the
    # distributed tables alone (Citus refuses even DROP TRIGGER IF EXISTS on one).
    assert run_cli(env, "migrate").returncode == 0
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgsched.schema_code SET checksum = 'changed'")
    again_all = run_cli(env, "migrate")
    assert again_all.returncode == 0, again_all
    assert again_all.stdout.startswith("applied sql/code/ transitions, distribution"), again_all
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgsched.distributed_mode()").fetchone() == (True,)


def test_migrate_distributed_keeps_the_rows_of_a_single_node_install(bare_dsn: str) -> None:
    env = {**os.environ, "PGSCHED_DSN": bare_dsn}
    assert run_cli(env, "migrate").returncode == 0
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        for tenant in ("acme", "globex"):
            conn.execute(
                "SELECT pgsched.schedule_task('report', tenant_id => %s, idempotency_key => 'k')",
                (tenant,),
            )
            conn.execute(
                "SELECT pgsched.schedule_task('later', tenant_id => %s,"
                " run_at => now() + interval '3 days')",
                (tenant,),
            )
        # Finished rows, in tasks_finished's time periods (the trigger checks only due times).
        conn.execute(
            "INSERT INTO pgsched.tasks (id, tenant_id, task_type, next_run_at, lane, status)"
            " SELECT nextval('pgsched.task_id_seq'), t, 'old', now() - interval '1 hour',"
            " 'NORMAL', 'COMPLETED' FROM unnest(ARRAY['acme', 'globex']) AS t"
        )
        before = conn.execute(
            "SELECT tenant_id, task_type, status::text FROM pgsched.tasks ORDER BY 1, 2"
        ).fetchall()

    assert run_cli(env, "migrate", "--distributed").returncode == 0
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        after = conn.execute(
            "SELECT tenant_id, task_type, status::text FROM pgsched.tasks ORDER BY 1, 2"
        ).fetchall()
        assert after == before
        assert [r[2] for r in after].count("COMPLETED") == 2
        # The key still holds, now on the tenant's shard.
        again = conn.execute(
            "SELECT pgsched.schedule_task('report', tenant_id => 'acme', idempotency_key => 'k')"
        ).fetchone()
        first = conn.execute(
            "SELECT id FROM pgsched.tasks WHERE tenant_id = 'acme' AND task_type = 'report'"
        ).fetchone()
        assert again == first


def test_migrate_distributed_without_worker_nodes_is_refused_and_changes_nothing(
    citus: CitusCluster,
) -> None:
    dsn = citus.new_database("pgsched_nonodes", register_nodes=False)
    try:
        refused = run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate", "--distributed")
        assert refused.returncode == 2, refused
        assert "Traceback" not in refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error: --distributed: no worker node is registered"), line
        assert "citus_add_node" in line and line.endswith("Nothing was changed.")
        assert refused.stdout == ""
        assert not pgsched_schema(dsn)
    finally:
        citus.drop_database(dbname_of(dsn))


def test_migrate_distributed_without_citus_is_refused_and_changes_nothing(
    citus: CitusCluster,
) -> None:
    name = f"pgsched_nocitus_{os.getpid()}"
    with citus.coordinator.connect() as admin:
        admin.execute(f"CREATE DATABASE {name}")
    dsn = citus.coordinator.dsn(name)
    try:
        refused = run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate", "--distributed")
        assert refused.returncode == 2, refused
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error: --distributed: the citus extension is not in this"), line
        assert "CREATE EXTENSION citus" in line
        assert not pgsched_schema(dsn)
        # The SQL function refuses too, for a caller that skips the CLI.
        assert run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate").returncode == 0
        with (
            psycopg.connect(dsn, autocommit=True) as conn,
            pytest.raises(errors.ObjectNotInPrerequisiteState, match="no Citus worker node"),
        ):
            conn.execute("SELECT pgsched.distribute()")
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT pgsched.is_distributed()").fetchone() == (False,)
            assert conn.execute("SELECT audit_writer FROM pgsched.settings").fetchone() == (
                "trigger",
            )
    finally:
        citus.drop_database(name)


def test_scheduling_works_from_sql_and_python_each_row_on_its_tenants_node(
    citus: CitusCluster, distributed_dsn: str
) -> None:
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        first = conn.execute(
            "SELECT pgsched.schedule_task('send', '{\"n\": 1}', tenant_id => 'acme',"
            " idempotency_key => 'order-1')"
        ).fetchone()
        second = conn.execute(
            "SELECT pgsched.schedule_task('send', '{\"n\": 2}', tenant_id => 'acme',"
            " idempotency_key => 'order-1')"
        ).fetchone()
        assert first == second
        # The same key in another tenant is another task.
        other = conn.execute(
            "SELECT pgsched.schedule_task('send', tenant_id => 'globex',"
            " idempotency_key => 'order-1')"
        ).fetchone()
        assert other != first
        batch = conn.execute(
            "SELECT task_id, created FROM pgsched.schedule_tasks(ARRAY['a', 'b', 'c'],"
            " run_ats => ARRAY[now(), now() + interval '3 days', now()],"
            " tenant_ids => ARRAY['t1', 't2', 't3'])"
        ).fetchall()
        assert [created for _, created in batch] == [True, True, True]
        with pytest.raises(errors.InvalidParameterValue, match="out of range"):
            conn.execute(
                "SELECT pgsched.schedule_task('x', tenant_id => 'acme',"
                " run_at => '10000-01-01 00:00:00+00')"
            )
        tiers = conn.execute(
            "SELECT tenant_id, status::text FROM pgsched.tasks WHERE task_type IN ('a', 'b', 'c')"
            " ORDER BY tenant_id"
        ).fetchall()
        assert tiers == [("t1", "QUEUED"), ("t2", "PENDING"), ("t3", "QUEUED")]
        port = conn.execute(
            "SELECT nodeport FROM citus_shards WHERE table_name = 'pgsched.tasks'::regclass"
            " AND shardid = get_shard_id_for_distribution_column('pgsched.tasks', 'acme'::text)"
        ).fetchone()
    assert port is not None
    node = next(w for w in citus.workers if w.port == port[0])
    with node.connect(dbname_of(distributed_dsn)) as on_node:
        held = on_node.execute(
            "SELECT id, payload FROM pgsched.tasks WHERE tenant_id = 'acme'"
        ).fetchall()
    assert held == [(first[0] if first else None, {"n": 1})]

    app = App(distributed_dsn)
    keyed = app.schedule("send", {"n": 3}, tenant_id="acme", idempotency_key="order-1")
    assert first is not None and keyed == first[0]
    fresh = app.schedule("send", {"n": 4}, tenant_id="initech")
    with psycopg.connect(distributed_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT tenant_id, status::text FROM pgsched.tasks WHERE id = %s", (fresh,)
        ).fetchone()
    assert row == ("initech", "QUEUED")


@pytest.mark.parametrize("process", ["worker", "sweeper"])
def test_the_redis_hot_tier_is_refused_on_a_distributed_database(
    distributed_dsn: str, process: str
) -> None:
    # Refused before Redis is reached: nothing listens on this port.
    app = ["--app", "tests.apps.distributed_app:app"] if process == "worker" else []
    done = subprocess.run(
        [PGSCHED, process, *app, "--redis", "redis://127.0.0.1:9/0"],
        cwd=REPO_ROOT,
        env={**os.environ, "PGSCHED_DSN": distributed_dsn},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert (
        f"error: {process} cannot run on this database: the Redis hot tier is not supported"
        " on a distributed database yet: start it without --redis" in done.stderr
    ), done.stderr
