"""What a refused call must leave behind (nothing) and how SQL refuses it: shared by the
input-bounds tests of single and bulk paths."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

RANGE = "(1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)"
BAD_RUN_ATS = [
    "4713-01-01 00:00:00+00 BC",
    "10000-01-01 00:00:00+00",
    "9999-12-31 23:00:00+00",  # Python can hold it in UTC, not in a zone east of UTC
    "1969-12-31 23:59:59+00",
    "infinity",
    "-infinity",
]


def counts(conn: psycopg.Connection) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks), (SELECT count(*) FROM pgsched.schedules),"
        " (SELECT count(*) FROM pgsched.idempotency_keys),"
        " (SELECT count(*) FROM pgsched.schedule_occurrences)"
    ).fetchone()
    assert row is not None
    return tuple(row)


def refused_in_sql(dsn: str, statement: str, params: Any = None) -> str:
    with (
        psycopg.connect(dsn, autocommit=True) as bare,
        pytest.raises(psycopg.errors.InvalidParameterValue) as caught,
    ):
        bare.execute(statement, params)
    return str(caught.value.diag.message_primary)
