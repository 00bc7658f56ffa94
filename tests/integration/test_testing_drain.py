"""pgsched.testing against real Postgres: drain runs tasks through the worker's runner and
writes what a worker writes; the assertions read the rows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, RetryPolicy, TaskHandler
from pgsched.errors import ConfigError
from pgsched.testing import (
    DrainResult,
    assert_not_scheduled,
    assert_scheduled,
    drain,
    drain_async,
    scheduled_tasks,
)


def _app(dsn: str, calls: list[str]) -> App:
    app = App(dsn)

    @app.handler("ok")
    def ok(ctx: Any) -> None:
        calls.append(f"ok:{ctx.payload['n']}")

    @app.handler("flaky", retry=RetryPolicy(base_seconds=60, cap_seconds=60))
    def flaky(ctx: Any) -> None:
        calls.append(f"flaky:{ctx.task.attempt}")
        raise RuntimeError("down")

    class Checked(TaskHandler):
        def validate(self, ctx: Any) -> None:
            calls.append("validate")
            if ctx.payload.get("bad"):
                raise ValueError("bad payload")

        def before_execute(self, ctx: Any) -> None:
            calls.append("before")

        async def execute(self, ctx: Any) -> None:
            calls.append("execute")

        def after_execute(self, ctx: Any) -> None:
            calls.append("after")

    app.register("checked", Checked())
    return app


def _status(conn: psycopg.Connection[Any], task_id: int) -> tuple[str, int, str | None]:
    row = conn.execute(
        "SELECT status::text, attempts, last_error FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_drain_runs_the_lifecycle_and_writes_the_outcome(db_dsn: str, conn: Any) -> None:
    calls: list[str] = []
    app = _app(db_dsn, calls)
    good = app.schedule("checked", {"bad": False})
    bad = app.schedule("checked", {"bad": True})
    result = drain(app)
    assert calls.count("execute") == 1
    assert calls == ["validate", "before", "execute", "after", "validate"]
    assert _status(conn, good)[0] == "COMPLETED"
    status, _, error = _status(conn, bad)
    assert status == "FAILED" and error is not None and "bad payload" in error
    assert (result.completed, result.failed) == (1, 1)
    # The DEAD lane holds it, as a worker leaves it.
    assert [row["id"] for row in app.dead_list()] == [bad]


def test_retries_run_again_as_of_a_later_time_until_dead(db_dsn: str, conn: Any) -> None:
    calls: list[str] = []
    app = _app(db_dsn, calls)
    task = app.schedule("flaky", max_attempts=3)
    # Now: one attempt; its retry is due in a minute, not yet.
    first = drain(app)
    assert [r.outcome for r in first.ran] == ["RETRY"]
    assert _status(conn, task)[:2] == ("QUEUED", 1)
    # An hour on, by the claim's judgement: the retries run until the task is DEAD.
    later = datetime.now(UTC) + timedelta(hours=1)
    rest = drain(app, as_of=later)
    assert [r.outcome for r in rest.ran] == ["RETRY", "FAILED"]
    assert calls == ["flaky:1", "flaky:2", "flaky:3"]
    assert _status(conn, task)[:2] == ("FAILED", 3)
    assert_scheduled("flaky", statuses=("FAILED",), app=app, count=1)


def test_drain_reaches_cold_tasks_as_of_their_due_time(db_dsn: str, conn: Any) -> None:
    calls: list[str] = []
    app = _app(db_dsn, calls)
    in_a_week = datetime.now(UTC) + timedelta(days=7)
    task = app.schedule("ok", {"n": 1}, run_at=in_a_week)
    assert _status(conn, task)[0] == "PENDING"
    assert len(drain(app)) == 0
    assert len(drain(app, as_of=in_a_week - timedelta(minutes=1))) == 0
    assert drain(app, as_of=in_a_week + timedelta(seconds=1)).completed == 1
    assert calls == ["ok:1"]


def test_lanes_and_one_pass(db_dsn: str) -> None:
    calls: list[str] = []
    app = _app(db_dsn, calls)
    app.schedule("ok", {"n": 1}, priority=9)  # HIGH
    app.schedule("ok", {"n": 2}, priority=1)  # LOW
    assert drain(app, lanes=["low"]).completed == 1
    assert calls == ["ok:2"]
    assert drain(app, lanes="HIGH", until_empty=False).completed == 1
    with pytest.raises(ConfigError, match="lanes: unknown lane 'dead'"):
        drain(app, lanes=["dead"])
    with pytest.raises(ConfigError, match="as_of must carry a time zone"):
        drain(app, as_of=datetime(2030, 1, 1))


def test_assertions_read_what_is_scheduled(db_dsn: str) -> None:
    app = App(db_dsn)
    at = datetime.now(UTC) + timedelta(hours=2)
    app.schedule("email", {"to": "a@b.c", "lang": "en"}, tenant_id="acme", run_at=at)
    found = assert_scheduled("email", payload={"to": "a@b.c"}, tenant_id="acme", app=app)
    assert found[0].lane == "NORMAL" and found[0].status == "QUEUED"
    assert_scheduled("email", run_at=at, app=app, count=1)
    assert_not_scheduled("email", tenant_id="other", app=app)
    assert_not_scheduled("email", run_at=at + timedelta(minutes=5), app=app)
    with pytest.raises(AssertionError, match=r"found 0; there are:\n  task \d+: email"):
        assert_scheduled("email", payload={"to": "x@y.z"}, app=app)
    with pytest.raises(AssertionError, match="expected no task matching task_type='email'"):
        assert_not_scheduled("email", app=app)
    assert scheduled_tasks("nothing", app=app) == []


def test_drain_and_assertions_inside_a_callers_transaction(db_dsn: str, conn: Any) -> None:
    calls: list[str] = []
    app = _app(db_dsn, calls)
    with psycopg.connect(db_dsn) as tx:
        task = app.schedule("ok", {"n": 7}, conn=tx)
        assert_scheduled("ok", payload={"n": 7}, conn=tx)
        assert drain(app, conn=tx).completed == 1
        assert calls == ["ok:7"]
        assert_not_scheduled("ok", conn=tx)
        tx.rollback()
    # Nothing of it outlived the transaction.
    assert conn.execute("SELECT count(*) FROM pgsched.tasks WHERE id = %s", (task,)).fetchone() == (
        0,
    )


def _ledger_app(dsn: str) -> App:
    app = App(dsn)

    @app.handler("credit", transactional=True)
    def credit(ctx: Any) -> None:
        ctx.connection.execute("INSERT INTO public.ledger VALUES (%s)", (ctx.payload["n"],))
        if ctx.payload.get("fail"):
            raise RuntimeError("refused after writing")

    @app.handler("acredit", transactional=True)
    async def acredit(ctx: Any) -> None:
        await ctx.connection.execute("INSERT INTO public.ledger VALUES (%s)", (ctx.payload["n"],))

    return app


def test_transactional_handlers_commit_with_their_completion(db_dsn: str, conn: Any) -> None:
    conn.execute("CREATE TABLE public.ledger (n int)")
    app = _ledger_app(db_dsn)
    ok = app.schedule("credit", {"n": 1})
    aok = app.schedule("acredit", {"n": 2})
    bad = app.schedule("credit", {"n": 3, "fail": True})
    result = drain(app)
    assert {(r.task_id, r.outcome) for r in result.ran} == {
        (ok, "COMPLETED"),
        (aok, "COMPLETED"),
        (bad, "RETRY"),
    }
    # The failed attempt's write rolled back with it.
    assert conn.execute("SELECT array_agg(n ORDER BY n) FROM public.ledger").fetchone() == ([1, 2],)
    assert _status(conn, ok)[0] == "COMPLETED" and _status(conn, aok)[0] == "COMPLETED"


def test_transactional_handlers_in_a_callers_transaction_use_a_savepoint(
    db_dsn: str, conn: Any
) -> None:
    conn.execute("CREATE TABLE public.ledger (n int)")
    app = _ledger_app(db_dsn)
    with psycopg.connect(db_dsn) as tx:
        ok = app.schedule("credit", {"n": 1}, conn=tx)
        bad = app.schedule("credit", {"n": 3, "fail": True}, conn=tx)
        aok = app.schedule("acredit", {"n": 2}, conn=tx)
        result = drain(app, conn=tx)
        outcomes = {r.task_id: r for r in result.ran}
        assert outcomes[ok].outcome == "COMPLETED"
        assert outcomes[bad].outcome == "RETRY"
        # An async transactional handler needs an AsyncConnection in this transaction,
        # which cannot be had: its attempt fails, saying why, and nothing else is harmed.
        assert outcomes[aok].outcome == "RETRY"
        assert "drain on a database" in (outcomes[aok].error or "")
        assert tx.execute("SELECT array_agg(n) FROM public.ledger").fetchone() == ([1],)
        assert_scheduled("acredit", conn=tx)
        tx.rollback()
    assert conn.execute("SELECT count(*) FROM public.ledger").fetchone() == (0,)


def test_drain_async_from_a_running_event_loop(db_dsn: str, conn: Any) -> None:
    app = App(db_dsn)
    seen: list[int] = []

    @app.handler("async_ok")
    async def async_ok(ctx: Any) -> None:
        seen.append(ctx.payload["n"])

    async def test_body() -> DrainResult:
        # As an async test would: scheduled and drained inside the running loop.
        for n in range(3):
            app.schedule("async_ok", {"n": n})
        with pytest.raises(ConfigError, match="from async code, await drain_async"):
            drain(app)
        return await drain_async(app)

    result = asyncio.run(test_body())
    assert result.completed == 3 and seen == [0, 1, 2]
