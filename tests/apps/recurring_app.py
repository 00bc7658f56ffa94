"""Handlers for the recurring-schedule and sweep tests, run by real worker processes:

    pgsched worker --app tests.apps.recurring_app:app --lanes normal ...

Each run writes one row to ``public.recurring_test_log`` (task, type, schedule, worker and
the database clock when the handler started), so a test can see what ran and when.
``create_tables`` creates the table before any worker starts. The database is the one in
``PGSCHED_DSN``.

``tenant_seen`` / ``tenant_seen_async`` are transactional: each writes, through
``ctx.connection``, the ``pgsched.tenant_id`` setting its transaction showed it to
``public.tenant_seen_log``.
"""

from __future__ import annotations

import os

import psycopg

from pgsched import App, TaskContext

app = App()

TABLES = """
CREATE TABLE IF NOT EXISTS public.recurring_test_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    task_type text NOT NULL,
    schedule_id bigint,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.tenant_seen_log (
    task_id bigint NOT NULL,
    tenant_seen text
);
"""

SEEN = (
    "INSERT INTO public.tenant_seen_log (task_id, tenant_seen)"
    " VALUES (%s, current_setting('pgsched.tenant_id', true))"
)


def create_tables(conn: psycopg.Connection) -> None:
    conn.execute(TABLES)


async def record(ctx: TaskContext) -> None:
    async with await psycopg.AsyncConnection.connect(
        os.environ["PGSCHED_DSN"], autocommit=True
    ) as conn:
        await conn.execute(
            "INSERT INTO public.recurring_test_log (task_id, task_type, schedule_id, worker)"
            " VALUES (%s, %s, %s, %s)",
            (ctx.task.id, ctx.task.task_type, ctx.task.schedule_id, ctx.worker_id),
        )


for _task_type in ("minutely", "note"):
    app.register(_task_type, record)


@app.handler("tenant_seen", transactional=True)
def tenant_seen(ctx: TaskContext) -> None:
    ctx.connection.execute(SEEN, (ctx.task.id,))


@app.handler("tenant_seen_async", transactional=True)
async def tenant_seen_async(ctx: TaskContext) -> None:
    await ctx.connection.execute(SEEN, (ctx.task.id,))
