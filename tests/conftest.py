"""Test infrastructure: a throwaway Postgres per session, a migrated template, a clone per test.

Fixtures (all talk to a server this session starts itself, never the one on port 5432):

``pg_server`` (session)
    A :class:`PgServer`: host, port, user, bindir, the template's name, ``dsn(dbname)``,
    ``connect(dbname)``, ``create_database(name, template=...)``, ``drop_database(name)``.
``db_dsn`` (function)
    A libpq conninfo string (``host=127.0.0.1 port=... user=postgres dbname=...``) for this
    test's own fresh clone of the migrated template (dropped after the test, with any session
    still connected to it). Hand it to subprocesses (argv or ``PGSCHED_DSN``).
``db_env`` (function)
    ``os.environ`` plus ``PGSCHED_DSN`` and the ``PG*`` variables for that clone: pass it as
    ``env=`` to ``subprocess.Popen`` so a child (any language) reaches the same database.
``conn`` (function)
    An autocommit psycopg connection to that clone.
``connect`` (function)
    A factory: ``connect(autocommit=True)`` opens another connection to the clone (closed
    after the test) -- for LISTEN, competing sessions, lock holders.
``new_database`` (function)
    A factory: ``new_database(template=None)`` creates a database (empty, or a copy of
    ``template``) and returns its conninfo; it is dropped after the test.
``redis_server`` (function)
    A real, throwaway ``redis-server`` (``tests.support.redis_server.RedisServer``): ``url``,
    ``client()``, ``flushall()``, ``kill()`` (SIGKILL), ``start()`` (again, empty, on the same
    port), ``run_id()``.
``workers`` (function)
    ``tests.support.worker_helpers.Workers`` for this test's database, with the tables of
    ``tests/apps/dispatch.py`` created: ``workers.start("W1", lanes=...)`` runs a real
    ``pgsched worker``; whatever is still running is killed after the test, and the logs
    join any timed-out ``wait_until``. A module that needs more set-up first overrides it
    with a fixture of the same name that takes ``workers``.

A test that runs processes against its own database::

    def test_a_worker_runs_a_task(conn, db_env, db_dsn):
        task_id = conn.execute("SELECT pgsched.schedule_task('noop')").fetchone()[0]
        worker = subprocess.Popen([sys.executable, "-m", "pgsched.cli", "worker"], env=db_env)
        ...  # or pass db_dsn on the command line; stop the process before the test ends

Never connect to ``pg_server.template_dbname``: a session on the template stops it being
cloned.

The template is migrated once per session by pytest-postgresql's loader, and again on the
first use after midnight UTC (:class:`DailyTemplate`): a migration lays out its day
partitions from the day it runs, and the tests take a clone to be a database migrated
today. Clones are made ahead of time by background threads (``CREATE DATABASE ...
TEMPLATE``), so a test does not wait for its copy; one made before midnight is dropped
rather than handed out after it. pytest-postgresql's own ``postgresql`` client fixture
works too (on the first day's template).

Postgres refuses to run as root; ``tests/bin/pg_ctl_unprivileged`` runs pg_ctl as the
``postgres`` user in that case, and is what pytest-postgresql is pointed at.

Unless ``--basetemp`` is given, each run gets a private temporary root (removed at the end)
instead of the shared ``/tmp/pytest-of-<user>``: every pytest start re-locks that shared
folder to 0700 and prunes old numbered runs, which would pull the data directory from
under a server still running for a concurrent test run.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories
from pytest_postgresql.executors import PostgreSQLExecutor

from pgsched.embedded import EmbeddedError, find_bindir
from pgsched.migrations import migrate
from tests.support.processes import Processes
from tests.support.redis_server import RedisServer

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
PG_CTL_WRAPPER = TESTS_DIR / "bin" / "pg_ctl_unprivileged"

DBNAME = "pgsched_test"
PG_USER = "postgres"

# A test server needs no durability: these make cloning and seeding several times faster.
_SERVER_OPTIONS = " ".join(
    [
        "-c fsync=off",
        "-c synchronous_commit=off",
        "-c full_page_writes=off",
        "-c max_connections=200",
        "-c shared_buffers=256MB",
        "-c maintenance_work_mem=256MB",
        "-c work_mem=16MB",
        "-c max_wal_size=4GB",
        "-c checkpoint_timeout=30min",
        "-c listen_addresses=127.0.0.1",
    ]
)


_PRIVATE_TMP = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # The pg_ctl wrapper runs the binaries the product's embedded default would (one rule,
    # pgsched.embedded.find_bindir). Without any, only the unit tier can run; the wrapper
    # then says what is missing.
    with suppress(EmbeddedError):
        os.environ.setdefault("PGSCHED_PG_BINDIR", str(find_bindir()))
    if config.option.basetemp is not None or hasattr(config, "workerinput"):
        return
    private = Path(tempfile.mkdtemp(prefix="pgsched-pytest-"))
    config.stash[_PRIVATE_TMP] = private
    config.option.basetemp = str(private / "tmp")


def pytest_unconfigure(config: pytest.Config) -> None:
    private = config.stash.get(_PRIVATE_TMP, None)
    if private is not None and not os.environ.get("PGSCHED_KEEP_TEST_TMP"):
        shutil.rmtree(private, ignore_errors=True)


def utc_today() -> date:
    return datetime.now(UTC).date()


def _migrate_for_tests(conninfo: str) -> date:
    """Migrate a template database; returns the UTC day it is good for.

    PGSCHED_TEST_AUDIT_WRITER=functions runs the session with the functions writing the
    events (settings.audit_writer; sql/code/transitions.sql) instead of the trigger."""
    # The day from before the migration: one that ran across midnight is stale at once
    # and made again, never taken for the later day's.
    day = utc_today()
    migrate(conninfo)
    writer = os.environ.get("PGSCHED_TEST_AUDIT_WRITER")
    if writer:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("SELECT pgsched.audit_writer_set(%s)", (writer,))
    return day


# The day pytest-postgresql's loader migrated the session's first template for.
_first_template_day: list[date] = []


def _migrate_template(
    *, host: str, port: int | str, user: str, dbname: str, password: str | None, **_: Any
) -> None:
    """pytest-postgresql loader: migrate the session's first template database."""
    conninfo = make_conninfo(host=host, port=str(port), user=user, dbname=dbname, password=password)
    _first_template_day[:] = [_migrate_for_tests(conninfo)]


# Named like the plugin's own fixtures so nothing can reach the plugin's defaults (which
# would run pg_ctl as root and fail).
postgresql_proc = factories.postgresql_proc(
    executable=str(PG_CTL_WRAPPER),
    host="127.0.0.1",
    port=None,
    user=PG_USER,
    dbname=DBNAME,
    unixsocketdir="/tmp",
    postgres_options=_SERVER_OPTIONS,
    load=[_migrate_template],
)
postgresql = factories.postgresql("postgresql_proc")


class DailyTemplate:
    """The migrated template database, made again when the UTC day has turned since.

    A migration bounds the archive partitions at the end of its own day and makes day
    partitions ahead from there (sql/0033_baseline.sql), so yesterday's template is a
    database migrated yesterday: right for the product, whose sweeps add the missing days,
    but not the fresh install the tests describe. `today` is injectable for the test of
    this class."""

    def __init__(
        self,
        server: PgServer,
        first_name: str,
        first_day: date,
        today: Callable[[], date] = utc_today,
    ) -> None:
        self._server = server
        self._base = first_name
        self._name = first_name
        self._day = first_day
        self._today = today
        self._lock = threading.Lock()

    def current(self) -> tuple[str, date]:
        """The name of a template migrated today, and its day."""
        with self._lock:
            today = self._today()
            if today != self._day:
                name = f"{self._base}_{today:%Y%m%d}"
                self._server.drop_database(name)
                conninfo = self._server.create_database(name)
                self._day = _migrate_for_tests(conninfo)
                self._name = name
            return self._name, self._day


@dataclass
class PgServer:
    """The session's Postgres server."""

    host: str
    port: int
    user: str
    bindir: Path
    # Set by the pg_server fixture once the server exists: the template needs it.
    templates: DailyTemplate | None = field(default=None, repr=False, compare=False)

    def current_template(self) -> tuple[str, date]:
        """The name of a template migrated today (see DailyTemplate), and its day."""
        assert self.templates is not None, "PgServer.templates is set by the pg_server fixture"
        return self.templates.current()

    @property
    def template_dbname(self) -> str:
        return self.current_template()[0]

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(host=self.host, port=str(self.port), user=self.user, dbname=dbname)

    def connect(self, dbname: str = "postgres", *, autocommit: bool = True) -> psycopg.Connection:
        return psycopg.connect(self.dsn(dbname), autocommit=autocommit)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create database `name` (empty, or a copy of `template`); returns its conninfo."""
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with self.connect() as admin:
            if template is not None:
                # Cloning needs the template to have no sessions.
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (template,),
                )
            admin.execute(query)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        with self.connect() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def pg_server(postgresql_proc: PostgreSQLExecutor) -> PgServer:
    server = PgServer(
        host=postgresql_proc.host,
        port=int(postgresql_proc.port),
        user=postgresql_proc.user,
        bindir=find_bindir(),
    )
    first_day = _first_template_day[0] if _first_template_day else date.min
    server.templates = DailyTemplate(server, postgresql_proc.template_dbname, first_day)
    return server


class ClonePool:
    """Clones of the template, made ahead by background threads and dropped by them after use.

    Cloning costs a fraction of a second, more than most tests; doing it while the previous
    test runs takes it off the critical path.
    """

    def __init__(
        self, server: PgServer, ahead: int = 3, threads: int = 2, prefix: str = "pgsched_t"
    ) -> None:
        self._server = server
        self._jobs: queue.Queue[tuple[str, str]] = queue.Queue()
        # A clone and the day of the template it was made from.
        self._ready: queue.Queue[tuple[str, date] | BaseException] = queue.Queue()
        self._names = (f"{prefix}{os.getpid()}_{n}" for n in itertools.count(1))
        self._threads = [
            threading.Thread(target=self._work, name=f"pgsched-clone-pool-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        for _ in range(ahead):
            self._jobs.put(("create", next(self._names)))

    def _work(self) -> None:
        admin: psycopg.Connection | None = None
        while True:
            job, name = self._jobs.get()
            if job == "stop":
                break
            try:
                if admin is None or admin.closed:
                    admin = self._server.connect()
                if job == "create":
                    template, day = self._server.current_template()
                    admin.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                            sql.Identifier(name), sql.Identifier(template)
                        )
                    )
                    self._ready.put((name, day))
                else:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )
            except Exception as exc:
                if admin is not None and admin.broken:
                    admin = None
                if job == "create":
                    self._ready.put(exc)
                # A failed drop leaves a stray database in a throwaway server: harmless.
        if admin is not None:
            admin.close()

    def take(self) -> str:
        """A fresh clone of today's template; it is the caller's until given back."""
        while True:
            self._jobs.put(("create", next(self._names)))
            got = self._ready.get(timeout=300)
            if isinstance(got, BaseException):
                raise RuntimeError(f"cloning the template database failed: {got}") from got
            name, day = got
            if day == self._server.current_template()[1]:
                return name
            # Made ahead from a template the day has since turned on.
            self.give_back(name)

    def give_back(self, name: str) -> None:
        self._jobs.put(("drop", name))

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(("stop", ""))
        for thread in self._threads:
            thread.join(timeout=120)
        leftovers: list[str] = []
        while not self._ready.empty():
            got = self._ready.get()
            if isinstance(got, tuple):
                leftovers.append(got[0])
        for name in leftovers:
            self._server.drop_database(name)


@pytest.fixture(scope="session")
def clone_pool(pg_server: PgServer) -> Iterator[ClonePool]:
    pool = ClonePool(pg_server)
    yield pool
    pool.close()


@pytest.fixture
def db_name(clone_pool: ClonePool) -> Iterator[str]:
    """The name of this test's own clone of the migrated template."""
    name = clone_pool.take()
    yield name
    clone_pool.give_back(name)


@pytest.fixture
def db_dsn(db_name: str, pg_server: PgServer) -> str:
    """Conninfo of this test's own clone of the migrated template."""
    return pg_server.dsn(db_name)


@pytest.fixture
def db_env(db_dsn: str, db_name: str, pg_server: PgServer) -> dict[str, str]:
    """An environment for subprocesses that points at this test's database."""
    env = dict(os.environ)
    env.update(
        PGSCHED_DSN=db_dsn,
        PGHOST=pg_server.host,
        PGPORT=str(pg_server.port),
        PGUSER=pg_server.user,
        PGDATABASE=db_name,
    )
    return env


@pytest.fixture
def connect(db_dsn: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra connections to this test's database; all are closed after the test."""
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
    """An autocommit connection to this test's database."""
    return connect(autocommit=True)


@pytest.fixture
def workers(db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection) -> Iterator[Any]:
    from tests.support.worker_helpers import create_test_tables, running_workers

    create_test_tables(conn)
    with running_workers(db_env, tmp_path) as started:
        yield started


_database_numbers = itertools.count(1)


@pytest.fixture
def new_database(pg_server: PgServer) -> Iterator[Callable[..., str]]:
    """Create databases in the test server (dropped after the test); returns conninfos."""
    created: list[str] = []

    def _new_database(template: str | None = None) -> str:
        name = f"pgsched_scratch_{os.getpid()}_{next(_database_numbers)}"
        dsn = pg_server.create_database(name, template=template)
        created.append(name)
        return dsn

    yield _new_database
    for name in created:
        pg_server.drop_database(name)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real, throwaway redis-server on a free 127.0.0.1 port (no persistence, noeviction),
    killed after the test; see tests/support/redis_server.py."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def processes(db_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    """`pgsched` processes started as a user runs them, against this test's database, each
    logging to a file (tests/support/processes.py); killed after the test, logs printed."""
    started = Processes(db_env, tmp_path)
    yield started
    started.close()
