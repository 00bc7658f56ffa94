"""Handlers for the worker fault tests (tests/integration/test_worker_faults.py), in real
worker processes:

    pgsched worker --app tests.apps.faults:app --lanes normal ...

Each one provokes one fault an operator would meet: error text Postgres cannot store, an
outcome the database refuses, transactional work on connections that die under it.
"""

from __future__ import annotations

import asyncio
import time

from pgsched import App, RetryPolicy, TaskContext

app = App()

_TX_INSERT = "INSERT INTO public.worker_test_tx (task_id, note) VALUES (%s, %s)"
# Attempts lost to killed connections come back quickly.
QUICK_RETRY = RetryPolicy(base_seconds=0.2, cap_seconds=1.0, jitter=0)


@app.handler("quick")
async def quick(ctx: TaskContext) -> None:
    return None


@app.handler("nul_error")
async def nul_error(ctx: TaskContext) -> None:
    raise RuntimeError("upstream said \x00 and stopped")


@app.handler("surrogate_error")
def surrogate_error(ctx: TaskContext) -> None:
    # What os.fsdecode makes of undecodable bytes: a lone surrogate, invalid in UTF-8.
    raise RuntimeError("file b'\\xff' is named \udcff")


# A retry delay no timestamp can hold: the database refuses the whole outcome row.
# RetryPolicy refuses such a cap (30 days at most), so the values are set past its checks.
BEYOND_TIME = RetryPolicy(jitter=0)
object.__setattr__(BEYOND_TIME, "base_seconds", 1e13)
object.__setattr__(BEYOND_TIME, "cap_seconds", 1e13)


@app.handler("retry_beyond_time", retry=BEYOND_TIME)
async def retry_beyond_time(ctx: TaskContext) -> None:
    raise RuntimeError("try again in three hundred thousand years")


@app.handler("tx_async", transactional=True, retry=QUICK_RETRY)
async def tx_async(ctx: TaskContext) -> None:
    await ctx.connection.execute(_TX_INSERT, (ctx.task.id, "async"))
    await asyncio.sleep(ctx.payload.get("linger", 0))


@app.handler("tx_sync", transactional=True, retry=QUICK_RETRY)
def tx_sync(ctx: TaskContext) -> None:
    ctx.connection.execute(_TX_INSERT, (ctx.task.id, "sync"))
    time.sleep(ctx.payload.get("linger", 0))


@app.handler("sleepy")
async def sleepy(ctx: TaskContext) -> None:
    await asyncio.sleep(ctx.payload["seconds"])
