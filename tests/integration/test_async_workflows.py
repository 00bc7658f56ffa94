"""AsyncApp's workflows against real Postgres and real worker processes: depends_on,
`workflow`, `batch` and `result` awaited, with App's checks and errors (the same code in
pgsched.producer), and a caller's AsyncConnection transaction deciding whether a workflow
exists."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from pgsched import AsyncApp, AsyncWorkflow, InvalidTaskError, TaskSpec
from pgsched.errors import ResultTimeoutError, TaskFailedError

APP = "tests.apps.workflow_app:app"


def test_depends_on_workflow_batch_and_result_awaited_with_workers(
    db_dsn: str, workers: Any
) -> None:
    async def build() -> dict[str, Any]:
        async with AsyncApp(db_dsn) as app:
            charge = await app.schedule("wf_charge", {"order": "C-3", "amount": 7})
            email = await app.schedule("wf_email", depends_on=[charge])
            invoice = await app.schedule("wf_invoice", depends_on=[charge])
            archive = await app.schedule("wf_archive", depends_on=[email, invoice])
            wf = app.workflow("order-C-4")
            assert isinstance(wf, AsyncWorkflow)
            wf.step("charge", "wf_charge", {"order": "C-4", "amount": 1})
            wf.step("email", "wf_step_email", after=["charge"])
            steps = await wf.schedule()
            again = app.workflow("order-C-4")
            again.steps.extend(wf.steps)
            repeated = await again.schedule()
            members: list[TaskSpec | dict[str, Any]] = [
                TaskSpec(task_type="wf_member", payload={"n": n}) for n in range(4)
            ]
            members.append({"task_type": "wf_member", "payload": {"fail": True}, "max_attempts": 1})
            batch = await app.batch(members, on_complete={"task_type": "wf_batch_done"})
            return {
                "archive": archive,
                "steps": steps,
                "repeated": repeated,
                "batch": batch,
            }

    made = asyncio.run(build())
    assert list(made["steps"]) == ["charge", "email"]
    assert all(t.created for t in made["steps"].values())
    assert {n: (int(t), t.created) for n, t in made["repeated"].items()} == {
        n: (int(t), False) for n, t in made["steps"].items()
    }
    assert len(made["batch"].member_ids) == 5

    workers.start("W1", app=APP)

    async def wait() -> list[Any]:
        async with AsyncApp(db_dsn) as app:
            # Three waits at once, each on its own LISTEN connection.
            return list(
                await asyncio.gather(
                    app.result(made["archive"], timeout=60),
                    app.result(made["steps"]["email"], timeout=60),
                    app.result(made["batch"].callback_id, timeout=60),
                )
            )

    archived, emailed, counted = asyncio.run(wait())
    assert archived == [{"amount": 7, "emailed": "C-3"}, {"invoiced": "C-3"}]
    assert emailed == {"emailed": "C-4"}
    assert counted == {"total": 5, "completed": 4, "dead": 1, "members": 5}
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgsched.task_result_waiters").fetchone() == (0,)


def test_result_raises_as_apps_does_for_dead_cancelled_and_a_timeout(
    db_dsn: str, workers: Any
) -> None:
    workers.start("W1", app=APP)

    async def main() -> None:
        async with AsyncApp(db_dsn) as app:
            dead = await app.schedule("wf_dead", max_attempts=1)
            held = await app.schedule("wf_nothing", depends_on=[dead])
            with pytest.raises(TaskFailedError, match=rf"task {dead} is DEAD: .*always fails"):
                await app.result(dead, timeout=60)
            with pytest.raises(ResultTimeoutError, match=rf"task {held} did not finish within"):
                await app.result(held, timeout=0.5)
            # The cancel wakes a waiting result: LISTEN, not a poll of the timeout's length.
            waiting = asyncio.ensure_future(app.result(held, timeout=60))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            loop = asyncio.get_running_loop()
            started = loop.time()
            await app.cancel(held, "no longer wanted")
            with pytest.raises(TaskFailedError, match=rf"task {held} is CANCELLED: .*no longer"):
                await waiting
            assert loop.time() - started < 5

    asyncio.run(main())


def test_bad_workflows_and_batches_are_refused_as_apps_are_and_a_rollback_keeps_nothing(
    db_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    async def main() -> None:
        async with AsyncApp(db_dsn) as app:
            cycle = app.workflow().step("a", "t", after=["b"]).step("b", "t", after=["a"])
            with pytest.raises(InvalidTaskError, match="form a cycle"):
                await cycle.schedule()
            with pytest.raises(InvalidTaskError, match="after is a list of names"):
                app.workflow().step("a", "t", after="b")
            with pytest.raises(InvalidTaskError, match="a batch needs at least one member"):
                await app.batch([], on_complete={"task_type": "done"})
            with pytest.raises(InvalidTaskError, match=r"tasks\[1\]: tenant_id 'other'"):
                await app.batch(
                    [{"task_type": "m"}, {"task_type": "m", "tenant_id": "other"}],
                    on_complete={"task_type": "done"},
                )
            with pytest.raises(InvalidTaskError, match=r"depends_on: task \d+ does not exist"):
                await app.schedule("t", depends_on=[10**12])
            with pytest.raises(InvalidTaskError, match="depends_on: a list of task ids"):
                await app.schedule("t", depends_on=["1"])  # type: ignore[list-item]
            async with await psycopg.AsyncConnection.connect(db_dsn) as c:
                wf = app.workflow("rolled-back").step("a", "t").step("b", "t", after=["a"])
                await wf.schedule(conn=c)
                await app.batch([{"task_type": "m"}], on_complete={"task_type": "done"}, conn=c)
                await c.rollback()

    asyncio.run(main())
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgsched.task_dependencies").fetchone() == (0,)
