"""One cron grammar, two arms: every expression below gets the same verdict, word for word,
from SQL (pgsched.cron_problem and pgsched.schedule_recurring, from a bare connection) and
from Python (pgsched.cron and App.schedule_recurring). A refusal writes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgsched import App, InvalidTaskError
from pgsched.cron import CronError, cron_problem, parse

# (expression, None if accepted or a phrase of the refusal)
EXPRESSIONS: list[tuple[str, str | None]] = [
    # accepted
    ("* * * * *", None),
    ("*/15 * * * *", None),
    ("0 */2 * * *", None),
    ("0 */24 * * *", None),
    ("*/60 * * * *", None),
    ("5/15 * * * *", None),
    ("0 9 * * 1-5", None),
    ("0 9 * * MON-FRI", None),
    ("0 9 * JAN,jul *", None),
    ("0 0 29 2 *", None),
    ("0 0 31 2 1", None),  # both day fields restricted: either matches (Mondays)
    ("0 0 31 1-3 *", None),
    ("0 0 * * 7", None),
    ("0 0 ? * 0", None),
    ("0 0 1 * ?", None),
    ("30 2 * * THU", None),  # day names with H or R in them are names
    ("0 0 1 MAR *", None),
    # random and hashed fields: each process would pick a different time
    ("R * * * *", "R or H"),
    ("H * * * *", "R or H"),
    ("H/15 * * * *", "R or H"),
    ("0 H(0-5) * * *", "R or H"),
    ("0 0 R * *", "R or H"),
    # steps larger than the field
    ("*/61 * * * *", "step 61 in the minute field is out of range (1 to 60)"),
    ("0 */25 * * *", "step 25 in the hour field is out of range (1 to 24)"),
    ("0 0 */32 * *", "step 32 in the day of month field"),
    ("0 0 * */13 *", "step 13 in the month field"),
    ("0 0 * * */8", "step 8 in the day of week field"),
    ("*/0 * * * *", "step 0 in the minute field"),
    # values out of range, backwards ranges, junk
    ("61 * * * *", "61 in the minute field is out of range (0 to 59)"),
    ("0 24 * * *", "24 in the hour field is out of range"),
    ("0 0 32 * *", "out of range"),
    ("0 0 0 * *", "out of range"),
    ("0 0 * 13 *", "out of range"),
    ("0 0 * * 8", "out of range"),
    ("0 5-2 * * *", "runs backwards"),
    ("0 0 * * FRI-MON", "runs backwards"),
    ("a b c d e", "not a value, range or step"),
    ("0 0 * * FOO", "not a value, range or step"),
    ("0 0 * MON *", "not a value, range or step"),
    ("0 0 ? * *", None),
    ("? 0 * * *", "not a value, range or step"),
    ("0 0,,1 * * *", "not a value, range or step"),
    ("1-2-3 * * * *", "not a value, range or step"),
    ("* * *", "must have five fields"),
    ("* * * * * *", "must have five fields"),
    ("@daily", "must have five fields"),
    ("", "cron_expression is required"),
    # never fires
    ("0 0 30-31 2 *", "never fires"),
    ("0 0 31 APR *", "never fires"),
    ("0 0 31 2,4 *", "never fires"),
    ("0 0 30 2 *", "never fires"),
    ("0 0 31 4,6,9,11 *", "never fires"),
    # L, W and #: refused by both arms
    ("0 0 L * *", "L, W or #"),
    ("0 0 LW * *", "L, W or #"),
    ("0 0 15W * *", "L, W or #"),
    ("0 0 * * 5L", "L, W or #"),
    ("0 0 * * 5#2", "L, W or #"),
    ("0 0 * * FRI#1", "L, W or #"),
]


def sql_verdict(conn: psycopg.Connection, expression: str) -> str | None:
    row = conn.execute("SELECT pgsched.cron_problem(%s)", (expression,)).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def python_verdict(expression: str) -> str | None:
    problem = cron_problem(expression)
    try:
        parse(expression, "UTC")
    except CronError as exc:
        # parse refuses exactly what cron_problem refuses, with the same words.
        assert str(exc) == problem, expression
        return str(exc)
    assert problem is None, expression
    return None


def counts(conn: psycopg.Connection) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.schedules), (SELECT count(*) FROM pgsched.tasks)"
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_both_arms_give_every_expression_the_same_verdict(conn: psycopg.Connection) -> None:
    mismatches = []
    for expression, expected in EXPRESSIONS:
        in_sql, in_python = sql_verdict(conn, expression), python_verdict(expression)
        if in_sql != in_python:
            mismatches.append((expression, in_sql, in_python))
            continue
        if expected is None:
            assert in_sql is None, (expression, in_sql)
        else:
            assert in_sql is not None and expected in in_sql, (expression, in_sql)
    assert not mismatches


@pytest.mark.parametrize(
    "expression", [e for e, verdict in EXPRESSIONS if verdict is not None and e]
)
def test_schedule_recurring_refuses_in_sql_and_python_and_writes_nothing(
    conn: psycopg.Connection, db_dsn: str, expression: str
) -> None:
    before = counts(conn)
    with (
        psycopg.connect(db_dsn, autocommit=True) as bare,
        pytest.raises(psycopg.errors.InvalidParameterValue) as caught,
    ):
        bare.execute(
            "SELECT pgsched.schedule_recurring('tick', %s, 'Europe/Berlin')", (expression,)
        )
    sql_message = caught.value.diag.message_primary
    assert sql_message == f"pgsched: {cron_problem(expression)}"
    with pytest.raises(InvalidTaskError) as refused:
        App(db_dsn).schedule_recurring("tick", expression, timezone="Europe/Berlin")
    assert str(refused.value) == cron_problem(expression)
    assert counts(conn) == before


def test_accepted_expressions_are_written_by_both_arms(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    accepted = [e for e, verdict in EXPRESSIONS if verdict is None]
    app = App(db_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as bare:
        for n, expression in enumerate(accepted):
            bare.execute(
                "SELECT pgsched.schedule_recurring('tick', %s, 'UTC', idempotency_key => %s)",
                (expression, f"sql{n}"),
            )
            app.schedule_recurring("tick", expression, idempotency_key=f"py{n}")
    assert counts(conn)[0] == 2 * len(accepted)
