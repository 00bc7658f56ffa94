"""Tenancy fails closed, tried as an operator would: plain `psql` logged in as each role.

A login that is not an admin acts only for the tenants bound to it in
pgsched.producer_tenants (tenant_id '*': every tenant). An unbound login is refused, told the
exact binding to add, and writes nothing; running that statement as an admin lets it in.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo


def psql_binary() -> str:
    found = shutil.which("psql")
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"), reverse=True)
    assert candidates, "psql is needed: install postgresql-client"
    return str(candidates[0])


PSQL = psql_binary()
Psql = Callable[[str, str], subprocess.CompletedProcess[str]]


@pytest.fixture
def login(db_dsn: str, conn: psycopg.Connection) -> Iterator[Callable[[str], str]]:
    """login('pgsched_producer') -> a fresh LOGIN role in that group role (dropped after)."""
    created: list[str] = []

    def _login(group: str) -> str:
        name = f"t_{uuid.uuid4().hex[:10]}_{group.removeprefix('pgsched_')}"
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                sql.Identifier(name), sql.Identifier(group)
            )
        )
        created.append(name)
        return name

    yield _login
    for name in created:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def psql(db_dsn: str) -> Psql:
    """psql(role, statement): one `psql -c` as that login; the completed process."""

    def _psql(role: str, statement: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                PSQL,
                make_conninfo(db_dsn, user=role),
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    return _psql


def counts(conn: psycopg.Connection) -> tuple[object, ...]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks), (SELECT count(*) FROM pgsched.schedules),"
        " (SELECT count(*) FROM pgsched.idempotency_keys)"
    ).fetchone()
    assert row is not None
    return tuple(row)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    return done.stderr.splitlines()[0].removeprefix("ERROR:  ")


def test_an_unbound_producer_may_act_for_no_tenant_and_is_told_the_binding(
    conn: psycopg.Connection, login: Callable[[str], str], psql: Psql
) -> None:
    producer, admin = login("pgsched_producer"), login("pgsched_admin")
    foreign = conn.execute("SELECT pgsched.schedule_task('t', tenant_id => 'acme')").fetchone()
    assert foreign is not None
    before = counts(conn)

    binding = (
        f"INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES ('{producer}', 'acme')"
    )
    expected = (
        f"pgsched: role {producer} is bound to no tenant, so it may act for none;"
        f" an admin binds it with: {binding}"
    )
    for statement in (
        "SELECT pgsched.schedule_task('t', tenant_id => 'acme')",
        "SELECT * FROM pgsched.schedule_tasks(ARRAY['t', 't'], tenant_ids => ARRAY['acme', 'x'])",
        "SELECT pgsched.schedule_recurring('t', '0 9 * * *', 'UTC', tenant_id => 'acme')",
    ):
        done = psql(producer, statement)
        # The bulk path names the first refused row.
        named = expected.replace("pgsched: ", "pgsched: row 1 of the batch: ")
        assert error_line(done) == (named if "schedule_tasks" in statement else expected)
    # Work for every tenant of a product needs the all-tenants binding, and says so.
    done = psql(producer, "SELECT pgsched.schedule_task('t', scope => 'global')")
    assert error_line(done).endswith(f"VALUES ('{producer}', '*')")
    # Nor may it cancel anyone's task.
    done = psql(producer, f"SELECT pgsched.cancel_task({foreign[0]})")
    assert "may not cancel task" in error_line(done)
    assert counts(conn) == before

    # The statement from the message, run by an admin, is the whole fix.
    assert psql(admin, binding).returncode == 0
    done = psql(producer, "SELECT pgsched.schedule_task('t', tenant_id => 'acme')")
    assert done.returncode == 0, done.stderr
    done = psql(producer, "SELECT pgsched.schedule_task('t', tenant_id => 'globex')")
    assert (
        error_line(done)
        == f"pgsched: role {producer} may only schedule for tenant(s) acme, not globex"
    )


def test_an_unbound_worker_login_may_not_schedule_either(
    conn: psycopg.Connection, login: Callable[[str], str], psql: Psql
) -> None:
    worker = login("pgsched_worker")
    before = counts(conn)
    done = psql(worker, "SELECT pgsched.schedule_task('t', tenant_id => 'acme')")
    assert "is bound to no tenant" in error_line(done)
    assert counts(conn) == before


def test_an_all_tenants_binding_is_explicit_and_covers_every_tenant(
    conn: psycopg.Connection, login: Callable[[str], str], psql: Psql
) -> None:
    service = login("pgsched_producer")
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, '*')", (service,)
    )
    for statement in (
        "SELECT pgsched.schedule_task('t', tenant_id => 'acme')",
        "SELECT pgsched.schedule_task('t', tenant_id => 'globex')",
        "SELECT pgsched.schedule_task('t', scope => 'product', product => 'crm')",
        "SELECT pgsched.schedule_task('t', scope => 'global')",
    ):
        done = psql(service, statement)
        assert done.returncode == 0, (statement, done.stderr)
    globex = conn.execute("SELECT id FROM pgsched.tasks WHERE tenant_id = 'globex'").fetchone()
    assert globex is not None
    assert psql(service, f"SELECT pgsched.cancel_task({globex[0]})").returncode == 0


def test_only_the_admin_reads_across_tenants(
    conn: psycopg.Connection, login: Callable[[str], str], psql: Psql
) -> None:
    producer, admin = login("pgsched_producer"), login("pgsched_admin")
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, '*')", (producer,)
    )
    for tenant in ("acme", "globex"):
        conn.execute("SELECT pgsched.schedule_task('t', tenant_id => %s)", (tenant,))
    for table in ("tasks", "task_events", "schedules", "idempotency_keys", "producer_tenants"):
        done = psql(producer, f"SELECT count(*) FROM pgsched.{table}")
        assert error_line(done).startswith("permission denied"), table
    # The admin needs no binding, to read or to schedule.
    done = psql(admin, "SELECT string_agg(DISTINCT tenant_id, ',') FROM pgsched.tasks")
    assert done.stdout.strip() == "acme,globex"
    assert psql(admin, "SELECT pgsched.schedule_task('t', tenant_id => 'x')").returncode == 0
