"""Tenancy: the tenant registry (`pgsched tenants add|list|disable`), product and global
tasks that fan out into one child task per active tenant, each tenant with its own
attempts, backoff, DEAD-lane entry and retry, and the views that report per-tenant outcomes.

Worker tests run real `pgsched worker` processes with tests/apps/tenancy_app.py, whose
`tenant_job` handler fails for the tenants listed in public.tenancy_failing."""

from __future__ import annotations

import contextlib
import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from pydantic import ValidationError

from pgsched import App, InvalidTaskError, TaskSpec
from tests.apps.tenancy_app import create_tables
from tests.support.worker_helpers import (
    Workers,
    events,
    run_cli,
    run_cli_together,
    running_workers,
    schedule,
    task,
    transitions,
    wait_until,
)

APP = "tests.apps.tenancy_app:app"
BATCH_FLAGS = ["--batch-rate", "1000", "--batch-concurrency", "32"]


@pytest.fixture
def workers(db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection) -> Iterator[Workers]:
    create_tables(conn)
    with running_workers(db_env, tmp_path) as started:
        yield started


def start_worker(workers: Workers, worker_id: str, lanes: str = "normal,batch") -> Any:
    worker = workers.start(worker_id, app=APP, lanes=lanes, lease=5.0, poll=0.2, extra=BATCH_FLAGS)
    worker.wait_running()
    return worker


def rows(conn: psycopg.Connection, query: str, *params: Any) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def summary(conn: psycopg.Connection, parent: int) -> dict[str, Any] | None:
    found = rows(
        conn,
        "SELECT task_type, tenants, completed, failed, unfinished, cancelled"
        " FROM pgsched.fan_out_summary WHERE parent_id = %s",
        parent,
    )
    assert len(found) <= 1
    return found[0] if found else None


def outcomes(conn: psycopg.Connection, parent: int) -> dict[str, dict[str, Any]]:
    """tenant -> its row of pgsched.tenant_outcomes."""
    found = rows(conn, "SELECT * FROM pgsched.tenant_outcomes WHERE parent_id = %s", parent)
    by_tenant = {r["tenant_id"]: r for r in found}
    assert len(by_tenant) == len(found), "one child per tenant"
    return by_tenant


def effects_per_tenant(conn: psycopg.Connection, task_type: str = "tenant_job") -> Counter[str]:
    return Counter(
        r["tenant_id"]
        for r in rows(
            conn, "SELECT tenant_id FROM public.tenancy_effects WHERE task_type = %s", task_type
        )
    )


def runs_per_tenant(conn: psycopg.Connection) -> Counter[str]:
    return Counter(
        r["tenant_id"]
        for r in rows(
            conn, "SELECT tenant_id FROM public.tenancy_attempts WHERE task_type = 'tenant_job'"
        )
    )


def parent_reason(conn: psycopg.Connection, parent: int) -> tuple[str, str | None]:
    row = task(conn, parent)
    return str(row["status"]), row["status_reason"]


# -- the registry, from the command line --------------------------------------------------


def tenants_json(env: dict[str, str]) -> list[dict[str, Any]]:
    listed = run_cli(env, "tenants", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return [
        {k: r[k] for k in ("tenant_id", "product", "active", "metadata")}
        for r in json.loads(listed.stdout)
    ]


def test_tenants_cli_add_list_disable(db_env: dict[str, str], conn: psycopg.Connection) -> None:
    adds = [
        ["tenants", "add", "t1", "--product", "crm"],
        ["tenants", "add", "t2", "--product", "crm"],
        ["tenants", "add", "t3", "--product", "erp", "--metadata", '{"tier": "gold"}'],
    ]
    for args, added in zip(adds, run_cli_together(db_env, *adds), strict=True):
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == f"tenant {args[2]} ({args[4]}) active"
    assert tenants_json(db_env) == [
        {"tenant_id": "t1", "product": "crm", "active": True, "metadata": {}},
        {"tenant_id": "t2", "product": "crm", "active": True, "metadata": {}},
        {"tenant_id": "t3", "product": "erp", "active": True, "metadata": {"tier": "gold"}},
    ]

    disabled = run_cli(db_env, "tenants", "disable", "t2")
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout.strip() == "tenant t2 disabled"
    table = run_cli(db_env, "tenants", "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["TENANT_ID", "PRODUCT", "ACTIVE", "CREATED_AT"]
    assert [line.split()[:3] for line in table.stdout.splitlines()[1:]] == [
        ["t1", "crm", "True"],
        ["t2", "crm", "False"],
        ["t3", "erp", "True"],
    ]

    # Refusals are clear, exit non-zero and change nothing.
    before = conn.execute("SELECT * FROM pgsched.tenants ORDER BY tenant_id").fetchall()
    bad = {
        ("tenants", "add", "a'b", "--product", "crm"): "tenant_id 'a''b' is not a plain identifier",
        ("tenants", "disable", "nobody"): "no tenant nobody",
    }
    for (argv, message), refused in zip(bad.items(), run_cli_together(db_env, *bad), strict=True):
        assert refused.returncode != 0, argv
        assert message in refused.stderr, (argv, refused.stderr)
    assert conn.execute("SELECT * FROM pgsched.tenants ORDER BY tenant_id").fetchall() == before


# -- one product task over 100 tenants, two of them failing ----------------------------------

CRM = [f"crm-{n:03d}" for n in range(100)]
FAILING = ["crm-013", "crm-077"]
RETRY_STORY = [
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "FAILED"),
]


def test_product_task_over_100_tenants_retries_and_revives_only_the_failing(
    conn: psycopg.Connection, workers: Workers, db_env: dict[str, str]
) -> None:
    for tenant in CRM:
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    for tenant in ("erp-1", "erp-2"):  # another product: not part of a crm task
        conn.execute("SELECT pgsched.tenant_add(%s, 'erp')", (tenant,))
    conn.execute("SELECT pgsched.tenant_add('crm-gone', 'crm')")
    conn.execute("SELECT pgsched.tenant_set_active('crm-gone', false)")
    conn.execute("INSERT INTO public.tenancy_failing SELECT unnest(%s::text[])", (FAILING,))

    parent = schedule(
        conn, "tenant_job", '{"report": "monthly"}', scope="product", product="crm", max_attempts=3
    )
    assert summary(conn, parent) is None and outcomes(conn, parent) == {}

    # Stage 1: a NORMAL-only worker fans the parent out; no BATCH worker runs the children.
    fanner = start_worker(workers, "F", lanes="normal")
    wait_until(lambda: parent_reason(conn, parent)[0] == "COMPLETED", 15, what="the fan-out")
    assert parent_reason(conn, parent) == ("COMPLETED", "fanned out to 100 tenants")
    assert transitions(conn, parent) == [("QUEUED", "PROCESSING"), ("PROCESSING", "COMPLETED")]
    assert summary(conn, parent) == {
        "task_type": "tenant_job",
        "tenants": 100,
        "completed": 0,
        "failed": 0,
        "unfinished": 100,
        "cancelled": 0,
    }
    children = outcomes(conn, parent)
    assert sorted(children) == CRM
    assert {(r["status"], r["attempts"], r["max_attempts"]) for r in children.values()} == {
        ("QUEUED", 0, 3)
    }
    child_of = {tenant: r["task_id"] for tenant, r in children.items()}
    assert {
        (c["lane"], c["scope"], c["task_type"], json.dumps(c["payload"]))
        for c in map(lambda i: task(conn, i), child_of.values())
    } == {("BATCH", "tenant", "tenant_job", '{"report": "monthly"}')}
    fanner.send(signal.SIGTERM)
    assert fanner.wait_exit(15) == 0

    # Stage 2: run every tenant's child. 98 succeed at once; 2 retry alone, then go DEAD.
    start_worker(workers, "W")
    wait_until(
        lambda: (s := summary(conn, parent)) and s["unfinished"] == 0,
        40,
        what="every tenant to have an outcome",
    )
    assert summary(conn, parent) == {
        "task_type": "tenant_job",
        "tenants": 100,
        "completed": 98,
        "failed": 2,
        "unfinished": 0,
        "cancelled": 0,
    }
    children = outcomes(conn, parent)
    for tenant, r in children.items():
        if tenant in FAILING:
            assert (r["status"], r["attempts"]) == ("FAILED", 3), tenant
            assert "tenant " + tenant + " is failing on purpose" in r["last_error"]
        else:
            assert (r["status"], r["attempts"], r["last_error"]) == ("COMPLETED", 1, None), tenant
    ok = set(CRM) - set(FAILING)
    assert effects_per_tenant(conn) == Counter(ok)
    assert runs_per_tenant(conn) == Counter({**Counter(ok), **dict.fromkeys(FAILING, 3)})
    dead = conn.execute("SELECT id, tenant_id FROM pgsched.lane_dead ORDER BY tenant_id").fetchall()
    assert dead == [(child_of[t], t) for t in FAILING]
    for tenant in FAILING:
        story = events(conn, child_of[tenant])
        assert [(e["from_status"], e["to_status"]) for e in story] == RETRY_STORY
        # Backoff: each requeue is due 0.2 s, then 0.4 s, after the failure.
        waits = [
            (e["scheduled_for"] - e["occurred_at"]).total_seconds()
            for e in story
            if e["to_status"] == "QUEUED"
        ]
        assert waits == pytest.approx([0.2, 0.4], abs=0.01)
    for tenant in ok:
        assert transitions(conn, child_of[tenant]) == [
            ("QUEUED", "PROCESSING"),
            ("PROCESSING", "COMPLETED"),
        ]

    # Stage 3: the dependency is fixed; an operator retries the two DEAD tenants.
    conn.execute("DELETE FROM public.tenancy_failing")
    retries = [["dead", "retry", str(child_of[tenant])] for tenant in FAILING]
    for tenant, retried in zip(FAILING, run_cli_together(db_env, *retries), strict=True):
        assert retried.returncode == 0, retried.stderr
        assert retried.stdout.strip() == f"retrying 1 task(s): {child_of[tenant]}"
    wait_until(
        lambda: (s := summary(conn, parent)) and s["completed"] == 100,
        20,
        what="the retried tenants to complete",
    )
    assert summary(conn, parent) == {
        "task_type": "tenant_job",
        "tenants": 100,
        "completed": 100,
        "failed": 0,
        "unfinished": 0,
        "cancelled": 0,
    }
    children = outcomes(conn, parent)
    assert {(r["status"], r["attempts"]) for r in children.values()} == {("COMPLETED", 1)}
    assert conn.execute(
        "SELECT count(*) FROM pgsched.lane_dead WHERE parent_id = %s", (parent,)
    ).fetchone() == (0,)
    # Each tenant's effect happened exactly once; the 98 never ran again.
    assert effects_per_tenant(conn) == Counter(CRM)
    assert runs_per_tenant(conn) == Counter({**Counter(ok), **dict.fromkeys(FAILING, 4)})
    assert "crm-gone" not in children and not {"erp-1", "erp-2"} & set(children)

    # `pgsched history --task` tells each tenant's runs.
    by_task, by_tenant = run_cli_together(
        db_env,
        ["history", "--task", str(child_of[FAILING[0]]), "--json"],
        ["history", "--tenant", "crm-042", "--json"],
    )
    assert by_task.returncode == 0, by_task.stderr
    runs = json.loads(by_task.stdout)
    assert [(r["tenant_id"], r["attempt"], r["outcome"], r["worker"]) for r in runs] == [
        (FAILING[0], 1, "COMPLETED", "W"),
        (FAILING[0], 3, "FAILED", "W"),
        (FAILING[0], 2, "QUEUED", "W"),
        (FAILING[0], 1, "QUEUED", "W"),
    ]
    assert "failing on purpose" in runs[1]["detail"]
    assert by_tenant.returncode == 0, by_tenant.stderr
    assert [
        (r["task_id"], r["tenant_id"], r["attempt"], r["outcome"])
        for r in json.loads(by_tenant.stdout)
    ] == [(child_of["crm-042"], "crm-042", 1, "COMPLETED")]


# -- global tasks --------------------------------------------------------------------------


def test_global_task_runs_for_every_active_tenant_across_products(
    conn: psycopg.Connection, workers: Workers, db_env: dict[str, str]
) -> None:
    for tenant, product in (("a1", "crm"), ("a2", "crm"), ("b1", "erp"), ("b2", "erp")):
        conn.execute("SELECT pgsched.tenant_add(%s, %s)", (tenant, product))
    conn.execute("SELECT pgsched.tenant_set_active('a2', false)")

    made = run_cli_together(
        db_env,
        ["schedule", "tenant_job", "--scope", "global", "--payload", '{"g": 1}'],
        ["schedule", "tenant_job", "--scope", "product", "--product", "erp"],
    )
    assert [m.returncode for m in made] == [0, 0], [m.stderr for m in made]
    everyone, erp_only = (int(m.stdout.split()[-1]) for m in made)
    assert {task(conn, everyone)["tenant_id"], task(conn, erp_only)["tenant_id"]} == {"_all"}

    start_worker(workers, "W")
    wait_until(
        lambda: all(
            (s := summary(conn, p)) and s["completed"] == s["tenants"] for p in (everyone, erp_only)
        ),
        20,
        what="both fan-outs to complete",
    )
    assert parent_reason(conn, everyone) == ("COMPLETED", "fanned out to 3 tenants")
    assert parent_reason(conn, erp_only) == ("COMPLETED", "fanned out to 2 tenants")
    assert sorted(outcomes(conn, everyone)) == ["a1", "b1", "b2"]
    assert sorted(outcomes(conn, erp_only)) == ["b1", "b2"]
    assert effects_per_tenant(conn) == Counter({"a1": 1, "b1": 2, "b2": 2})
    # Each child carries its parent's payload and points back at it.
    for parent, payload in ((everyone, {"g": 1}), (erp_only, {})):
        for r in outcomes(conn, parent).values():
            child = task(conn, r["task_id"])
            assert child["payload"] == payload
            assert child["metadata"]["parent_id"] == parent


def test_tenants_disabled_before_the_run_are_skipped(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """The tenant set is resolved when the task runs, not when it was scheduled."""
    for tenant in ("c1", "c2", "c3"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    parent = schedule(conn, "tenant_job", scope="global")
    conn.execute("SELECT pgsched.tenant_set_active('c2', false)")
    conn.execute("SELECT pgsched.tenant_add('c4', 'erp')")
    start_worker(workers, "W")
    wait_until(lambda: (s := summary(conn, parent)) and s["completed"] == 3, 20, what="the fan-out")
    assert sorted(outcomes(conn, parent)) == ["c1", "c3", "c4"]
    assert effects_per_tenant(conn) == Counter({"c1": 1, "c3": 1, "c4": 1})


# -- fanning out twice ---------------------------------------------------------------------


def claim_one(conn: psycopg.Connection, task_id: int) -> Any:
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 10, 'manual', '30 s')"
    ).fetchall()
    assert [i for i, _ in claimed] == [task_id]
    return claimed[0][1]


def test_fan_out_twice_makes_no_duplicate_children(conn: psycopg.Connection) -> None:
    for tenant in ("r1", "r2", "r3"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    parent = schedule(conn, "tenant_job", scope="product", product="crm")
    token = claim_one(conn, parent)

    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (parent, token)).fetchone() == (3,)
    # The parent completed with its fan-out: the lease is spent, a second call does nothing.
    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (parent, token)).fetchone() == (
        None,
    )
    assert conn.execute(
        "SELECT pgsched.task_fan_out(%s, gen_random_uuid())", (parent,)
    ).fetchone() == (None,)
    assert parent_reason(conn, parent) == ("COMPLETED", "fanned out to 3 tenants")
    children = conn.execute(
        "SELECT id, tenant_id, idempotency_key FROM pgsched.tasks WHERE parent_id = %s"
        " ORDER BY tenant_id",
        (parent,),
    ).fetchall()
    assert [t for _, t, _ in children] == ["r1", "r2", "r3"]
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE task_type = 'tenant_job'"
    ).fetchone() == (4,)

    # The children's keys are the engine's own ('pgsched:' keys): nobody can schedule with
    # them from outside, so no user task can collide with (or pre-empt) a fan-out child.
    keys = [k for _, _, k in children]
    assert all(k.startswith("pgsched:fanout:") for k in keys), keys
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="reserved for the engine"):
        conn.execute(
            "SELECT * FROM pgsched.schedule_tasks(task_types => %s::text[],"
            " tenant_ids => %s::text[], idempotency_keys => %s::text[])",
            (["tenant_job"] * 3, [t for _, t, _ in children], keys),
        )
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE task_type = 'tenant_job'"
    ).fetchone() == (4,)
    # A second product task is a second occurrence: its own children, keyed apart.
    second = schedule(conn, "tenant_job", scope="product", product="crm")
    token = claim_one(conn, second)
    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (second, token)).fetchone() == (3,)
    assert summary(conn, second) is not None and summary(conn, second)["tenants"] == 3
    assert summary(conn, parent)["tenants"] == 3


def test_keyed_product_task_reaches_a_tenant_that_used_the_same_key_elsewhere(
    conn: psycopg.Connection,
) -> None:
    for tenant in ("k1", "k2"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    # k1's own, unrelated task (LOW lane, so not claimed below) uses the same natural key.
    schedule(conn, "send_invoice", tenant_id="k1", idempotency_key="2026-12", priority=2)
    parent = schedule(conn, "tenant_job", scope="product", product="crm", idempotency_key="2026-12")
    token = claim_one(conn, parent)
    assert conn.execute("SELECT pgsched.task_fan_out(%s, %s)", (parent, token)).fetchone() == (2,)
    assert sorted(outcomes(conn, parent)) == ["k1", "k2"]


def test_python_refuses_reserved_tenant_ids_before_the_database(
    db_dsn: str, conn: psycopg.Connection
) -> None:
    """Tenant ids starting with "_" are the engine's (a fan-out parent is "_all"): the
    model refuses them, naming the field, as the database does."""
    with pytest.raises(ValidationError, match=r"tenant_id[\s\S]*not a plain identifier"):
        TaskSpec(task_type="send_invoice", tenant_id="_all")
    app = App(db_dsn)
    for bad in ("_all", "_acme", "a b"):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as in_sql:
            conn.execute("SELECT pgsched.schedule_task('send_invoice', tenant_id => %s)", (bad,))
        sql_words = str(in_sql.value.diag.message_primary).removeprefix("pgsched: ")
        with pytest.raises(InvalidTaskError) as in_python:
            app.schedule("send_invoice", tenant_id=bad)
        assert str(in_python.value) == f"tenant_id: Value error, {sql_words}"
        with pytest.raises(InvalidTaskError) as in_bulk:
            app.schedule_many([{"task_type": "send_invoice", "tenant_id": bad}])
        assert str(in_bulk.value) == f"tasks[0]: tenant_id: Value error, {sql_words}"
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)
    assert TaskSpec(task_type="send_invoice", tenant_id="acme_1").tenant_id == "acme_1"


def test_reserved_fan_out_tenant_cannot_be_used_by_a_tenant_task(
    conn: psycopg.Connection,
) -> None:
    # Refusing the reserved id is one fix; a separate key namespace is another.
    with contextlib.suppress(psycopg.errors.InvalidParameterValue):
        schedule(conn, "send_invoice", tenant_id="_all", idempotency_key="nightly")
    parent = schedule(conn, "tenant_job", scope="global", idempotency_key="nightly")
    assert task(conn, parent)["scope"] == "global"
