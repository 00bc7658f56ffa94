"""A task carries the trace context it was scheduled in to the worker that claims it."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from pgsched import App, InvalidTaskError
from pgsched.claims import task_rows
from pgsched.queries import query
from pgsched.tasks import TaskRow

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def claim(conn: psycopg.Connection, lane: str = "NORMAL") -> list[TaskRow]:
    """The worker's own claim statement, its rows bound as the worker binds them."""
    with conn.cursor(row_factory=task_rows) as cur:
        params = {
            "lane": lane,
            "max_tasks": 10,
            "worker": "w1",
            "lease": timedelta(seconds=30),
            "as_of": None,
            "not_before": None,
        }
        return list(cur.execute(query("task_claim_many"), params).fetchall())


def test_traceparent_from_sql_reaches_the_claimed_row(conn: psycopg.Connection) -> None:
    task_id = conn.execute(
        "SELECT pgsched.schedule_task('send', traceparent => %s)", (TRACEPARENT,)
    ).fetchone()[0]
    plain = conn.execute("SELECT pgsched.schedule_task('send')").fetchone()[0]
    rows = {row.id: row for row in claim(conn)}
    assert rows[task_id].traceparent == TRACEPARENT
    assert rows[plain].traceparent is None
    assert conn.execute(
        "SELECT traceparent FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone() == (TRACEPARENT,)


def test_bulk_app_and_fan_out_carry_it(db_dsn: str, conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks(ARRAY['a', 'b'],"
        " traceparents => ARRAY[%s, NULL]) ORDER BY ordinal",
        (TRACEPARENT,),
    ).fetchall()
    stored = conn.execute(
        "SELECT traceparent FROM pgsched.tasks WHERE id = ANY(%s) ORDER BY id",
        ([r[0] for r in rows],),
    ).fetchall()
    assert stored == [(TRACEPARENT,), (None,)]
    app = App(db_dsn)
    one = app.schedule("c", traceparent=TRACEPARENT)
    many = app.schedule_many([{"task_type": "c", "traceparent": TRACEPARENT}])
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND traceparent = %s",
        ([int(one), int(many[0])], TRACEPARENT),
    ).fetchone() == (2,)
    # A fan-out's children carry on the parent's trace.
    conn.execute("SELECT pgsched.tenant_add('t1', 'shop', '{}'::jsonb)")
    conn.execute("SELECT pgsched.tenant_add('t2', 'shop', '{}'::jsonb)")
    parent = conn.execute(
        "SELECT pgsched.schedule_task('f', scope => 'product', product => 'shop',"
        " traceparent => %s)",
        (TRACEPARENT,),
    ).fetchone()[0]
    claimed = [r for r in claim(conn) if r.id == parent]
    assert claimed
    conn.execute(
        "SELECT pgsched.task_fan_out(%s, %s)",
        (parent, claimed[0].lease_token),
    )
    children = conn.execute(
        "SELECT traceparent FROM pgsched.tasks WHERE parent_id = %s", (parent,)
    ).fetchall()
    assert children == [(TRACEPARENT,), (TRACEPARENT,)]


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-trace",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ],
)
def test_a_bad_traceparent_is_refused(db_dsn: str, conn: psycopg.Connection, bad: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not a W3C trace context"):
        conn.execute("SELECT pgsched.schedule_task('a', traceparent => %s)", (bad,))
    with pytest.raises(InvalidTaskError, match="traceparent"):
        App(db_dsn).schedule("a", traceparent=bad)
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)


def test_retry_delays_are_stored_and_claimed(db_dsn: str, conn: psycopg.Connection) -> None:
    task_id = conn.execute(
        "SELECT pgsched.schedule_task('a',"
        " retry_delays => ARRAY['1 second', '10 seconds']::interval[])"
    ).fetchone()[0]
    app_id = App(db_dsn).schedule("a", {}, retry_delays=[0.5, timedelta(minutes=1)])
    rows = {row.id: row for row in claim(conn)}
    assert rows[task_id].retry_delays == [timedelta(seconds=1), timedelta(seconds=10)]
    assert rows[int(app_id)].retry_delays == [timedelta(seconds=0.5), timedelta(minutes=1)]
    for bad, words in (
        ("ARRAY[]::interval[]", "at least one delay"),
        ("ARRAY['1 second', NULL]::interval[]", "retry_delays[2] NULL is out of range"),
        ("ARRAY['31 days']::interval[]", "retry_delays[1] 31 days is out of range"),
        ("ARRAY[['1 second'], ['2 seconds']]::interval[]", "one-dimensional"),
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=words.replace("[", r"\[")):
            conn.execute(f"SELECT pgsched.schedule_task('a', retry_delays => {bad})")
    with pytest.raises(InvalidTaskError, match=r"retry_delays\[2\] -1 is out of range"):
        App(db_dsn).schedule("a", retry_delays=[1, -1])


def test_the_cli_takes_retry_delays(db_env: dict[str, str], conn: psycopg.Connection) -> None:
    pgsched = str(Path(sys.executable).with_name("pgsched"))
    argv = [pgsched, "schedule", "a", "--retry-delays", "1,10s,2m"]
    made = subprocess.run(argv, env=db_env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert conn.execute("SELECT retry_delays FROM pgsched.tasks").fetchall() == [
        ([timedelta(seconds=1), timedelta(seconds=10), timedelta(minutes=2)],)
    ]
    for bad in ("1,soon", "1,-5"):
        argv = [pgsched, "schedule", "a", "--retry-delays", bad]
        refused = subprocess.run(argv, env=db_env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "--retry-delays" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (1,)
