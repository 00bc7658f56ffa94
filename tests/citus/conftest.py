"""The Citus tier: a coordinator and two worker nodes (tests/support/citus_cluster.py),
started once per session, and a database of its own per test, on every node, with Citus
created in it and the workers registered.

The fixtures have the names of tests/conftest.py's, pointed at the coordinator, so a flow
written for one node runs here unchanged:

``db_dsn``, ``db_env``, ``conn``, ``connect``, ``workers``
    as in tests/conftest.py, for this test's database on the coordinator, migrated with
    ``pgsched migrate`` (run as a user runs it).
``dist_dsn``, ``dconn``, ``dworkers``
    A database distributed by ``pgsched migrate --distributed`` (run as a user runs it),
    a bare autocommit connection to it, and real ``pgsched worker`` processes against it.
``citus`` (session)
    The `CitusCluster`: ``coordinator``, ``workers`` (nodes with ``port``, ``connect``,
    ``stop_server``, ``start_server``).

Where Citus is not installed every test here is skipped, naming how to install it, unless
``PGSCHED_REQUIRE_CITUS=1`` (CI sets it): then the tier fails instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support.citus_cluster import CitusCluster, citus_missing, dbname_of
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED, Workers, run_cli, running_workers

REQUIRE = "PGSCHED_REQUIRE_CITUS"


def _required() -> bool:
    return os.environ.get(REQUIRE, "") not in ("", "0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = citus_missing()
    for item in items:
        if "tests/citus/" not in str(item.path).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.citus)
        if missing and not _required():
            item.add_marker(pytest.mark.skip(reason=missing))


@pytest.fixture(scope="session")
def citus() -> Iterator[CitusCluster]:
    missing = citus_missing()
    if missing:
        pytest.fail(f"{REQUIRE} is set and {missing}", pytrace=False)
    cluster = CitusCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def db_dsn(citus: CitusCluster) -> Iterator[str]:
    """This test's database on the cluster, migrated by `pgsched migrate` on the
    coordinator."""
    dsn = citus.new_database()
    env = {**os.environ, "PGSCHED_DSN": dsn}
    done = subprocess.run(
        [PGSCHED, "migrate"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"pgsched migrate failed:\n{done.stdout}\n{done.stderr}"
    yield dsn
    citus.drop_database(dbname_of(dsn))


@pytest.fixture
def dist_dsn(citus: CitusCluster) -> Iterator[str]:
    """This test's database, distributed by `pgsched migrate --distributed`."""
    dsn = citus.new_database("pgsched_dist")
    done = run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate", "--distributed")
    assert done.returncode == 0, done
    yield dsn
    citus.drop_database(dbname_of(dsn))


@pytest.fixture
def dconn(dist_dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dist_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def dworkers(dist_dsn: str, tmp_path: Path) -> Iterator[Workers]:
    with running_workers({**os.environ, "PGSCHED_DSN": dist_dsn}, tmp_path) as started:
        yield started


@pytest.fixture
def db_env(db_dsn: str) -> dict[str, str]:
    parts = conninfo_to_dict(db_dsn)
    env = dict(os.environ)
    env.update(
        PGSCHED_DSN=db_dsn,
        PGHOST=str(parts["host"]),
        PGPORT=str(parts["port"]),
        PGUSER=str(parts["user"]),
        PGDATABASE=str(parts["dbname"]),
    )
    return env


@pytest.fixture
def connect(db_dsn: str) -> Iterator[Callable[..., psycopg.Connection]]:
    opened: list[psycopg.Connection] = []

    def _connect(*, autocommit: bool = True) -> psycopg.Connection:
        connection = psycopg.connect(db_dsn, autocommit=autocommit)
        opened.append(connection)
        return connection

    yield _connect
    for connection in opened:
        connection.close()


@pytest.fixture
def conn(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    return connect(autocommit=True)


@pytest.fixture
def workers(db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection) -> Iterator[Any]:
    from tests.support.worker_helpers import create_test_tables, running_workers

    create_test_tables(conn)
    with running_workers(db_env, tmp_path) as started:
        yield started
