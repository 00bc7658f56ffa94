"""`pgsched migrate --distributed` on a Citus coordinator: not built yet, so refused in one
line naming what is missing (exit 2), with nothing changed; `pgsched migrate` then installs
single-node mode on the same database."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.citus_cluster import CitusCluster, dbname_of
from tests.support.worker_helpers import run_cli


@pytest.fixture
def bare_dsn(citus: CitusCluster) -> Iterator[str]:
    """A database on the cluster with Citus and the nodes, pgsched not installed."""
    dsn = citus.new_database("pgsched_bare")
    yield dsn
    citus.drop_database(dbname_of(dsn))


def pgsched_schema(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('pgsched') IS NOT NULL").fetchone()
    assert row is not None
    return bool(row[0])


def test_migrate_distributed_is_refused_and_changes_nothing(bare_dsn: str) -> None:
    env = {**os.environ, "PGSCHED_DSN": bare_dsn}
    refused = run_cli(env, "migrate", "--distributed")
    assert refused.returncode == 2, refused
    assert "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: --distributed: not yet supported:"), line
    assert "docs/scaling.md" in line
    assert refused.stdout == ""
    assert not pgsched_schema(bare_dsn)

    installed = run_cli(env, "migrate")
    assert installed.returncode == 0, installed
    assert pgsched_schema(bare_dsn)
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        distributed = conn.execute(
            "SELECT count(*) FROM citus_tables WHERE table_name::text LIKE 'pgsched.%'"
        ).fetchone()
    assert distributed == (0,)
