"""Handlers for the recurring-schedule and sweep tests, run by real worker processes:

    pgsched worker --app tests.apps.recurring_app:app --lanes normal ...

Each run writes one row to ``public.recurring_test_log`` (task, type, schedule, worker and
the database clock when the handler started), so a test can see what ran and when.
``create_tables`` creates the table before any worker starts. The database is the one in
``PGSCHED_DSN``.
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
"""


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
