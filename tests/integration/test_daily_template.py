"""The suite's template database is made again when the UTC day turns during a run.

A migration bounds the archive partitions at the end of its day and makes day partitions
ahead from there; a clone of a template migrated before midnight is yesterday's install, on
which tests of a fresh install fail (partitions ahead, the archive's range, the plans over
"today's" rows). These drive the suite's own machinery (tests/conftest.py) with a clock
that turns a day.
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import TYPE_CHECKING

import psycopg

from tests.conftest import ClonePool, DailyTemplate, PgServer, utc_today

if TYPE_CHECKING:
    from collections.abc import Callable


def _archive_bound_day(dsn: str) -> date:
    """The day after the one the database was migrated on: the archive's upper bound."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (regexp_match(pg_get_expr(relpartbound, oid), 'TO \\(''([0-9-]+)'))[1]::date"
            " FROM pg_class WHERE oid = 'pgsched.task_events_archive'::regclass"
        ).fetchone()
    assert row is not None
    return row[0]


def test_a_template_from_an_earlier_day_is_migrated_again_once(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    first = new_database().rsplit("dbname=", 1)[1]
    today = utc_today()
    templates = DailyTemplate(pg_server, first, today - timedelta(days=1))
    name, day = templates.current()
    try:
        assert (name, day) == (f"{first}_{today:%Y%m%d}", today)
        assert _archive_bound_day(pg_server.dsn(name)) == today + timedelta(days=1)
        # Same day: the same template, not another migration.
        assert templates.current() == (name, day)
    finally:
        pg_server.drop_database(name)


def test_clones_made_before_midnight_are_dropped_not_handed_out(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    first = new_database(template=pg_server.template_dbname).rsplit("dbname=", 1)[1]
    today = utc_today()
    clock = [today - timedelta(days=1)]
    server = PgServer(pg_server.host, pg_server.port, pg_server.user, pg_server.bindir)
    # Until the clock turns, the first template is taken for the current day's.
    server.templates = DailyTemplate(server, first, clock[0], today=lambda: clock[0])
    pool = ClonePool(server, ahead=2, threads=1, prefix="pgsched_daily_")
    try:
        made_ahead = _wait_for_clones(pg_server, "pgsched_daily_", 2)
        clock[0] = today
        taken = pool.take()
        assert taken not in made_ahead
        assert _archive_bound_day(pg_server.dsn(taken)) == today + timedelta(days=1)
        gone = _wait_for_clones(pg_server, "pgsched_daily_", 0, among=made_ahead)
        assert gone == set()
        pool.give_back(taken)
    finally:
        pool.close()
        pg_server.drop_database(f"{first}_{today:%Y%m%d}")


def _wait_for_clones(
    pg_server: PgServer, prefix: str, count: int, among: set[str] | None = None
) -> set[str]:
    """The databases named `prefix`... (of `among`, if given), once there are `count`."""
    deadline = time.monotonic() + 120
    while True:
        with pg_server.connect() as admin:
            names = {
                r[0]
                for r in admin.execute(
                    "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (prefix,)
                )
            }
        if among is not None:
            names &= among
        if len(names) == count or time.monotonic() > deadline:
            return names
        time.sleep(0.05)
