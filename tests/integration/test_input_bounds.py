"""Bounds on what a task may carry, refused from plain SQL (a bare connection, SQLSTATE 22023,
the argument named) and from Python (pgsched.InvalidTaskError), writing nothing either way:
due times a client cannot read back, max_attempts, metadata that is not an object or too big,
handler timeouts and retry backoff. Bulk paths name the first bad row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgsched import App, InvalidTaskError, TaskSpec
from tests.support.refusals import BAD_RUN_ATS, RANGE, counts, refused_in_sql


# 'functions' (the audit writer of distributed mode) has no insert trigger: the scheduling
# functions refuse the due time themselves, in the same words.
@pytest.mark.parametrize("writer", ["trigger", "functions"])
@pytest.mark.parametrize("run_at", BAD_RUN_ATS)
def test_out_of_range_run_at_is_refused_by_every_sql_path(
    conn: psycopg.Connection, db_dsn: str, run_at: str, writer: str
) -> None:
    conn.execute("SELECT pgsched.audit_writer_set(%s)", (writer,))
    before = counts(conn)
    single = refused_in_sql(
        db_dsn,
        "SELECT pgsched.schedule_task('send_email', run_at => %s::timestamptz,"
        " idempotency_key => 'k1')",
        (run_at,),
    )
    assert single.startswith("pgsched: run_at ") and RANGE in single, single
    assert "task_type send_email" in single

    bulk = refused_in_sql(
        db_dsn,
        "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'b'],"
        " run_ats => ARRAY[now(), %s::timestamptz])",
        (run_at,),
    )
    assert bulk.startswith("pgsched: row 2 of the batch: run_at ") and RANGE in bulk, bulk

    recurring = refused_in_sql(
        db_dsn,
        "SELECT pgsched.schedule_recurring('tick', '0 9 * * *', 'UTC',"
        " first_fire_at => %s::timestamptz)",
        (run_at,),
    )
    assert recurring.startswith("pgsched: run_at ") and RANGE in recurring, recurring
    assert counts(conn) == before


@pytest.mark.parametrize("writer", ["trigger", "functions"])
def test_the_engines_insert_refuses_a_bad_due_time_in_either_audit_mode(
    conn: psycopg.Connection, db_dsn: str, writer: str
) -> None:
    """task_insert_many, under fan-out, workflows and recurring firings, takes due times its
    callers have checked; the backstop is the insert trigger, or in 'functions' mode (no
    trigger) the function itself."""
    conn.execute("SELECT pgsched.audit_writer_set(%s)", (writer,))
    before = counts(conn)
    message = refused_in_sql(
        db_dsn,
        "SELECT * FROM pgsched.task_insert_many(ARRAY['ok', 'late'], NULL,"
        " ARRAY[now(), '10000-01-01 00:00:00+00'::timestamptz], ARRAY[NULL, 'acme'],"
        " NULL, ARRAY[NULL, 'k2'], NULL, NULL, NULL, NULL, NULL, now())",
    )
    assert message.startswith("pgsched: run_at ") and RANGE in message, message
    assert message.endswith("(task_type late, tenant_id acme)"), message
    assert counts(conn) == before


def test_the_bounds_themselves_are_accepted(conn: psycopg.Connection, db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as bare:
        for run_at in ("1970-01-01 00:00:00+00", "9998-12-31 23:59:59+00"):
            bare.execute(
                "SELECT pgsched.schedule_task('edge', run_at => %s::timestamptz)", (run_at,)
            )
    # And the rows read back in Python in a zone east of UTC (the worker's decode).
    conn.execute("SET TIME ZONE 'Pacific/Kiritimati'")
    rows = conn.execute(
        "SELECT next_run_at FROM pgsched.tasks WHERE task_type = 'edge' ORDER BY 1"
    ).fetchall()
    assert [r[0].astimezone(UTC).year for r in rows] == [1970, 9998]


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(1, 1, 2, tzinfo=UTC),
        datetime(9999, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 12, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_out_of_range_run_at_is_refused_in_python(
    conn: psycopg.Connection, db_dsn: str, run_at: datetime
) -> None:
    before = counts(conn)
    app = App(db_dsn)
    with pytest.raises(InvalidTaskError, match=r"run_at: .*run_at .* is out of range \(1970"):
        app.schedule("send_email", run_at=run_at)
    with pytest.raises(InvalidTaskError, match=r"^tasks\[1\]: run_at: .*out of range"):
        app.schedule_many(
            [{"task_type": "a"}, {"task_type": "b", "run_at": run_at}, {"task_type": "c"}]
        )
    with pytest.raises(ValueError, match="out of range"):
        TaskSpec(task_type="a", run_at=run_at)
    assert counts(conn) == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("max_attempts => 1001", "pgsched: max_attempts 1001 is over the limit of 1000"),
        (
            "max_attempts => 9000000000000000000",
            "pgsched: max_attempts 9000000000000000000 is over the limit of 1000",
        ),
        ("max_attempts => 0", "pgsched: max_attempts 0 must be at least 1"),
        ("priority => 11", "pgsched: priority 11 is out of range (0 to 10)"),
        ("priority => -1", "pgsched: priority -1 is out of range (0 to 10)"),
        ("metadata => '[1]'", "pgsched: metadata must be a JSON object, got array"),
        ("metadata => '\"x\"'", "pgsched: metadata must be a JSON object, got string"),
        ("metadata => 'null'", "pgsched: metadata must be a JSON object, got null"),
    ],
)
def test_bounds_are_refused_from_plain_sql(
    conn: psycopg.Connection, db_dsn: str, arguments: str, message: str
) -> None:
    before = counts(conn)
    assert refused_in_sql(db_dsn, f"SELECT pgsched.schedule_task('t', {arguments})") == message
    column, value = arguments.split(" => ")
    plural = {"max_attempts": "max_attempts", "priority": "priorities", "metadata": "metadatas"}
    cast = {"max_attempts": "bigint", "priority": "integer", "metadata": "jsonb"}[column]
    bulk = refused_in_sql(
        db_dsn,
        f"SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['t', 't', 't'],"
        f" {plural[column]} => ARRAY[NULL, NULL, {value}::{cast}])",
    )
    assert bulk == message.replace("pgsched: ", "pgsched: row 3 of the batch: ")
    recurring = refused_in_sql(
        db_dsn, f"SELECT pgsched.schedule_recurring('t', '0 9 * * *', 'UTC', {arguments})"
    )
    assert recurring == message
    assert counts(conn) == before


def test_metadata_over_the_cap_is_refused_like_a_payload(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    conn.execute("UPDATE pgsched.settings SET max_payload_bytes = 1000")
    before = counts(conn)
    big = Jsonb({"note": "x" * 1000})
    message = refused_in_sql(db_dsn, "SELECT pgsched.schedule_task('t', metadata => %s)", (big,))
    assert message == (
        "pgsched: metadata is 1012 bytes, over the cap of 1000 bytes"
        " (pgsched.settings.max_payload_bytes)"
    )
    with pytest.raises(InvalidTaskError, match=r"^tasks\[1\]: metadata is 1012 bytes"):
        App(db_dsn).schedule_many(
            [{"task_type": "t"}, {"task_type": "t", "metadata": {"note": "x" * 1000}}]
        )
    assert counts(conn) == before
    # Under the cap it is written.
    App(db_dsn).schedule("t", metadata={"note": "x" * 900})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_attempts": 1001}, r"^tasks\[1\]: max_attempts: .*1000"),
        ({"max_attempts": 9 * 10**18}, r"^tasks\[1\]: max_attempts: .*1000"),
        ({"priority": 11}, r"^tasks\[1\]: priority: .*10"),
        ({"metadata": [1]}, r"^tasks\[1\]: metadata: .*dictionary"),
        ({"tenant_id": "_all"}, r"^tasks\[1\]: tenant_id: .*not a plain identifier"),
    ],
)
def test_python_bulk_names_the_first_bad_row(
    conn: psycopg.Connection, db_dsn: str, fields: dict[str, Any], message: str
) -> None:
    before = counts(conn)
    tasks = [{"task_type": "t"}, {"task_type": "t", **fields}, {"task_type": "t", **fields}]
    with pytest.raises(InvalidTaskError, match=message):
        App(db_dsn).schedule_many(tasks)
    single = {k: v for k, v in fields.items()}
    with pytest.raises(InvalidTaskError, match=message.replace(r"^tasks\[1\]: ", "^")):
        App(db_dsn).schedule("t", **single)
    assert counts(conn) == before
