"""The pytest plugin: a migrated throwaway database per test on your Postgres, or a
transaction rolled back at the end of the test.

Enabled by a line in your `conftest.py` (`pytest_plugins = ["pgsched.testing"]`), or
`pytest -p pgsched.testing`. The server: `--pgsched-dsn`, the `pgsched_dsn` ini option, or
the `PGSCHED_TEST_DSN` environment variable, in that order; its role must be allowed to
create databases. The plugin creates databases named `pgsched_test_<pid>_<n>` there and
drops them, and never writes to the database the DSN names.

Fixtures:

``pgsched_dsn``
    The conninfo of a migrated database of this test's own (a copy of a template migrated
    once per session), dropped after the test.
``pgsched_tx``
    A connection in an open transaction on a migrated database shared by the session,
    rolled back after the test: pass it as ``conn=`` to ``App.schedule``, ``drain`` and
    the assertions. Faster; a handler that needs a connection of its own cannot see it.
``pgsched_app``
    The App named by the ``pgsched_app`` ini option (``module:attribute``), pointed at
    ``pgsched_dsn`` for the test (and back after).
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsched.migrations import migrate

ENV_DSN = "PGSCHED_TEST_DSN"

_numbers = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pgsched")
    group.addoption(
        "--pgsched-dsn",
        default=None,
        help=f"Postgres server to make the test databases on (else ini pgsched_dsn, ${ENV_DSN})",
    )
    parser.addini("pgsched_dsn", "Postgres server to make the test databases on", default=None)
    parser.addini("pgsched_app", "the App under test, module:attribute (pgsched_app fixture)")


class TestServer:
    """The server the databases are made on (connects to the DSN's own database only to
    create and drop them)."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def dsn_of(self, dbname: str) -> str:
        return make_conninfo(self.dsn, dbname=dbname)

    def new_name(self) -> str:
        return f"pgsched_test_{os.getpid()}_{next(_numbers)}"

    def create(self, name: str, template: str | None = None) -> str:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(statement)
        return self.dsn_of(name)

    def drop(self, name: str) -> None:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(statement)


def _server_dsn(config: pytest.Config) -> str | None:
    option = config.getoption("--pgsched-dsn", default=None)
    ini = config.getini("pgsched_dsn")
    return option or ini or os.environ.get(ENV_DSN) or None


@pytest.fixture(scope="session")
def pgsched_server(pytestconfig: pytest.Config) -> TestServer:
    dsn = _server_dsn(pytestconfig)
    if dsn is None:
        pytest.fail(
            "pgsched.testing: no Postgres server to test on: pass --pgsched-dsn, set the "
            f"pgsched_dsn ini option or ${ENV_DSN}",
            pytrace=False,
        )
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        pytest.fail(f"pgsched.testing: the server's DSN is not valid: {exc}", pytrace=False)
    return TestServer(dsn)


@pytest.fixture(scope="session")
def pgsched_template(pgsched_server: TestServer) -> Iterator[str]:
    """A database migrated once per session, copied for each test (never connected to
    while it is copied)."""
    name = pgsched_server.new_name() + "_template"
    dsn = pgsched_server.create(name)
    try:
        migrate(dsn)
        yield name
    finally:
        pgsched_server.drop(name)


@pytest.fixture
def pgsched_dsn(pgsched_server: TestServer, pgsched_template: str) -> Iterator[str]:
    name = pgsched_server.new_name()
    dsn = pgsched_server.create(name, template=pgsched_template)
    try:
        yield dsn
    finally:
        pgsched_server.drop(name)


@pytest.fixture(scope="session")
def pgsched_shared_dsn(pgsched_server: TestServer, pgsched_template: str) -> Iterator[str]:
    """A migrated database the session's `pgsched_tx` transactions share."""
    name = pgsched_server.new_name() + "_shared"
    dsn = pgsched_server.create(name, template=pgsched_template)
    try:
        yield dsn
    finally:
        pgsched_server.drop(name)


@pytest.fixture
def pgsched_tx(pgsched_shared_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pgsched_shared_dsn)
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def load_app(target: str) -> Any:
    """`module:attribute` -> the object (an App)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        pytest.fail(f"pgsched_app: expected module:attribute, got {target!r}", pytrace=False)
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture
def pgsched_app(pytestconfig: pytest.Config, pgsched_dsn: str) -> Iterator[Any]:
    target = pytestconfig.getini("pgsched_app")
    if not target:
        pytest.fail(
            "pgsched.testing: the pgsched_app fixture needs the pgsched_app ini option "
            "(module:attribute of your App)",
            pytrace=False,
        )
    try:
        app = load_app(str(target))
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"pgsched.testing: pgsched_app = {target}: {exc}", pytrace=False)
    if not hasattr(app, "_dsn") or not hasattr(app, "registry"):
        pytest.fail(
            f"pgsched.testing: pgsched_app = {target} is a {type(app).__name__}, not a pgsched App",
            pytrace=False,
        )
    before = app._dsn
    app._dsn = pgsched_dsn
    try:
        yield app
    finally:
        app._dsn = before
