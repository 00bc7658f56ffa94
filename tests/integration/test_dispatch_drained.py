"""The worker tests' handlers (tests/apps/dispatch.py), run in this process by
pgsched.testing's drain: the lifecycle, the DEAD lane and retries leave the rows and
events a worker process leaves (compare tests/integration/test_worker_lifecycle.py and
tests/integration/test_worker_retries.py, which run the same handlers in `pgsched worker`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgsched.testing import assert_not_scheduled, assert_scheduled, drain, scheduled_tasks
from tests.support.worker_helpers import create_test_tables, schedule, steps, task, transitions

RETRY_STORY = [
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "QUEUED"),
    ("QUEUED", "PROCESSING"),
    ("PROCESSING", "FAILED"),
]


@pytest.fixture
def dispatch(conn: psycopg.Connection, db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The dispatch App, pointed at this test's database (its handlers log there)."""
    create_test_tables(conn)
    monkeypatch.setenv("PGSCHED_DSN", db_dsn)
    from tests.apps.dispatch import app

    monkeypatch.setattr(app, "_dsn", db_dsn)
    return app


def test_validate_refusal_is_dead_after_one_attempt(
    conn: psycopg.Connection, dispatch: Any
) -> None:
    refused = schedule(conn, "refuses", '{"subject": "hello"}', max_attempts=5)
    accepted = schedule(conn, "refuses", '{"to": "a@example.com"}', max_attempts=5)
    result = drain(dispatch)
    assert {(r.task_id, r.outcome) for r in result.ran} == {
        (refused, "FAILED"),
        (accepted, "COMPLETED"),
    }
    assert task(conn, refused)["attempts"] == 1
    assert transitions(conn, refused) == [("QUEUED", "PROCESSING"), ("PROCESSING", "FAILED")]
    assert [s["step"] for s in steps(conn, refused)] == ["validate"]
    assert [s["step"] for s in steps(conn, accepted)] == ["validate", "before_execute", "execute"]
    assert_scheduled("refuses", statuses=["FAILED"], payload={"subject": "hello"}, app=dispatch)
    assert_not_scheduled("refuses", app=dispatch)


def test_retries_back_off_then_dead(conn: psycopg.Connection, dispatch: Any) -> None:
    task_id = schedule(conn, "always_fails", max_attempts=3)
    first = drain(dispatch)
    assert [r.outcome for r in first.ran] == ["RETRY"]
    # The retry waits out its backoff by the database's clock: due, but not yet.
    (waiting,) = scheduled_tasks("always_fails", app=dispatch)
    assert waiting.attempts == 1
    rest = drain(dispatch, as_of=waiting.run_at + timedelta(minutes=1))
    assert [(r.attempt, r.outcome) for r in rest.ran] == [(2, "RETRY"), (3, "FAILED")]
    assert transitions(conn, task_id) == RETRY_STORY
    assert task(conn, task_id)["attempts"] == 3
