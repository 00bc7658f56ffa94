"""What a finish asks of the waiting tables while nothing waits (sql/code/workflows.sql,
task_settle_finished and task_settle_dependents).

Every statement that finishes tasks asks whether an App.result waits for them or a workflow
child waits on them. It looked each finished task up in both tables, one index descent per
task, also in an install that has never run a workflow: about 3 % of the Postgres CPU of a
claim-and-finish of 50 tasks (benchmarks/RESULTS.md, "Finishing with nobody waiting").
Now one probe of each table comes first, and the per-task lookups follow only where it
finds rows. Driven from plain SQL, as another language would, in both audit modes (the
trigger settles in one, the functions in the other)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.support.stale_statistics import schedule

TASKS = 50


@pytest.fixture(params=["trigger", "functions"])
def audit_mode(request: pytest.FixtureRequest, conn: psycopg.Connection) -> Iterator[str]:
    conn.execute("SELECT pgsched.audit_writer_set(%s)", (request.param,))
    yield request.param
    conn.execute("SELECT pgsched.audit_writer_set('trigger')")


def one(conn: psycopg.Connection, sql: str, params: tuple[object, ...] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def claimed(conn: psycopg.Connection, n: int) -> tuple[list[int], list[str]]:
    rows = conn.execute(
        "SELECT id, lease_token::text FROM pgsched.task_claim_many('NORMAL', %s, 'w-settle',"
        " '1 minute')",
        (n,),
    ).fetchall()
    assert len(rows) == n
    return [r[0] for r in rows], [r[1] for r in rows]


def index_scans_of_finishing(db_dsn: str, ids: list[int], tokens: list[str]) -> dict[str, int]:
    """Finish the tasks in one statement; the index scans it made on the waiting tables
    (this transaction's own counts), and every task applied."""
    with psycopg.connect(db_dsn) as tx:
        applied = tx.execute(
            "SELECT count(*) FILTER (WHERE applied) FROM pgsched.task_finish_many("
            " %s::bigint[], %s::uuid[], array_fill('COMPLETED'::text, ARRAY[%s]))",
            (ids, tokens, len(ids)),
        ).fetchone()
        assert applied == (len(ids),)
        scans: dict[str, int] = dict(
            tx.execute(
                "SELECT relname, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
                " WHERE schemaname = 'pgsched'"
                "   AND relname IN ('task_dependencies', 'task_result_waiters')"
            ).fetchall()
        )
        tx.commit()
    return {name: scans.get(name, 0) for name in ("task_dependencies", "task_result_waiters")}


def test_a_finish_with_nobody_waiting_probes_each_table_once(
    db_dsn: str, conn: psycopg.Connection, audit_mode: str
) -> None:
    schedule(conn, TASKS)
    ids, tokens = claimed(conn, TASKS)
    scans = index_scans_of_finishing(db_dsn, ids, tokens)
    # Before: one descent of task_dependencies' key per finished task (50).
    assert scans["task_dependencies"] <= 2, scans
    assert scans["task_result_waiters"] <= 2, scans


def test_what_waits_is_still_found_and_settled(
    db_dsn: str, conn: psycopg.Connection, audit_mode: str
) -> None:
    """With rows in both tables, the finish still tells a waiting App.result and releases
    the child of a parent in the batch."""
    schedule(conn, TASKS - 1)
    parent = one(conn, "SELECT pgsched.schedule_task(task_type => 'parent')")
    child = one(
        conn, "SELECT pgsched.schedule_task(task_type => 'child', depends_on => %s)", ([parent],)
    )
    assert one(conn, "SELECT status::text FROM pgsched.tasks WHERE id = %s", (child,)) == "PENDING"
    conn.execute(
        "INSERT INTO pgsched.task_result_waiters (task_id, token) VALUES (%s, gen_random_uuid())",
        (parent,),
    )
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgsched_result")
        ids, tokens = claimed(conn, TASKS)
        assert parent in ids
        scans = index_scans_of_finishing(db_dsn, ids, tokens)
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert heard == [str(parent)]
    # The per-task lookups ran: the table had an edge.
    assert scans["task_dependencies"] >= TASKS, scans
    met = conn.execute(
        "SELECT met FROM pgsched.task_dependencies WHERE parent_id = %s", (parent,)
    ).fetchone()
    assert met == (True,)
    assert one(conn, "SELECT status::text FROM pgsched.tasks WHERE id = %s", (child,)) == "QUEUED"
