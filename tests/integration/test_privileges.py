"""Least privilege, from real logins: roles granted pgsched_producer, pgsched_worker or
pgsched_admin connect on their own (the test cluster trusts 127.0.0.1) and are allowed
exactly their part. Input that smuggles SQL (task types, lanes, tenant ids, products) is
refused with a clear error and writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

AsRole = Callable[[str], tuple[str, psycopg.Connection]]


@pytest.fixture
def as_role(db_dsn: str, conn: psycopg.Connection) -> Iterator[AsRole]:
    """as_role('pgsched_producer') -> (name, connection): a fresh LOGIN role granted that
    group role, connected to this test's database. Roles are dropped after the test."""
    created: list[str] = []
    opened: list[psycopg.Connection] = []

    def _as_role(group: str) -> tuple[str, psycopg.Connection]:
        name = f"t_{uuid.uuid4().hex[:10]}_{group.removeprefix('pgsched_')}"
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                sql.Identifier(name), sql.Identifier(group)
            )
        )
        created.append(name)
        login = psycopg.connect(make_conninfo(db_dsn, user=name), autocommit=True)
        opened.append(login)
        who = login.execute("SELECT session_user, current_user").fetchone()
        assert who == (name, name)
        return name, login

    yield _as_role
    for login in opened:
        login.close()
    for name in created:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def refused(login: psycopg.Connection, statement: str, params: Any = None) -> str:
    """Run a statement that must fail for lack of privilege; returns the message."""
    with pytest.raises(errors.InsufficientPrivilege) as caught:
        login.execute(statement, params)
    return str(caught.value.diag.message_primary)


def counts(conn: psycopg.Connection) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks),"
        " (SELECT count(*) FROM pgsched.idempotency_keys),"
        " (SELECT count(*) FROM pgsched.task_events)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def status_of(conn: psycopg.Connection, task_id: int) -> str:
    row = conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def bind_all_tenants(conn: psycopg.Connection, role_name: str) -> None:
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, '*')",
        (role_name,),
    )


def schedule(login: psycopg.Connection, task_type: str, **kwargs: Any) -> int:
    names = "".join(f", {name} => %({name})s" for name in kwargs)
    row = login.execute(
        f"SELECT pgsched.schedule_task(task_type => %(task_type)s{names})",
        {"task_type": task_type, **kwargs},
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim(
    login: psycopg.Connection, lane: str = "NORMAL", worker: str = "w1"
) -> list[tuple[Any, ...]]:
    return login.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 10, %s, '30 seconds')",
        (lane, worker),
    ).fetchall()


def finish(login: psycopg.Connection, task_id: int, token: Any, outcome: str) -> bool:
    row = login.execute(
        "SELECT applied FROM pgsched.task_finish_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[],"
        " ARRAY[%s]::text[], ARRAY['by test']::text[])",
        (task_id, token, outcome),
    ).fetchone()
    assert row is not None
    return bool(row[0])


# What neither a producer nor a worker may run (admin only), with arguments that would work.
ADMIN_ONLY_FUNCTIONS = {
    "dead_retry": "SELECT * FROM pgsched.dead_retry(all_tasks => true)",
    "dead_discard": "SELECT pgsched.dead_discard(1)",
    "tenant_add": "SELECT pgsched.tenant_add('acme', 'crm')",
    "tenant_set_active": "SELECT pgsched.tenant_set_active('acme', false)",
}
# The sweeps run under the worker role, so retention is the worker's (never the producer's).
RETENTION = "SELECT * FROM pgsched.retention_prune('1 day')"


def test_producer_schedules_and_cancels_but_reads_and_runs_nothing(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    name, producer = as_role("pgsched_producer")
    # A trusted service: bound to every tenant (an unbound producer may act for none).
    bind_all_tenants(conn, name)

    one = schedule(producer, "send_email", tenant_id="acme", idempotency_key="welcome:1")
    rows = producer.execute(
        "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
        " task_types => ARRAY['send_email', 'send_email'],"
        " tenant_ids => ARRAY['acme', 'globex'],"
        " idempotency_keys => ARRAY['welcome:1', 'welcome:1']) ORDER BY ordinal"
    ).fetchall()
    assert rows[0] == (1, one, False)
    assert rows[1][2] is True and rows[1][1] != one
    assert producer.execute("SELECT pgsched.cancel_task(%s, 'changed my mind')", (one,)).fetchone()
    assert status_of(conn, one) == "CANCELLED"
    assert status_of(conn, rows[1][1]) == "QUEUED"

    for statement in (
        "SELECT * FROM pgsched.tasks",
        "SELECT * FROM pgsched.tasks_hot",
        "SELECT * FROM pgsched.task_events",
        "SELECT * FROM pgsched.idempotency_keys",
        "SELECT * FROM pgsched.completed_work",
        "SELECT * FROM pgsched.tenants",
        "SELECT * FROM pgsched.lane_dead",
        "UPDATE pgsched.tasks SET priority = 1",
        "DELETE FROM pgsched.tasks",
        "DELETE FROM pgsched.task_events",
        "INSERT INTO pgsched.tasks (task_type, next_run_at, lane, status)"
        " VALUES ('x', now(), 'NORMAL', 'QUEUED')",
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES ('x', 'acme')",
    ):
        assert "permission denied" in refused(producer, statement), statement

    for name, statement in {
        **ADMIN_ONLY_FUNCTIONS,
        "retention_prune": RETENTION,
        "task_claim_many": "SELECT * FROM pgsched.task_claim_many('NORMAL', 10, 'p')",
        "task_finish_many": "SELECT * FROM pgsched.task_finish_many("
        "ARRAY[1]::bigint[], ARRAY[gen_random_uuid()], ARRAY['COMPLETED'])",
        "task_fan_out": "SELECT pgsched.task_fan_out(1, gen_random_uuid())",
        "lease_rescue_expired": "SELECT pgsched.lease_rescue_expired()",
        "work_once": "SELECT pgsched.work_once('acme', 't', 'k', 1)",
    }.items():
        message = refused(producer, statement)
        assert message.startswith("permission denied for function"), (name, message)
        assert name in message

    # Nothing it was refused changed anything: two tasks, one cancelled.
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (2,)


def test_bound_producer_schedules_and_cancels_only_for_its_tenant(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    name, producer = as_role("pgsched_producer")
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, 'acme')", (name,)
    )
    globex_task = schedule(conn, "send_email", tenant_id="globex")
    mine = schedule(producer, "send_email", tenant_id="acme")
    before = counts(conn)

    expected = f"pgsched: role {name} may only schedule for tenant(s) acme, not globex"
    assert refused(
        producer, "SELECT pgsched.schedule_task('send_email', tenant_id => 'globex')"
    ) == (expected)
    # One foreign row refuses the whole batch, and is named.
    assert refused(
        producer,
        "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'b'],"
        " tenant_ids => ARRAY['acme', 'globex'])",
    ) == expected.replace("pgsched: ", "pgsched: row 2 of the batch: ")
    # No tenant given means 'default', which is not acme's either.
    assert refused(producer, "SELECT pgsched.schedule_task('send_email')").endswith("not default")
    # Nor may it schedule work for every tenant of a product, or for everyone.
    assert "not _all" in refused(
        producer, "SELECT pgsched.schedule_task('report', scope => 'product', product => 'crm')"
    )
    assert "not _all" in refused(
        producer, "SELECT pgsched.schedule_task('report', scope => 'global')"
    )
    # It cannot cancel globex's task (and is not told whose it is), nor widen its binding.
    assert refused(producer, "SELECT pgsched.cancel_task(%s)", (globex_task,)) == (
        f"pgsched: role {name} may not cancel task {globex_task}: it belongs to another tenant"
    )
    assert "permission denied" in refused(
        producer,
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id)"
        " VALUES (session_user, 'globex')",
    )
    assert counts(conn) == before
    assert status_of(conn, globex_task) == "QUEUED"

    # Its own tenant works both ways.
    assert producer.execute("SELECT pgsched.cancel_task(%s)", (mine,)).fetchone() == (mine,)
    assert status_of(conn, mine) == "CANCELLED"


def test_worker_claims_fans_out_and_finishes_but_cannot_administer(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    _, worker = as_role("pgsched_worker")
    conn.execute("SELECT pgsched.tenant_add('acme', 'crm'), pgsched.tenant_add('globex', 'crm')")
    plain = schedule(conn, "send_email", tenant_id="acme", idempotency_key="welcome:7")
    product = schedule(conn, "report", scope="product", product="crm")

    claimed = dict(claim(worker))
    assert set(claimed) == {plain, product}
    beat = worker.execute(
        "SELECT * FROM pgsched.task_heartbeat_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])",
        (plain, claimed[plain]),
    ).fetchall()
    assert beat == [(plain,)]
    # The ledger, for a batch: only a held, keyed task gets an entry (the product task has
    # no key; a wrong lease token writes nothing), and only the first write records it.
    assert worker.execute(
        "SELECT * FROM pgsched.work_record_done_many(%s::bigint[], %s::uuid[])",
        ([plain, product, plain], [claimed[plain], claimed[product], uuid.uuid4()]),
    ).fetchall() == [(plain, True), (product, False), (plain, False)]
    assert conn.execute(
        "SELECT tenant_id, task_type, idempotency_key, task_id FROM pgsched.completed_work"
    ).fetchall() == [("acme", "send_email", "welcome:7", plain)]
    assert worker.execute(
        "SELECT pgsched.work_once('acme', 'send_email', 'welcome-email', %s)", (plain,)
    ).fetchone() == (True,)
    assert finish(worker, plain, claimed[plain], "COMPLETED") is True
    assert worker.execute(
        "SELECT pgsched.task_fan_out(%s, %s)", (product, claimed[product])
    ).fetchone() == (2,)
    assert status_of(conn, plain) == "COMPLETED"
    assert status_of(conn, product) == "COMPLETED"
    children = conn.execute(
        "SELECT tenant_id FROM pgsched.tasks WHERE parent_id = %s ORDER BY tenant_id", (product,)
    ).fetchall()
    assert children == [("acme",), ("globex",)]
    # A task that fails for good reaches the DEAD lane by the worker's hand...
    doomed = schedule(conn, "send_email", tenant_id="acme", max_attempts=1)
    (token,) = [t for i, t in claim(worker) if i == doomed]
    assert finish(worker, doomed, token, "FAILED") is True
    assert status_of(conn, doomed) == "FAILED"

    # ...but only an admin brings it back, discards it, or changes tenants and settings.
    for name, statement in ADMIN_ONLY_FUNCTIONS.items():
        message = refused(worker, statement)
        assert message.startswith("permission denied for function"), (name, message)
    for statement in (
        "INSERT INTO pgsched.tenants (tenant_id, product) VALUES ('initech', 'crm')",
        "UPDATE pgsched.tenants SET active = false",
        "UPDATE pgsched.settings SET max_payload_bytes = 1",
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES ('x', 'acme')",
        "DELETE FROM pgsched.tasks",
        "DELETE FROM pgsched.task_events",
    ):
        assert "permission denied" in refused(worker, statement), statement
    assert status_of(conn, doomed) == "FAILED"
    assert conn.execute(
        "SELECT count(*) FILTER (WHERE active) FROM pgsched.tenants"
    ).fetchone() == (2,)


def test_worker_cannot_revive_a_dead_task_by_updating_the_row(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    _, worker = as_role("pgsched_worker")
    doomed = schedule(conn, "send_email", tenant_id="acme", max_attempts=1)
    (token,) = [t for i, t in claim(conn) if i == doomed]
    assert finish(conn, doomed, token, "FAILED") is True

    with pytest.raises(errors.InsufficientPrivilege):
        worker.execute(
            "UPDATE pgsched.tasks SET status = 'QUEUED', attempts = 0 WHERE id = %s", (doomed,)
        )
    assert status_of(conn, doomed) == "FAILED"


def test_admin_does_everything(conn: psycopg.Connection, as_role: AsRole) -> None:
    _, admin = as_role("pgsched_admin")
    assert admin.execute("SELECT pgsched.tenant_add('acme', 'crm')").fetchone() == ("acme",)
    assert admin.execute("SELECT pgsched.tenant_set_active('acme', false)").fetchone() == ("acme",)
    admin.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES ('someone', 'acme')"
    )
    admin.execute("UPDATE pgsched.settings SET max_payload_bytes = max_payload_bytes")

    cancelled = schedule(admin, "send_email", tenant_id="acme")
    assert admin.execute("SELECT pgsched.cancel_task(%s)", (cancelled,)).fetchone() == (cancelled,)
    doomed = schedule(admin, "send_email", tenant_id="acme", max_attempts=1)
    claimed = dict(claim(admin))
    assert set(claimed) == {doomed}
    assert finish(admin, doomed, claimed[doomed], "FAILED") is True
    assert admin.execute(
        "SELECT * FROM pgsched.dead_retry(task_id => %s)", (doomed,)
    ).fetchall() == [(doomed,)]
    claimed = dict(claim(admin))
    assert finish(admin, doomed, claimed[doomed], "FAILED") is True
    assert admin.execute("SELECT pgsched.dead_discard(%s)", (doomed,)).fetchone() == (doomed,)
    assert status_of(admin, doomed) == "CANCELLED"
    story = admin.execute(
        "SELECT to_status::text FROM pgsched.task_events WHERE task_id = %s ORDER BY id", (doomed,)
    ).fetchall()
    assert [s for (s,) in story] == [
        "PROCESSING",
        "FAILED",
        "QUEUED",
        "PROCESSING",
        "FAILED",
        "CANCELLED",
    ]
    pruned = admin.execute("SELECT * FROM pgsched.retention_prune('0 seconds')").fetchone()
    assert pruned is not None and pruned[0] == 2  # both CANCELLED tasks
    assert admin.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)
    assert admin.execute("SELECT * FROM pgsched.lane_dead").fetchall() == []


PARTITION_MAINTENANCE = (
    "SELECT * FROM pgsched.partitions_maintain()",
    "SELECT * FROM pgsched.finished_partitions_maintain()",
)
# The body both share (sql/0030) runs its archive_keeps argument as SQL: only the two
# functions above, as its owner, may call it.
SHARED_MAINTENANCE = (
    "SELECT * FROM pgsched.time_partitions_maintain('partitions_maintain', 'pgsched.task_events',"
    " 'pgsched.event_partitions', 'true', 3, '30 days', NULL, '1 second')"
)


def test_partition_maintenance_is_the_workers_and_admins_and_its_shared_body_no_ones(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    _, producer = as_role("pgsched_producer")
    _, worker = as_role("pgsched_worker")
    _, admin = as_role("pgsched_admin")
    for statement in PARTITION_MAINTENANCE:
        assert refused(producer, statement).startswith("permission denied for function")
        for login in (worker, admin):
            login.execute(statement).fetchall()
    for login in (producer, worker, admin):
        message = refused(login, SHARED_MAINTENANCE)
        assert message == "permission denied for function time_partitions_maintain"


# -- SQL metacharacters in identifiers ----------------------------------------------------

PLAIN_TYPE = " (letters, digits, _ and ., starting with a letter or _, at most 100 characters)"
PLAIN_TENANT = (
    " (letters, digits, _, . and -, starting with a letter or digit, at most 100 characters)"
)

BAD_INPUT = [
    pytest.param(
        {"task_type": "x; DROP TABLE pgsched.tasks; --"},
        "pgsched: task_type 'x; DROP TABLE pgsched.tasks; --' is not a plain identifier"
        + PLAIN_TYPE,
        id="task_type",
    ),
    pytest.param(
        {"task_type": "send_email", "tenant_id": "a'b"},
        "pgsched: tenant_id 'a''b' is not a plain identifier" + PLAIN_TENANT,
        id="tenant_id",
    ),
    pytest.param(
        {"task_type": "send_email", "tenant_id": "x; DROP TABLE pgsched.tasks; --"},
        "pgsched: tenant_id 'x; DROP TABLE pgsched.tasks; --' is not a plain identifier"
        + PLAIN_TENANT,
        id="tenant_id_statement",
    ),
    pytest.param(
        {"task_type": "send_email", "lane": "HIGH; --", "priority": 9},
        "pgsched: unknown lane 'HIGH; --' (one of HIGH, NORMAL, LOW, BATCH)",
        id="lane",
    ),
    pytest.param(
        {"task_type": "report", "scope": "product", "product": "crm'; DROP TABLE x; --"},
        "pgsched: scope product needs a plain product name, got 'crm''; DROP TABLE x; --'",
        id="product",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), BAD_INPUT)
def test_metacharacters_are_refused_clearly_and_write_nothing(
    conn: psycopg.Connection, as_role: AsRole, arguments: dict[str, Any], message: str
) -> None:
    name, producer = as_role("pgsched_producer")
    bind_all_tenants(conn, name)
    before = counts(conn)
    keyed = {**arguments, "idempotency_key": "k1"}
    names = ", ".join(f"{name} => %({name})s" for name in keyed)
    with pytest.raises(errors.InvalidParameterValue) as caught:
        producer.execute(f"SELECT pgsched.schedule_task({names})", keyed)
    assert caught.value.diag.message_primary == message

    # In a batch, the bad row (second) refuses the good one (first) too.
    row = {
        "task_type": ["send_email", arguments["task_type"]],
        "tenant_id": ["acme", arguments.get("tenant_id", "acme")],
        "lane": [None, arguments.get("lane")],
        "priority": [5, arguments.get("priority", 5)],
        "scope": ["tenant", arguments.get("scope", "tenant")],
        "product": [None, arguments.get("product")],
    }
    with pytest.raises(errors.InvalidParameterValue) as caught:
        producer.execute(
            "SELECT * FROM pgsched.schedule_tasks(task_types => %(task_type)s::text[],"
            " tenant_ids => %(tenant_id)s::text[], lanes => %(lane)s::text[],"
            " priorities => %(priority)s::int[], scopes => %(scope)s::text[],"
            " products => %(product)s::text[], idempotency_keys => ARRAY['k2', 'k3'])",
            row,
        )
    assert caught.value.diag.message_primary == message.replace(
        "pgsched: ", "pgsched: row 2 of the batch: "
    )
    assert counts(conn) == before
    assert conn.execute("SELECT to_regclass('pgsched.tasks') IS NOT NULL").fetchone() == (True,)


@pytest.mark.parametrize(
    ("tenant_id", "product", "message"),
    [
        (
            "a'b",
            "crm",
            "pgsched: tenant_id 'a''b' is not a plain identifier "
            "(letters, digits, _, . and -, starting with a letter or digit)",
        ),
        (
            "x; DROP TABLE pgsched.tasks; --",
            "crm",
            "pgsched: tenant_id 'x; DROP TABLE pgsched.tasks; --' is not a plain identifier "
            "(letters, digits, _, . and -, starting with a letter or digit)",
        ),
        ("acme", "crm; --", "pgsched: product 'crm; --' is not a plain identifier"),
    ],
)
def test_tenant_registry_refuses_metacharacters(
    conn: psycopg.Connection, as_role: AsRole, tenant_id: str, product: str, message: str
) -> None:
    _, admin = as_role("pgsched_admin")
    with pytest.raises(errors.InvalidParameterValue) as caught:
        admin.execute("SELECT pgsched.tenant_add(%s, %s)", (tenant_id, product))
    assert caught.value.diag.message_primary == message
    assert conn.execute("SELECT count(*) FROM pgsched.tenants").fetchone() == (0,)


def test_bound_producer_recurring_schedules_only_for_its_tenant(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    name, producer = as_role("pgsched_producer")
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, 'acme')", (name,)
    )
    mine = producer.execute(
        "SELECT pgsched.schedule_recurring('digest', '0 9 * * *', 'UTC', tenant_id => 'acme')"
    ).fetchone()
    assert mine is not None
    with pytest.raises(errors.Error) as caught:
        producer.execute(
            "SELECT pgsched.schedule_recurring('digest', '0 9 * * *', 'UTC', tenant_id => 'globex')"
        )
    assert caught.value.diag.message_primary == (
        f"pgsched: role {name} may only schedule for tenant(s) acme, not globex"
    )
    assert conn.execute("SELECT tenant_id, scope FROM pgsched.schedules").fetchall() == [
        ("acme", "tenant")
    ]


def test_bound_producer_cannot_create_a_product_wide_recurring_schedule(
    conn: psycopg.Connection, as_role: AsRole
) -> None:
    name, producer = as_role("pgsched_producer")
    conn.execute(
        "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, 'acme')", (name,)
    )
    with pytest.raises(errors.Error):
        producer.execute(
            "SELECT pgsched.schedule_recurring('digest', '0 9 * * *', 'UTC', tenant_id => 'acme',"
            " scope => 'product', product => 'crm')"
        )
    assert conn.execute("SELECT count(*) FROM pgsched.schedules").fetchone() == (0,)
