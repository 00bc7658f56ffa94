"""Tenant readers, tried as an attacker would: real logins in pgsched_tenant_reader try every
way to another tenant's rows.

Two tenants (acme, globex) with tasks in every tier, events (current and archived),
recurring schedules and a global task fanned out to both. Logins: `acme` and `globex` (each
in its tenant's reader role), `unbound` (a reader with no binding), `authenticator` (a
PostgREST-style NOINHERIT login that may become either reader role), and a worker login, for
which nothing changes. For each login and each object the matrix records what it gets: the
tenants of the rows it sees, `denied`, or `-` (no rows). The expected matrix is written out
below; the matrix measured is printed (`pytest -s`) and must equal it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

TENANT_OBJECTS = {
    "tenant_tasks": "tenant_id",
    "tenant_task_events": "tenant_id",
    "tenant_schedules": "tenant_id",
    "tasks": "tenant_id",
    "task_events": "tenant_id",
    "task_events_archive": "tenant_id",
    "schedules": "tenant_id",
    "tenant_readers": "tenant_id",
}
# What a reader may call: its own bindings, and a pure function of a timestamp.
READER_FUNCTIONS = {"tenant_reader_tenants", "event_period_start"}


class Roles:
    def __init__(self, conn: psycopg.Connection, db_dsn: str) -> None:
        self.conn, self.db_dsn = conn, db_dsn
        self.suffix = uuid.uuid4().hex[:8]
        self.made: list[str] = []
        self.opened: list[psycopg.Connection] = []

    def name(self, short: str) -> str:
        return f"t_{self.suffix}_{short}"

    def create(self, short: str, options: str, *groups: str) -> str:
        name = self.name(short)
        self.conn.execute(sql.SQL(f"CREATE ROLE {{}} {options}").format(sql.Identifier(name)))
        for group in groups:
            self.conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(name))
            )
        self.made.append(name)
        return name

    def login(self, short: str) -> psycopg.Connection:
        c = psycopg.connect(make_conninfo(self.db_dsn, user=self.name(short)), autocommit=True)
        self.opened.append(c)
        return c

    def drop(self) -> None:
        for c in self.opened:
            c.close()
        for name in reversed(self.made):
            self.conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            self.conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            self.conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def world(conn: psycopg.Connection, db_dsn: str) -> Iterator[Roles]:
    """The two tenants' data and the logins; roles are cluster-wide, so dropped after."""
    for tenant in ("acme", "globex"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
        conn.execute(
            "SELECT pgsched.schedule_task('report', %s::jsonb, tenant_id => %s)",
            (json.dumps({"for": tenant}), tenant),
        )
        conn.execute(
            "SELECT pgsched.schedule_task('later', run_at => now() + interval '3 days',"
            " tenant_id => %s)",
            (tenant,),
        )
        cancelled = conn.execute(
            "SELECT pgsched.schedule_task('cancel_me', tenant_id => %s)", (tenant,)
        ).fetchone()
        assert cancelled is not None
        conn.execute("SELECT pgsched.cancel_task(%s)", (cancelled[0],))
        conn.execute(
            "SELECT pgsched.schedule_recurring('daily', '0 9 * * *', 'Europe/Berlin',"
            " tenant_id => %s)",
            (tenant,),
        )
        conn.execute(
            "INSERT INTO pgsched.task_events_archive (id, task_id, tenant_id, task_type,"
            " from_status, to_status, occurred_at, scheduled_for, attempt)"
            " VALUES (nextval('pgsched.task_events_id_seq'), 0, %s, 'old', 'QUEUED',"
            " 'PROCESSING', now(), now(), 1)",
            (tenant,),
        )
    # A global task and a global schedule: the parent belongs to no tenant ('_all'); the
    # fan-out makes one child per tenant.
    conn.execute("SELECT pgsched.schedule_recurring('nightly', '0 2 * * *', scope => 'global')")
    parent = conn.execute(
        "SELECT pgsched.schedule_task('sweep_all', scope => 'global', lane => 'BATCH')"
    ).fetchone()
    assert parent is not None
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('BATCH', 10, 'w1')"
    ).fetchall()
    assert [r[0] for r in claimed] == [parent[0]]
    fanned = conn.execute(
        "SELECT pgsched.task_fan_out(%s, %s)", (parent[0], claimed[0][1])
    ).fetchone()
    assert fanned == (2,)

    roles = Roles(conn, db_dsn)
    for tenant in ("acme", "globex"):
        reader = roles.create(f"{tenant}_reader", "NOLOGIN", "pgsched_tenant_reader")
        conn.execute(
            "INSERT INTO pgsched.tenant_readers (role_name, tenant_id) VALUES (%s, %s)",
            (reader, tenant),
        )
        roles.create(tenant, "LOGIN", reader)
    roles.create("unbound", "LOGIN", "pgsched_tenant_reader")
    roles.create(
        "authenticator", "LOGIN NOINHERIT", roles.name("acme_reader"), roles.name("globex_reader")
    )
    roles.create("worker", "LOGIN", "pgsched_worker")
    try:
        yield roles
    finally:
        roles.drop()


def seen(c: psycopg.Connection, query: str) -> str:
    """The sorted tenants of the rows `query` returns ('-' when none), or 'denied'."""
    try:
        rows = c.execute(query).fetchall()
    except errors.InsufficientPrivilege:
        return "denied"
    tenants = sorted({str(r[0]) for r in rows})
    return ",".join(tenants) if tenants else "-"


def relations(conn: psycopg.Connection) -> list[str]:
    """Every table, partition, view and sequence of the pgsched schema (dated partitions
    included)."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')"
            " ORDER BY c.relname"
        ).fetchall()
    ]


def row_for(c: psycopg.Connection, conn: psycopg.Connection) -> dict[str, str]:
    """One login's row of the matrix: what each tenant object shows it, and a summary of
    every other relation (all must be denied)."""
    row = {obj: seen(c, f"SELECT {col} FROM pgsched.{obj}") for obj, col in TENANT_OBJECTS.items()}
    row["count(*) tasks"] = seen(c, "SELECT count(*) FROM pgsched.tasks")
    others = [r for r in relations(conn) if r not in TENANT_OBJECTS]
    readable = [r for r in others if seen(c, f"SELECT 1 FROM pgsched.{r} LIMIT 0") != "denied"]
    row[f"the other {len(others)} relations"] = (
        f"{len(readable)} readable" if readable else "denied"
    )
    return row


def test_matrix_of_roles_and_objects(world: Roles, conn: psycopg.Connection) -> None:
    logins = {
        "acme reader": world.login("acme"),
        "globex reader": world.login("globex"),
        "unbound reader": world.login("unbound"),
        "authenticator": world.login("authenticator"),
        "worker": world.login("worker"),
    }
    as_acme = world.login("authenticator")
    as_acme.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(world.name("acme_reader"))))
    logins["authenticator as acme"] = as_acme

    matrix = {who: row_for(c, conn) for who, c in logins.items()}
    # The worker's and a superuser's view of the counts: what the readers must not see.
    total = conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone()
    assert total is not None
    for who in ("acme reader", "globex reader", "authenticator as acme"):
        c = logins[who]
        own = c.execute("SELECT count(*) FROM pgsched.tasks").fetchone()
        assert own is not None and 0 < own[0] < total[0], (who, own, total)
        matrix[who]["count(*) tasks"] = "own" if own[0] < total[0] else "ALL"

    other_key = next(k for k in matrix["worker"] if k.startswith("the other"))

    def row(cell: str, count: str) -> dict[str, str]:
        return {
            **{obj: cell for obj in TENANT_OBJECTS},
            "count(*) tasks": count,
            other_key: "denied",
        }

    def reader_row(tenant: str) -> dict[str, str]:
        return row(tenant, "own")

    expected = {
        "acme reader": reader_row("acme"),
        "globex reader": reader_row("globex"),
        # count(*) is one row, 0: seen() reports the value.
        "unbound reader": row("-", "0"),
        # NOINHERIT: it holds no privilege until it becomes a reader role.
        "authenticator": row("denied", "denied"),
        "authenticator as acme": reader_row("acme"),
        "worker": matrix["worker"],
    }
    print_matrix(matrix)
    assert matrix == expected
    # Exactly its rows: every one of its tenant's, by id.
    for who, tenant in (("acme reader", "acme"), ("globex reader", "globex")):
        for view, table in (
            ("tenant_tasks", "tasks"),
            ("tenant_task_events", "task_events"),
            ("tenant_schedules", "schedules"),
        ):
            mine = logins[who].execute(f"SELECT id FROM pgsched.{view} ORDER BY id").fetchall()
            # task_events holds the archive too: it is a partition of it (each event once).
            truth = conn.execute(
                f"SELECT id FROM pgsched.{table} WHERE tenant_id = %s ORDER BY id", (tenant,)
            ).fetchall()
            assert mine == truth and mine, (who, view)
    # Nothing changes for the roles that are no tenant readers.
    worker_row = matrix["worker"]
    for obj in ("tasks", "task_events", "schedules", "tenant_tasks"):
        assert worker_row[obj] == "_all,acme,globex", (obj, worker_row[obj])
    assert worker_row["tenant_readers"] == "acme,globex"


def print_matrix(matrix: dict[str, dict[str, str]]) -> None:
    columns = list(next(iter(matrix.values())))
    print("\nobjects x roles (tenants of the rows seen; - none; denied)")
    print(f"{'':>28} | " + " | ".join(f"{w[:21]:>21}" for w in matrix))
    for col in columns:
        cells = " | ".join(f"{matrix[w].get(col, '?'):>21}" for w in matrix)
        print(f"{col:>28} | {cells}")


def test_a_reader_can_execute_only_its_own_helpers(world: Roles, conn: psycopg.Connection) -> None:
    acme = world.login("acme")
    functions = conn.execute(
        "SELECT p.proname, p.oid::regprocedure::text,"
        " ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t),"
        " has_function_privilege(%s, p.oid, 'EXECUTE'), p.prorettype = 'trigger'::regtype"
        " FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'pgsched' ORDER BY 2",
        (world.name("acme"),),
    ).fetchall()
    executable = {name for name, _, _, can, _ in functions if can}
    assert executable == READER_FUNCTIONS
    called = 0
    for name, _signature, types, can, is_trigger in functions:
        if can or is_trigger:
            continue
        nulls = sql.SQL(", ").join(sql.SQL("NULL::{}").format(sql.SQL(t)) for t in types)
        with pytest.raises(errors.InsufficientPrivilege):
            acme.execute(sql.SQL("SELECT pgsched.{}({})").format(sql.Identifier(name), nulls))
        called += 1
    assert called > 50
    assert acme.execute("SELECT pgsched.tenant_reader_tenants()").fetchone() == (["acme"],)


def test_settings_do_not_move_a_reader(world: Roles) -> None:
    """The binding is by role: no session setting, set by any means, widens it."""
    acme = world.login("acme")
    before = seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks")
    claims = json.dumps({"role": world.name("globex_reader"), "tenant_id": "globex"})
    for name, value in (
        ("pgsched.tenant_id", "globex"),
        ("request.jwt.claims", claims),
        ("request.jwt.claim.tenant_id", "globex"),
        ("row_security", "off"),
    ):
        try:
            acme.execute("SELECT set_config(%s, %s, false)", (name, value))
        except errors.InsufficientPrivilege:
            continue
        assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") in (before, "denied")
        assert seen(acme, "SELECT tenant_id FROM pgsched.tasks") in (before, "denied")
    assert before == "acme"


def test_row_security_off_refuses_rather_than_widens(world: Roles) -> None:
    acme = world.login("acme")
    acme.execute("SET row_security = off")
    with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
        acme.execute("SELECT tenant_id FROM pgsched.tasks").fetchall()


def test_a_reader_cannot_become_another_role(world: Roles) -> None:
    acme = world.login("acme")
    for role in (
        world.name("globex_reader"),
        world.name("globex"),
        "pgsched_admin",
        "pgsched_worker",
        "postgres",
    ):
        with pytest.raises(errors.InsufficientPrivilege):
            acme.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    with pytest.raises(errors.InsufficientPrivilege):
        acme.execute(
            sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(world.name("globex")))
        )
    # The group role it is in has no binding: becoming it shows nothing, not everything.
    acme.execute("SET ROLE pgsched_tenant_reader")
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") == "-"
    acme.execute("RESET ROLE")
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") == "acme"


def test_a_reader_cannot_write(world: Roles, conn: psycopg.Connection) -> None:
    acme = world.login("acme")
    globex_reader = world.name("globex_reader")
    before = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks),"
        " (SELECT count(*) FROM pgsched.tenant_readers),"
        " (SELECT count(*) FROM pgsched.schedules)"
    ).fetchone()
    attempts = [
        "INSERT INTO pgsched.tenant_readers (role_name, tenant_id) VALUES (current_user, 'globex')",
        "UPDATE pgsched.tenant_readers SET role_name = current_user"
        f" WHERE role_name = '{globex_reader}'",
        "DELETE FROM pgsched.tenant_readers",
        "UPDATE pgsched.tasks SET tenant_id = 'acme'",
        "UPDATE pgsched.tenant_tasks SET priority = 9",
        "DELETE FROM pgsched.tenant_tasks",
        "INSERT INTO pgsched.tenant_tasks (tenant_id, task_type) VALUES ('acme', 'x')",
        "DELETE FROM pgsched.tasks",
        "TRUNCATE pgsched.tasks",
        "UPDATE pgsched.schedules SET enabled = false",
        "DELETE FROM pgsched.task_events",
        "SELECT pgsched.schedule_task('x', tenant_id => 'acme')",
        "SELECT pgsched.cancel_task(1)",
        "CREATE TABLE pgsched.mine (x int)",
        "CREATE FUNCTION pgsched.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "ALTER TABLE pgsched.tasks DISABLE ROW LEVEL SECURITY",
        "DROP POLICY tasks_tenant_reader ON pgsched.tasks",
    ]
    for statement in attempts:
        with pytest.raises((errors.InsufficientPrivilege, errors.WrongObjectType)) as raised:
            acme.execute(statement)
        assert raised.value.sqlstate in ("42501",), (statement, raised.value)
    after = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks),"
        " (SELECT count(*) FROM pgsched.tenant_readers),"
        " (SELECT count(*) FROM pgsched.schedules)"
    ).fetchone()
    assert after == before


def test_a_leaky_function_sees_only_the_readers_rows(world: Roles) -> None:
    """A function of the reader's own in the WHERE clause runs after the policy's filter, so
    it is never handed another tenant's values (the classic row-level-security leak)."""
    acme = world.login("acme")
    acme.execute(
        "CREATE FUNCTION pg_temp.peek(t text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001"
        " AS $$ BEGIN RAISE NOTICE 'peek %', t; RETURN true; END $$"
    )
    peeked: list[str] = []
    acme.add_notice_handler(lambda d: peeked.append(str(d.message_primary)))
    for obj in ("tasks", "tenant_tasks", "task_events", "tenant_task_events", "schedules"):
        acme.execute(f"SELECT 1 FROM pgsched.{obj} WHERE pg_temp.peek(tenant_id)").fetchall()
    assert peeked and set(peeked) == {"peek acme"}


def test_statistics_of_the_tables_are_hidden(world: Roles, conn: psycopg.Connection) -> None:
    """pg_stats would list the most common tenant ids and payloads; Postgres hides the
    statistics of a table with row-level security from a role it applies to."""
    for table in ("tasks", "tasks_hot", "tasks_cold", "task_events", "schedules"):
        conn.execute(f"ANALYZE pgsched.{table}")
    acme = world.login("acme")
    rows = acme.execute(
        "SELECT tablename, attname FROM pg_stats WHERE schemaname = 'pgsched'"
    ).fetchall()
    assert rows == []
    # A worker may read the partitions, and so their statistics: the check can fail.
    worker = world.login("worker")
    assert worker.execute(
        "SELECT count(*) FROM pg_stats WHERE schemaname = 'pgsched' AND attname = 'tenant_id'"
    ).fetchone() != (0,)


def test_a_reader_follows_its_binding(world: Roles, conn: psycopg.Connection) -> None:
    """Bindings are read at each statement: unbinding takes effect at once, mid-session."""
    acme = world.login("acme")
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") == "acme"
    conn.execute(
        "DELETE FROM pgsched.tenant_readers WHERE role_name = %s", (world.name("acme_reader"),)
    )
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") == "-"
    conn.execute(
        "INSERT INTO pgsched.tenant_readers VALUES (%s, 'globex')", (world.name("acme_reader"),)
    )
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_tasks") == "globex"


def test_a_reader_reads_its_results_only(world: Roles, conn: psycopg.Connection) -> None:
    conn.execute(
        "UPDATE pgsched.tasks SET result = jsonb_build_object('for', tenant_id)"
        " WHERE task_type = 'report'"
    )
    acme = world.login("acme")
    rows = acme.execute(
        "SELECT result FROM pgsched.tenant_tasks WHERE result IS NOT NULL"
    ).fetchall()
    assert rows == [({"for": "acme"},)]
    with pytest.raises(errors.InsufficientPrivilege):
        acme.execute("SELECT pgsched.task_result(1)")


def test_global_tasks_show_as_the_tenants_children(world: Roles, conn: psycopg.Connection) -> None:
    acme = world.login("acme")
    rows = acme.execute(
        "SELECT task_type, parent_id IS NOT NULL FROM pgsched.tenant_tasks"
        " WHERE task_type = 'sweep_all'"
    ).fetchall()
    assert rows == [("sweep_all", True)]
    parent = conn.execute(
        "SELECT id FROM pgsched.tasks WHERE task_type = 'sweep_all' AND parent_id IS NULL"
    ).fetchone()
    assert parent is not None
    hidden = acme.execute("SELECT count(*) FROM pgsched.tasks WHERE id = %s", parent).fetchone()
    assert hidden == (0,)
    assert seen(acme, "SELECT tenant_id FROM pgsched.tenant_schedules") == "acme"


def test_a_binding_names_a_real_tenant(conn: psycopg.Connection) -> None:
    for tenant in ("*", "_all", "", "a b"):
        with pytest.raises(errors.CheckViolation):
            conn.execute(
                "INSERT INTO pgsched.tenant_readers (role_name, tenant_id) VALUES ('x', %s)",
                (tenant,),
            )
