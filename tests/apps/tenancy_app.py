"""Handlers for the identity and tenancy tests, run by real worker processes:

    pgsched worker --app tests.apps.tenancy_app:app --lanes normal,batch ...

Every handler writes what it did to tables in ``public`` (created by ``create_tables``
before any worker starts), through its own autocommit connection unless it writes through
``ctx.connection`` on purpose:

``tenancy_attempts``  one row per handler call that got as far as the handler (what ran)
``tenancy_effects``   the handlers' effects (what must happen once)
``tenancy_once``      what ``ctx.once`` / ``ctx.aonce`` answered
``tenancy_failing``   the control table: tenants listed here fail on purpose
``tenancy_secrets``   a table with a row-level-security policy on ``pgsched.tenant_id``

A handler asked to die calls ``os.kill(os.getpid(), SIGKILL)``: the whole worker process
goes at once, with no chance to report anything, like a machine that lost power.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg
from psycopg import sql

from pgsched import App, RetryPolicy, TaskContext, TaskHandler

app = App()

QUICK_RETRY = RetryPolicy(base_seconds=0.2, factor=2.0, jitter=0.0)

TABLES = """
CREATE TABLE IF NOT EXISTS public.tenancy_attempts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    task_type text NOT NULL,
    tenant_id text NOT NULL,
    attempt bigint NOT NULL,
    worker text NOT NULL,
    step text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.tenancy_effects (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    task_type text NOT NULL,
    tenant_id text NOT NULL,
    idem_key text,
    attempt bigint NOT NULL,
    worker text NOT NULL,
    seen_tenant text,
    seen_rows text[],
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.tenancy_once (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    task_type text NOT NULL,
    tenant_id text NOT NULL,
    attempt bigint NOT NULL,
    once_key text NOT NULL,
    first_time boolean NOT NULL
);
CREATE TABLE IF NOT EXISTS public.tenancy_failing (tenant_id text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS public.tenancy_secrets (tenant_id text NOT NULL, secret text NOT NULL);
ALTER TABLE public.tenancy_secrets ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenancy_secrets_own_tenant ON public.tenancy_secrets;
CREATE POLICY tenancy_secrets_own_tenant ON public.tenancy_secrets
    USING (tenant_id = current_setting('pgsched.tenant_id', true));
"""


def create_tables(conn: psycopg.Connection[Any]) -> None:
    """The tables these handlers write to; call before starting a worker."""
    conn.execute(TABLES)


def _dsn() -> str:
    return os.environ["PGSCHED_DSN"]


_ATTEMPT = (
    "INSERT INTO public.tenancy_attempts (task_id, task_type, tenant_id, attempt, worker, step)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
_EFFECT = (
    "INSERT INTO public.tenancy_effects"
    " (task_id, task_type, tenant_id, idem_key, attempt, worker, seen_tenant, seen_rows)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
_ONCE = (
    "INSERT INTO public.tenancy_once (task_id, task_type, tenant_id, attempt, once_key, first_time)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


def _attempt_row(ctx: TaskContext, step: str) -> tuple[Any, ...]:
    t = ctx.task
    return (t.id, t.task_type, t.tenant_id, t.attempt, ctx.worker_id, step)


def _effect_row(
    ctx: TaskContext, seen_tenant: str | None = None, seen_rows: list[str] | None = None
) -> tuple[Any, ...]:
    t = ctx.task
    return (
        t.id,
        t.task_type,
        t.tenant_id,
        t.idempotency_key,
        t.attempt,
        ctx.worker_id,
        seen_tenant,
        seen_rows,
    )


def log_attempt(ctx: TaskContext, step: str) -> None:
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(_ATTEMPT, _attempt_row(ctx, step))


async def alog_attempt(ctx: TaskContext, step: str) -> None:
    async with await psycopg.AsyncConnection.connect(_dsn(), autocommit=True) as conn:
        await conn.execute(_ATTEMPT, _attempt_row(ctx, step))


def die() -> None:
    """The worker process dies here and now (no outcome, no lease release)."""
    os.kill(os.getpid(), signal.SIGKILL)


# -- a completion lost after execute ---------------------------------------------------


class EffectThenDie(TaskHandler):
    """execute performs the effect (committed at once, outside pgsched). With payload
    {"die_after_execute": true}, after_execute kills the worker on the first attempt:
    after the ledger write, before the completion is reported."""

    def execute(self, ctx: TaskContext) -> None:
        log_attempt(ctx, "execute")
        with psycopg.connect(_dsn(), autocommit=True) as conn:
            conn.execute(_EFFECT, _effect_row(ctx))

    def after_execute(self, ctx: TaskContext) -> None:
        log_attempt(ctx, "after_execute")
        if ctx.payload.get("die_after_execute") and ctx.task.attempt == 1:
            die()


app.register("effect_then_die", EffectThenDie(), retry=QUICK_RETRY)


# -- ctx.connection: the effect commits with the completion ----------------------------


def _tx_plan(ctx: TaskContext) -> tuple[str | None, bool]:
    role = ctx.payload.get("rls_role")
    dies = ctx.payload.get("die_on_attempt") == ctx.task.attempt
    return role, dies


@app.handler("tx_effect", transactional=True, retry=QUICK_RETRY)
def tx_effect(ctx: TaskContext) -> None:
    """Writes its effect through ctx.connection, with what the connection showed it: the
    `pgsched.tenant_id` setting and (as payload["rls_role"], a role row-level security
    applies to) the rows of tenancy_secrets it could see. payload["die_on_attempt"]: kill
    the worker on that attempt, after the write and before returning."""
    role, dies = _tx_plan(ctx)
    conn = ctx.connection
    seen_tenant = conn.execute("SELECT current_setting('pgsched.tenant_id', true)").fetchone()[0]
    seen_rows = None
    if role:
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        rows = conn.execute(
            "SELECT tenant_id || ':' || secret FROM public.tenancy_secrets ORDER BY 1"
        ).fetchall()
        seen_rows = [r[0] for r in rows]
        conn.execute("RESET ROLE")
    conn.execute(_EFFECT, _effect_row(ctx, seen_tenant, seen_rows))
    log_attempt(ctx, "wrote")
    if dies:
        die()


@app.handler("tx_effect_async", transactional=True, retry=QUICK_RETRY)
async def tx_effect_async(ctx: TaskContext) -> None:
    """tx_effect with an async handler (ctx.connection is an AsyncConnection)."""
    role, dies = _tx_plan(ctx)
    conn = ctx.connection
    cur = await conn.execute("SELECT current_setting('pgsched.tenant_id', true)")
    seen_tenant = (await cur.fetchone())[0]
    seen_rows = None
    if role:
        await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        cur = await conn.execute(
            "SELECT tenant_id || ':' || secret FROM public.tenancy_secrets ORDER BY 1"
        )
        seen_rows = [r[0] for r in await cur.fetchall()]
        await conn.execute("RESET ROLE")
    await conn.execute(_EFFECT, _effect_row(ctx, seen_tenant, seen_rows))
    await alog_attempt(ctx, "wrote")
    if dies:
        die()


# -- ctx.once ----------------------------------------------------------------------------


@app.handler("welcome", retry=QUICK_RETRY)
def welcome(ctx: TaskContext) -> None:
    """Asks ctx.once('welcome-email') and records the answer; payload {"fail_first": true}
    fails the first attempt after asking (so the retry asks again)."""
    first = ctx.once("welcome-email")
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        t = ctx.task
        conn.execute(_ONCE, (t.id, t.task_type, t.tenant_id, t.attempt, "welcome-email", first))
    if ctx.payload.get("fail_first") and ctx.task.attempt == 1:
        raise RuntimeError("failed after asking once (on purpose)")


@app.handler("welcome_async", retry=QUICK_RETRY)
async def welcome_async(ctx: TaskContext) -> None:
    """welcome, with ctx.aonce from an async handler."""
    first = await ctx.aonce("welcome-email")
    async with await psycopg.AsyncConnection.connect(_dsn(), autocommit=True) as conn:
        t = ctx.task
        await conn.execute(
            _ONCE, (t.id, t.task_type, t.tenant_id, t.attempt, "welcome-email", first)
        )
    if ctx.payload.get("fail_first") and ctx.task.attempt == 1:
        raise RuntimeError("failed after asking once (on purpose)")


# -- per-tenant work of product and global tasks -----------------------------------------


@app.handler("tenant_job", retry=QUICK_RETRY)
async def tenant_job(ctx: TaskContext) -> None:
    """One tenant's share of a product/global task: fails while the tenant is listed in
    tenancy_failing, otherwise records its effect."""
    async with await psycopg.AsyncConnection.connect(_dsn(), autocommit=True) as conn:
        await conn.execute(_ATTEMPT, _attempt_row(ctx, "execute"))
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM public.tenancy_failing WHERE tenant_id = %s)",
            (ctx.tenant_id,),
        )
        row = await cur.fetchone()
        if row and row[0]:
            raise RuntimeError(f"tenant {ctx.tenant_id} is failing on purpose")
        await conn.execute(_EFFECT, _effect_row(ctx))
