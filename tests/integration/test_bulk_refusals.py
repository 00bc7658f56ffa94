"""The bulk paths refuse bad input naming the first bad row (or the bad argument), and write
nothing: from plain SQL (a bare connection, SQLSTATE 22023) and from App.schedule_many,
whose refusals name the caller's index even when the database found the problem in a later
chunk."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgsched import App, InvalidTaskError
from tests.support.refusals import BAD_RUN_ATS, RANGE, counts, refused_in_sql


@pytest.mark.parametrize("run_at", BAD_RUN_ATS)
def test_a_bad_run_at_is_refused_naming_its_row(
    conn: psycopg.Connection, db_dsn: str, run_at: str
) -> None:
    before = counts(conn)
    message = refused_in_sql(
        db_dsn,
        "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'b', 'c', 'd'],"
        " run_ats => ARRAY[now(), now(), %s::timestamptz, %s::timestamptz])",
        (run_at, run_at),
    )
    assert message.startswith("pgsched: row 3 of the batch: run_at "), message
    assert RANGE in message
    assert counts(conn) == before


def test_a_bad_run_at_beside_an_existing_key_is_refused(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    # The row's key already names a task, so the row is never inserted: the insert trigger
    # cannot see its due time, and the batch used to pass.
    conn.execute("SELECT pgsched.schedule_task('a', idempotency_key => 'k1')")
    before = counts(conn)
    message = refused_in_sql(
        db_dsn,
        "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'a'],"
        " run_ats => ARRAY[now(), 'infinity'], idempotency_keys => ARRAY['k2', 'k1'])",
    )
    assert message == f"pgsched: row 2 of the batch: run_at infinity is out of range {RANGE}"
    assert counts(conn) == before


def test_the_first_bad_row_is_named_whatever_its_problem(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    before = counts(conn)
    message = refused_in_sql(
        db_dsn,
        "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'a', 'a'],"
        " run_ats => ARRAY[now(), '-infinity', now()], priorities => ARRAY[5, 5, 42])",
    )
    assert message.startswith("pgsched: row 2 of the batch: run_at -infinity"), message
    assert counts(conn) == before


def test_an_out_of_range_as_of_is_refused_naming_it(conn: psycopg.Connection, db_dsn: str) -> None:
    before = counts(conn)
    message = refused_in_sql(
        db_dsn, "SELECT * FROM pgsched.schedule_tasks(ARRAY['a', 'b'], as_of => 'infinity')"
    )
    assert message == f"pgsched: as_of infinity is out of range {RANGE}"
    assert counts(conn) == before


# Each array argument as a 2 x 2 array, the others fitting four tasks.
TWO_BY_TWO = {
    "payloads": "ARRAY[['{}'::jsonb, '{}'::jsonb], ['{}'::jsonb, '{}'::jsonb]]",
    "run_ats": "ARRAY[[now(), now()], [now(), now()]]",
    "tenant_ids": "ARRAY[['a', 'b'], ['c', 'd']]",
    "priorities": "ARRAY[[5, 5], [5, 5]]",
    "idempotency_keys": "ARRAY[['k1', 'k2'], ['k3', 'k4']]",
    "max_attempts": "ARRAY[[3::bigint, 3], [3, 3]]",
    "lanes": "ARRAY[['NORMAL', 'NORMAL'], ['NORMAL', 'NORMAL']]",
    "metadatas": "ARRAY[['{}'::jsonb, '{}'::jsonb], ['{}'::jsonb, '{}'::jsonb]]",
    "scopes": "ARRAY[['tenant', 'tenant'], ['tenant', 'tenant']]",
    "products": "ARRAY[[NULL::text, NULL], [NULL, NULL]]",
}


@pytest.mark.parametrize("argument", ["task_types", *TWO_BY_TWO])
def test_a_multi_dimensional_array_is_refused_naming_the_argument(
    conn: psycopg.Connection, db_dsn: str, argument: str
) -> None:
    before = counts(conn)
    if argument == "task_types":
        statement = "SELECT * FROM pgsched.schedule_tasks(ARRAY[['a', 'b'], ['c', 'd']])"
    else:
        statement = (
            "SELECT * FROM pgsched.schedule_tasks(ARRAY['a', 'b', 'c', 'd'],"
            f" {argument} => {TWO_BY_TWO[argument]})"
        )
    message = refused_in_sql(db_dsn, statement)
    assert message == (
        f"pgsched: {argument} must be a one-dimensional array (one element per task),"
        " got 2 dimensions"
    )
    assert counts(conn) == before


def test_a_three_dimensional_array_is_refused_too(conn: psycopg.Connection, db_dsn: str) -> None:
    message = refused_in_sql(
        db_dsn, "SELECT * FROM pgsched.schedule_tasks(ARRAY[[['a'], ['b']], [['c'], ['d']]])"
    )
    assert message.endswith("got 3 dimensions")
    assert counts(conn) == (0, 0, 0, 0)


# App.schedule_many sends chunks; the database's row number is the chunk's -----------------


@pytest.mark.parametrize(("chunk_size", "bad"), [(2, 3), (2, 4), (3, 4), (20_000, 3)])
def test_python_bulk_names_the_callers_index_for_a_refusal_found_in_sql(
    conn: psycopg.Connection, db_dsn: str, chunk_size: int, bad: int
) -> None:
    # The payload cap is the database's alone (Python cannot know the setting).
    conn.execute("UPDATE pgsched.settings SET max_payload_bytes = 100")
    before = counts(conn)
    tasks: list[dict[str, Any]] = [{"task_type": "t", "payload": {"n": i}} for i in range(5)]
    tasks[bad]["payload"] = {"blob": "x" * 200}
    with pytest.raises(InvalidTaskError) as caught:
        App(db_dsn).schedule_many(tasks, chunk_size=chunk_size)
    assert str(caught.value) == (
        f"tasks[{bad}]: payload is 212 bytes, over the cap of 100 bytes"
        " (pgsched.settings.max_payload_bytes)"
    )
    assert counts(conn) == before
