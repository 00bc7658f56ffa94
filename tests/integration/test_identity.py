"""Identity: a tenant's idempotency key names one task however many callers race for it;
the completed-work ledger makes a run after a lost completion a recorded no-op; a
transactional handler's effect commits with its completion or not at all; ctx.once.

Worker tests run real `pgsched worker` processes with tests/apps/tenancy_app.py; a handler
that must die kills its own worker process with SIGKILL."""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.apps.tenancy_app import create_tables
from tests.support.worker_helpers import (
    Workers,
    events,
    running_workers,
    schedule,
    statuses,
    task,
    wait_until,
)

APP = "tests.apps.tenancy_app:app"
LEASE = 2.0


@pytest.fixture
def workers(db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection) -> Iterator[Workers]:
    create_tables(conn)
    with running_workers(db_env, tmp_path) as started:
        yield started


def start_worker(workers: Workers, worker_id: str) -> Any:
    worker = workers.start(
        worker_id,
        app=APP,
        lanes="normal,batch",
        lease=LEASE,
        poll=0.2,
        extra=["--batch-rate", "1000", "--batch-concurrency", "32"],
    )
    worker.wait_running()
    return worker


def rows(conn: psycopg.Connection, query: str, *params: Any) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def effects(conn: psycopg.Connection, task_id: int) -> list[dict[str, Any]]:
    return rows(
        conn,
        "SELECT tenant_id, idem_key, attempt, worker, seen_tenant, seen_rows"
        " FROM public.tenancy_effects WHERE task_id = %s ORDER BY id",
        task_id,
    )


def attempts_log(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, int]]:
    return [
        (r["worker"], r["step"], r["attempt"])
        for r in rows(
            conn,
            "SELECT worker, step, attempt FROM public.tenancy_attempts WHERE task_id = %s"
            " ORDER BY id",
            task_id,
        )
    ]


def story(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, int]]:
    return [(e["from_status"], e["to_status"], e["attempt"]) for e in events(conn, task_id)]


# -- 1. the race for one key ------------------------------------------------------------


@dataclass
class Caller:
    index: int
    task_id: int | None = None
    order: int | None = None  # 0 = the first call to return
    committed: bool = False
    returned_while_first_held: int | None = None
    error: BaseException | None = None


def race_for_one_key(
    db_dsn: str, tenant: str, key: str, commits: Callable[[int], bool], n: int = 50
) -> list[Caller]:
    """n callers, each in its own transaction on its own connection, released together,
    schedule (tenant, key). The first call to return holds its transaction open a while and
    rolls back; every later one commits iff commits(order of return)."""
    barrier = threading.Barrier(n)
    lock = threading.Lock()
    returned: list[int] = []
    callers = [Caller(i) for i in range(n)]
    connections = [psycopg.connect(db_dsn) for _ in range(n)]

    def call(caller: Caller) -> None:
        c = connections[caller.index]
        try:
            barrier.wait(timeout=30)
            row = c.execute(
                "SELECT pgsched.schedule_task(task_type => 'race', tenant_id => %s,"
                " idempotency_key => %s, payload => %s::jsonb)",
                (tenant, key, f'{{"caller": {caller.index}}}'),
            ).fetchone()
            assert row is not None
            with lock:
                caller.order = len(returned)
                returned.append(caller.index)
            caller.task_id = int(row[0])
            if caller.order == 0:
                # Everyone else must be waiting on this uncommitted key meanwhile.
                time.sleep(0.3)
                with lock:
                    caller.returned_while_first_held = len(returned) - 1
                c.rollback()
                return
            time.sleep(random.uniform(0, 0.01))
            if commits(caller.order):
                c.commit()
                caller.committed = True
            else:
                c.rollback()
        except BaseException as exc:
            caller.error = exc

    threads = [threading.Thread(target=call, args=(c,)) for c in callers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a caller never returned"
    finally:
        for c in connections:
            c.close()
    assert [c.error for c in callers if c.error is not None] == []
    return callers


RACES = {
    # Every caller rolls back: nothing may remain.
    "all_roll_back": lambda order: False,
    # Key holders 0..24 roll back one after another; the 26th to return commits.
    "one_commits_after_25_rollbacks": lambda order: order == 25,
    # Most commit (the first never does).
    "most_commit": lambda order: order % 4 != 0,
}


@pytest.mark.parametrize("variant", list(RACES))
def test_racing_callers_get_exactly_one_task_iff_one_commits(
    conn: psycopg.Connection, db_dsn: str, variant: str
) -> None:
    tenant, key = "acme", f"invoice:{uuid.uuid4().hex[:8]}"
    callers = race_for_one_key(db_dsn, tenant, key, RACES[variant])
    by_order = sorted(callers, key=lambda c: c.order if c.order is not None else -1)
    assert [c.order for c in by_order] == list(range(50))

    first = by_order[0]
    assert first.committed is False
    assert first.returned_while_first_held == 0, "others returned while the key was held"

    tasks = conn.execute(
        "SELECT id FROM pgsched.tasks WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant, key),
    ).fetchall()
    keys = conn.execute(
        "SELECT task_id FROM pgsched.idempotency_keys"
        " WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant, key),
    ).fetchall()
    committed = [c for c in callers if c.committed]
    if variant == "all_roll_back":
        assert committed == []
        assert tasks == [] and keys == []
        assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)
        # Every one of them held the key in turn: 50 different would-be ids.
        assert len({c.task_id for c in callers}) == 50
        return

    assert committed, "the variant commits at least once"
    assert len(tasks) == 1 and keys == tasks
    (the_id,) = tasks[0]
    assert {c.task_id for c in committed} == {the_id}
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (1,)
    # The task is the one its creator wrote (its payload names a committed caller).
    creator = task(conn, the_id)["payload"]["caller"]
    assert callers[creator].committed and callers[creator].task_id == the_id
    if variant == "one_commits_after_25_rollbacks":
        # Each of the first 26 to return was the key's holder in turn (its own new id);
        # the rest waited on the 26th and got its task.
        holders = by_order[:26]
        assert len({c.task_id for c in holders}) == 26
        assert holders[-1].task_id == the_id and holders[-1].index == creator
        assert {c.task_id for c in by_order[26:]} == {the_id}
        assert [c.index for c in committed] == [creator]
    else:
        assert by_order[1].index == creator
        assert {c.task_id for c in by_order[1:]} == {the_id}


# -- 2. duplicates in bulk, and keys per tenant -----------------------------------------


def schedule_batch(
    conn: psycopg.Connection, tenants: list[str], keys: list[str | None]
) -> list[tuple[int, int, bool]]:
    return [
        (int(o), int(i), bool(c))
        for o, i, c in conn.execute(
            "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
            " task_types => %s::text[], tenant_ids => %s::text[], idempotency_keys => %s::text[])"
            " ORDER BY ordinal",
            (["bulk"] * len(tenants), tenants, keys),
        ).fetchall()
    ]


def test_bulk_duplicates_within_and_across_batches_and_tenants(conn: psycopg.Connection) -> None:
    first = schedule_batch(
        conn,
        ["acme", "acme", "globex", "acme", "globex", "acme"],
        ["k1", "k1", "k1", None, "k2", "k1"],
    )
    assert [o for o, _, _ in first] == [1, 2, 3, 4, 5, 6]
    assert [c for _, _, c in first] == [True, False, True, True, True, False]
    acme_k1, globex_k1, acme_none, globex_k2 = (first[i][1] for i in (0, 2, 3, 4))
    assert first[1][1] == acme_k1 and first[5][1] == acme_k1
    assert len({acme_k1, globex_k1, acme_none, globex_k2}) == 4

    second = schedule_batch(conn, ["globex", "acme", "acme", "globex"], ["k1", "k1", "k3", "k1"])
    assert [(i, c) for _, i, c in second[:2]] == [(globex_k1, False), (acme_k1, False)]
    assert second[2][2] is True and second[2][1] not in (acme_k1, globex_k1)
    assert second[3][1:] == (globex_k1, False)

    # One at a time, each tenant gets its own task back, never the other's.
    for tenant, expected in (("globex", globex_k1), ("acme", acme_k1)):
        again = schedule(conn, "bulk", tenant_id=tenant, idempotency_key="k1")
        assert again == expected

    per_key = conn.execute(
        "SELECT tenant_id, idempotency_key, count(*) FROM pgsched.tasks"
        " GROUP BY 1, 2 ORDER BY 1, 2 NULLS LAST"
    ).fetchall()
    assert per_key == [
        ("acme", "k1", 1),
        ("acme", "k3", 1),
        ("acme", None, 1),
        ("globex", "k1", 1),
        ("globex", "k2", 1),
    ]
    assert conn.execute(
        "SELECT tenant_id, idempotency_key, task_id FROM pgsched.idempotency_keys"
        " WHERE idempotency_key = 'k1' ORDER BY tenant_id"
    ).fetchall() == [("acme", "k1", acme_k1), ("globex", "k1", globex_k1)]


# -- 3. a completion lost after execute ---------------------------------------------------


def test_completion_lost_after_execute_reruns_as_recorded_noop(
    conn: psycopg.Connection, workers: Workers
) -> None:
    key = "invoice:1042:2026-12"
    task_id = schedule(
        conn,
        "effect_then_die",
        '{"die_after_execute": true}',
        tenant_id="acme",
        idempotency_key=key,
        max_attempts=3,
    )
    a = start_worker(workers, "A")
    # after_execute kills A: after the effect and the ledger write, before the completion.
    assert a.wait_exit(20) == -signal.SIGKILL
    assert attempts_log(conn, task_id) == [("A", "execute", 1), ("A", "after_execute", 1)]
    assert [(e["attempt"], e["worker"]) for e in effects(conn, task_id)] == [(1, "A")]
    assert conn.execute(
        "SELECT task_id FROM pgsched.completed_work"
        " WHERE tenant_id = 'acme' AND task_type = 'effect_then_die' AND idempotency_key = %s",
        (key,),
    ).fetchall() == [(task_id,)]
    row = task(conn, task_id)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("PROCESSING", "A", 1)

    # B rescues the task once A's lease expired, claims it again and finds the ledger entry.
    start_worker(workers, "B")
    wait_until(lambda: statuses(conn, [task_id]) == {task_id: "COMPLETED"}, 25, what="the rerun")
    assert story(conn, task_id) == [
        ("QUEUED", "PROCESSING", 1),
        ("PROCESSING", "QUEUED", 1),
        ("QUEUED", "PROCESSING", 2),
        ("PROCESSING", "COMPLETED", 2),
    ]
    ev = events(conn, task_id)
    assert "worker lost" in ev[1]["detail"]
    assert ev[2]["worker"] == "B"
    done = ev[3]["detail"]
    assert done.startswith("no-op"), done
    assert f"already completed by task {task_id}" in done and "execute not called" in done
    assert task(conn, task_id)["status_reason"] == done
    # execute was not called again: one effect, and B never reached the handler.
    assert [(e["attempt"], e["worker"]) for e in effects(conn, task_id)] == [(1, "A")]
    assert attempts_log(conn, task_id) == [("A", "execute", 1), ("A", "after_execute", 1)]

    # The same handler without a crash: runs once, ledger written, an ordinary completion.
    calm = schedule(conn, "effect_then_die", tenant_id="acme", idempotency_key="invoice:1043")
    wait_until(lambda: statuses(conn, [calm]) == {calm: "COMPLETED"}, 15, what="calm task")
    assert [(e["attempt"], e["worker"]) for e in effects(conn, calm)] == [(1, "B")]
    assert events(conn, calm)[-1]["detail"] is None
    assert conn.execute(
        "SELECT task_id FROM pgsched.completed_work WHERE idempotency_key = 'invoice:1043'"
    ).fetchall() == [(calm,)]


# -- 4. ctx.connection: the effect commits with the completion -----------------------------


@pytest.fixture
def rls_reader(conn: psycopg.Connection) -> Iterator[str]:
    """A NOLOGIN, non-superuser role that may read public.tenancy_secrets: row-level
    security applies to it (the tests' own connections are superuser and bypass it)."""
    name = f"rls_reader_{uuid.uuid4().hex[:10]}"
    create_tables(conn)
    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    conn.execute(
        sql.SQL("GRANT SELECT ON public.tenancy_secrets TO {}").format(sql.Identifier(name))
    )
    conn.execute(
        "INSERT INTO public.tenancy_secrets (tenant_id, secret)"
        " VALUES ('acme', 'a1'), ('acme', 'a2'), ('globex', 'g1'), ('initech', 'i1')"
    )
    yield name
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_rls_policy_controls_are_real(conn: psycopg.Connection, rls_reader: str) -> None:
    """What the handler test below relies on: the superuser sees every row; the reader
    role sees only the rows of the tenant named by pgsched.tenant_id, none without it."""
    assert conn.execute("SELECT count(*) FROM public.tenancy_secrets").fetchone() == (4,)
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(rls_reader)))
        assert conn.execute("SELECT count(*) FROM public.tenancy_secrets").fetchone() == (0,)
        conn.execute("SELECT set_config('pgsched.tenant_id', 'globex', true)")
        assert conn.execute("SELECT secret FROM public.tenancy_secrets").fetchall() == [("g1",)]


@pytest.mark.parametrize("task_type", ["tx_effect", "tx_effect_async"])
def test_transactional_handler_sees_its_tenant_setting_and_rls_limits_a_set_role_to_its_rows(
    conn: psycopg.Connection, workers: Workers, rls_reader: str, task_type: str
) -> None:
    payload = f'{{"rls_role": "{rls_reader}"}}'
    acme = schedule(conn, task_type, payload, tenant_id="acme")
    globex = schedule(conn, task_type, payload, tenant_id="globex")
    nobody = schedule(conn, task_type, payload, tenant_id="umbrella")
    ids = [acme, globex, nobody]
    start_worker(workers, "W")
    wait_until(lambda: set(statuses(conn, ids).values()) == {"COMPLETED"}, 20, what="tx handlers")
    seen = {i: [(e["seen_tenant"], e["seen_rows"]) for e in effects(conn, i)] for i in ids}
    assert seen == {
        acme: [("acme", ["acme:a1", "acme:a2"])],
        globex: [("globex", ["globex:g1"])],
        nobody: [("umbrella", [])],
    }


@pytest.mark.parametrize("task_type", ["tx_effect", "tx_effect_async"])
def test_worker_killed_inside_transactional_handler_commits_neither_effect_nor_completion(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    task_id = schedule(conn, task_type, '{"die_on_attempt": 1}', tenant_id="acme", max_attempts=3)
    a = start_worker(workers, "A")
    assert a.wait_exit(20) == -signal.SIGKILL
    # The handler wrote its effect through ctx.connection, then the process died.
    assert attempts_log(conn, task_id) == [("A", "wrote", 1)]
    assert effects(conn, task_id) == []
    row = task(conn, task_id)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("PROCESSING", "A", 1)

    start_worker(workers, "B")
    wait_until(lambda: statuses(conn, [task_id]) == {task_id: "COMPLETED"}, 25, what="retry")
    assert story(conn, task_id) == [
        ("QUEUED", "PROCESSING", 1),
        ("PROCESSING", "QUEUED", 1),
        ("QUEUED", "PROCESSING", 2),
        ("PROCESSING", "COMPLETED", 2),
    ]
    assert [(e["attempt"], e["worker"], e["seen_tenant"]) for e in effects(conn, task_id)] == [
        (2, "B", "acme")
    ]
    assert attempts_log(conn, task_id) == [("A", "wrote", 1), ("B", "wrote", 2)]


# -- 5. ctx.once ------------------------------------------------------------------------------


@pytest.mark.parametrize("task_type", ["welcome", "welcome_async"])
def test_once_is_true_once_per_tenant_and_type(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    def answers(task_id: int) -> list[tuple[int, bool]]:
        return [
            (r["attempt"], r["first_time"])
            for r in rows(
                conn,
                "SELECT attempt, first_time FROM public.tenancy_once WHERE task_id = %s"
                " ORDER BY id",
                task_id,
            )
        ]

    start_worker(workers, "W")
    # The first task asks, fails, and asks again on its retry.
    first = schedule(conn, task_type, '{"fail_first": true}', tenant_id="acme")
    wait_until(lambda: statuses(conn, [first]) == {first: "COMPLETED"}, 15, what="first")
    assert answers(first) == [(1, True), (2, False)]

    same_tenant = schedule(conn, task_type, tenant_id="acme")
    other_tenant = schedule(conn, task_type, tenant_id="globex")
    ids = [same_tenant, other_tenant]
    wait_until(lambda: set(statuses(conn, ids).values()) == {"COMPLETED"}, 15, what="others")
    assert answers(same_tenant) == [(1, False)]
    assert answers(other_tenant) == [(1, True)]
    # Once-keys live under "<task type>#once", a name no task type can have.
    assert conn.execute(
        "SELECT tenant_id, idempotency_key, task_id FROM pgsched.completed_work"
        " WHERE task_type = %s ORDER BY tenant_id",
        (task_type + "#once",),
    ).fetchall() == [
        ("acme", "welcome-email", first),
        ("globex", "welcome-email", other_tenant),
    ]


def test_once_keys_do_not_collide_with_idempotency_keys(
    conn: psycopg.Connection, workers: Workers
) -> None:
    start_worker(workers, "W")
    asked = schedule(conn, "welcome", tenant_id="acme")
    wait_until(lambda: statuses(conn, [asked]) == {asked: "COMPLETED"}, 15, what="once asked")
    keyed = schedule(conn, "welcome", tenant_id="acme", idempotency_key="once:welcome-email")
    wait_until(lambda: statuses(conn, [keyed]) == {keyed: "COMPLETED"}, 15, what="keyed task")
    detail = events(conn, keyed)[-1]["detail"]
    assert not (detail or "").startswith("no-op"), detail
    assert conn.execute(
        "SELECT count(*) FROM public.tenancy_once WHERE task_id = %s", (keyed,)
    ).fetchone() == (1,)
