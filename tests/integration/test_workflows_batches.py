"""Workflows in one call and batches with a callback, from plain SQL and from Python:
schedule_workflow (named steps, after, one transaction, idempotent under a key, one
tenant, cycles and bad steps refused), schedule_batch (the callback exactly once when
every member finished, whatever the outcome, its counts by batch_status)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import errors

from pgsched import App, InvalidTaskError, TaskSpec
from pgsched.queries import query
from tests.support.query_plans import explain, heaviest_statement, logged_plans, plan_nodes


def claim(conn: psycopg.Connection, lane: str = "NORMAL") -> dict[int, Any]:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 1000, 'w1')", (lane,)
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def finish(conn: psycopg.Connection, leases: dict[int, Any], outcome: str) -> None:
    ids = list(leases)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[], %s::text[])",
        (ids, [leases[i] for i in ids], [outcome] * len(ids), ["x"] * len(ids)),
    )


def status(conn: psycopg.Connection, task_id: int) -> tuple[str, int | None]:
    row = conn.execute(
        "SELECT status::text, waiting_for FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


ORDER = [
    {"name": "charge", "task_type": "charge", "payload": {"order": 1}},
    {"name": "email", "task_type": "email", "after": ["charge"]},
    {"name": "invoice", "task_type": "invoice", "after": ["charge"]},
    {
        "name": "archive",
        "task_type": "archive",
        "after": ["email", "invoice"],
        "on_parent_failure": "run",
    },
]


def workflow(
    conn: psycopg.Connection, steps: Any, key: str | None = None, **kw: Any
) -> dict[str, Any]:
    names = "".join(f", {k} => %({k})s" for k in kw)
    rows = conn.execute(
        "SELECT step, task_id, created FROM pgsched.schedule_workflow("
        f"%(steps)s::jsonb, %(key)s{names})",
        {"steps": json.dumps(steps), "key": key, **kw},
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_a_workflow_is_made_in_one_call_and_runs_in_order(conn: psycopg.Connection) -> None:
    ids = workflow(conn, ORDER)
    assert list(ids) == ["charge", "email", "invoice", "archive"]
    charge, email, invoice, archive = (ids[n][0] for n in ids)
    assert status(conn, charge) == ("QUEUED", None)
    assert status(conn, archive) == ("PENDING", 2)
    assert conn.execute(
        "SELECT relation, id, step FROM pgsched.task_graph(%s)", (archive,)
    ).fetchall() == [("parent", email, "email"), ("parent", invoice, "invoice")]
    leases = claim(conn)
    assert set(leases) == {charge}
    finish(conn, leases, "COMPLETED")
    leases = claim(conn)
    assert set(leases) == {email, invoice}
    finish(conn, leases, "COMPLETED")
    assert status(conn, archive) == ("QUEUED", None)
    # The steps' names reach their children's parent_results.
    assert conn.execute(
        "SELECT step FROM pgsched.task_parent_results(%s)", (archive,)
    ).fetchall() == [("email",), ("invoice",)]


def test_a_workflow_key_makes_a_second_call_return_the_same_ids(conn: psycopg.Connection) -> None:
    first = workflow(conn, ORDER, "order-1", tenant_id="acme")
    again = workflow(conn, ORDER, "order-1", tenant_id="acme")
    assert {n: v[0] for n, v in again.items()} == {n: v[0] for n, v in first.items()}
    assert all(v[1] for v in first.values()) and not any(v[1] for v in again.values())
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (4,)
    assert conn.execute("SELECT DISTINCT tenant_id FROM pgsched.tasks").fetchall() == [("acme",)]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "steps must be a non-empty JSON array"),
        (
            [
                {"name": "a", "task_type": "t", "after": ["b"]},
                {"name": "b", "task_type": "t", "after": ["a"]},
            ],
            "the after names of a, b form a cycle",
        ),
        ([{"name": "a", "task_type": "t", "after": ["a"]}], "the after names of a form a cycle"),
        (
            [{"name": "a", "task_type": "t"}, {"name": "a", "task_type": "t"}],
            "the step name a is used twice",
        ),
        ([{"name": "a", "task_type": "t", "after": ["zz"]}], r"steps\[0\] \(a\): after names zz"),
        ([{"name": "a", "task_type": "bad type"}], r"steps\[0\] \(a\): task_type 'bad type'"),
        ([{"name": "a", "task_type": "t", "colour": 1}], r"steps\[0\] \(a\): unknown key 'colour'"),
        ([{"name": "a", "task_type": "t", "priority": "high"}], "priority must be a number"),
        ([{"task_type": "t"}], r"steps\[0\]: name must be a plain identifier"),
    ],
)
def test_bad_workflows_are_refused_naming_the_step_and_change_nothing(
    conn: psycopg.Connection, steps: Any, message: str
) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message):
        workflow(conn, steps)
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)


def test_a_batch_callback_runs_once_when_every_member_finished_whatever_the_outcome(
    conn: psycopg.Connection,
) -> None:
    row = conn.execute(
        "SELECT callback_id, member_ids FROM pgsched.schedule_batch("
        " array_fill('member'::text, ARRAY[5]), on_complete_type => 'done',"
        " on_complete_payload => '{\"album\": 3}', max_attempts => array_fill(1::bigint, ARRAY[5]))"
    ).fetchone()
    assert row is not None
    callback, members = row
    assert status(conn, callback) == ("PENDING", 5)
    leases = claim(conn)
    assert set(leases) == set(members)
    items = list(leases.items())
    finish(conn, dict(items[:3]), "COMPLETED")
    finish(conn, dict(items[3:4]), "FAILED")
    assert status(conn, callback) == ("PENDING", 1)
    conn.execute("SELECT pgsched.cancel_task(%s)", (items[4][0],))
    # Cancelling a running member asks its worker; its report ends it.
    finish(conn, dict(items[4:]), "CANCELLED")
    assert status(conn, callback) == ("QUEUED", None)
    counts = conn.execute(
        "SELECT total, completed, dead, cancelled, unfinished, member_ids"
        " FROM pgsched.batch_status(%s)",
        (callback,),
    ).fetchone()
    assert counts == (5, 3, 1, 1, 0, sorted(members))
    assert conn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = %s AND to_status = 'QUEUED'",
        (callback,),
    ).fetchone() == (1,)
    # A DEAD member retried and completed later does not release the callback again.
    conn.execute("SELECT pgsched.dead_retry(task_id => %s)", (items[3][0],))
    leases = claim(conn)
    finish(conn, {items[3][0]: leases[items[3][0]]}, "COMPLETED")
    assert conn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = %s AND to_status = 'QUEUED'",
        (callback,),
    ).fetchone() == (1,)


@pytest.mark.slow
def test_a_million_member_batch_waits_on_a_counter(conn: psycopg.Connection) -> None:
    conn.execute("UPDATE pgsched.settings SET immediate_window = '0', hot_window = '0'")
    row = conn.execute(
        "SELECT callback_id, cardinality(member_ids) FROM pgsched.schedule_batch("
        " array_fill('member'::text, ARRAY[1000000]), on_complete_type => 'done')"
    ).fetchone()
    assert row is not None
    callback, n = row
    assert n == 1_000_000
    assert status(conn, callback) == ("PENDING", 1_000_000)
    # A thousand members end: the dashboard's batch progress reads the callback's
    # counters, from the callback's page and from a member's, not the million members.
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'CANCELLED', updated_at = now()"
        " WHERE status = 'PENDING' AND id >= %s AND id < %s",
        (callback - 1000, callback),
    )
    conn.execute("ANALYZE pgsched.task_dependencies, pgsched.tasks_cold")
    for page in (callback, callback - 1):
        plan = explain(conn, query("dashboard_task_batch"), {"task_id": page}, analyze=True)
        read = sum(
            int(n.get("Shared Hit Blocks", 0)) + int(n.get("Shared Read Blocks", 0))
            for n in plan_nodes(plan)
            if "Relation Name" in n
        )
        assert read < 200, (page, read)
        progress = conn.execute(query("dashboard_task_batch"), {"task_id": page}).fetchone()
        assert progress is not None
        assert progress[:8] == (callback, "done", "PENDING", 1_000_000, 0, 0, 1000, 999_000)
    # Every member ends (one statement here): the counter reaches zero and the callback is
    # released, without a scan of the batch.
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'CANCELLED', updated_at = now()"
        " WHERE status = 'PENDING' AND id <> %s",
        (callback,),
    )
    # Released (into the cold tier: this test routes everything there), once, naming the
    # last member of the statement that released it (the last 1,000 had ended before).
    assert status(conn, callback) == ("PENDING", None)
    assert conn.execute(
        "SELECT detail FROM pgsched.task_events WHERE task_id = %s", (callback,)
    ).fetchall() == [
        (f"released: parent task {callback - 1001} is CANCELLED (on_parent_failure run)",)
    ]


def test_members_finishing_read_the_edges_by_key_on_the_statistics_of_an_empty_table(
    conn: psycopg.Connection,
) -> None:
    """The benchmark's million-member batch stalled once workers finished members: its
    edges were written after task_dependencies had been emptied and analyzed, and on those
    statistics a finish started from the PENDING callback and read every edge of the batch
    for each member (75 s for one flush of 250 members of 300,000). The edges are read a
    parent at a time by their key whatever the statistics say."""
    conn.execute("ALTER TABLE pgsched.task_dependencies SET (autovacuum_enabled = false)")
    conn.execute("ALTER TABLE pgsched.tasks_cold SET (autovacuum_enabled = false)")
    conn.execute(
        "INSERT INTO pgsched.task_dependencies (parent_id, child_id, met)"
        " SELECT g, g + 1, TRUE FROM generate_series(1, 10000) AS g"
    )
    conn.execute("ANALYZE pgsched.task_dependencies, pgsched.tasks_cold")
    conn.execute("TRUNCATE pgsched.task_dependencies")
    row = conn.execute(
        "SELECT callback_id FROM pgsched.schedule_batch("
        " array_fill('member'::text, ARRAY[20000]), on_complete_type => 'done')"
    ).fetchone()
    assert row is not None
    callback = row[0]
    leases = dict(list(claim(conn).items())[:100])
    ids = list(leases)
    _, plans = logged_plans(
        conn,
        "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[])",
        (ids, [leases[i] for i in ids], ["COMPLETED"] * len(ids)),
    )
    handled, statement = heaviest_statement(plans, "task_finish_many($1")
    # A few rows per member (its edge, the callback's row): not the batch's 20,000 edges.
    assert handled < 50 * len(ids), (handled, statement)
    assert status(conn, callback) == ("PENDING", 20000 - len(ids))


def test_app_workflow_and_batch(db_dsn: str) -> None:
    app = App(db_dsn)
    wf = app.workflow("order-9", tenant_id="acme")
    wf.step("charge", "charge", {"order": 9})
    wf.step("email", "email", after=["charge"]).step("archive", "archive", after=["email"])
    ids = wf.schedule()
    assert list(ids) == ["charge", "email", "archive"] and all(t.created for t in ids.values())
    again = app.workflow("order-9", tenant_id="acme")
    for step in wf.steps:
        again.steps.append(step)
    assert {n: int(t) for n, t in again.schedule().items()} == {n: int(t) for n, t in ids.items()}
    with pytest.raises(InvalidTaskError, match="form a cycle"):
        app.workflow().step("a", "t", after=["b"]).step("b", "t", after=["a"]).schedule()
    batch = app.batch(
        [TaskSpec(task_type="member") for _ in range(3)], on_complete={"task_type": "done"}
    )
    assert len(batch.member_ids) == 3
    with psycopg.connect(db_dsn) as conn:
        assert status(conn, batch.callback_id) == ("PENDING", 3)
