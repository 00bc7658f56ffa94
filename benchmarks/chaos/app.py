"""Handlers for the chaos suite, in real worker processes:

    pgsched worker --app benchmarks.chaos.app:app ...

Every handler appends one line ``task_id attempt worker unix_time`` to the file named by
``PGSCHED_CHAOS_RUN_LOG`` when it starts. A file, not a table: it keeps recording while the
database is down, restarting or read-only, and an append of one short line is atomic, so
the lines of several workers never mix. Two lines with the same task and attempt are a
duplicate run beyond at-least-once retries.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from pgsched import App, RetryPolicy, TaskContext

app = App()

# Attempts lost to a fault come back quickly, so recovery is measured, not the backoff.
QUICK_RETRY = RetryPolicy(base_seconds=0.2, cap_seconds=1.0, jitter=0)


def record_run(ctx: TaskContext) -> None:
    line = f"{ctx.task.id} {ctx.task.attempt} {ctx.worker_id} {time.time():.3f}\n".encode()
    fd = os.open(os.environ["PGSCHED_CHAOS_RUN_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.handler("work", retry=QUICK_RETRY)
async def work(ctx: TaskContext) -> None:
    record_run(ctx)
    await asyncio.sleep(ctx.payload.get("seconds", 0.02))


@app.handler("work_sync", retry=QUICK_RETRY)
def work_sync(ctx: TaskContext) -> None:
    record_run(ctx)
    time.sleep(ctx.payload.get("seconds", 0.0))


@app.handler("work_tx", transactional=True, retry=QUICK_RETRY)
async def work_tx(ctx: TaskContext) -> None:
    record_run(ctx)
    await ctx.connection.execute(
        "INSERT INTO public.chaos_tx (task_id) VALUES (%s)", (ctx.task.id,)
    )
    await asyncio.sleep(ctx.payload.get("seconds", 0.05))


@app.handler("work_tx_sync", transactional=True, retry=QUICK_RETRY)
def work_tx_sync(ctx: TaskContext) -> None:
    record_run(ctx)
    ctx.connection.execute("INSERT INTO public.chaos_tx (task_id) VALUES (%s)", (ctx.task.id,))
    time.sleep(ctx.payload.get("seconds", 0.05))


@app.handler("nul_error", retry=QUICK_RETRY)
async def nul_error(ctx: TaskContext) -> None:
    record_run(ctx)
    raise RuntimeError("upstream said \x00 and stopped")


@app.handler("invalid_text_error", retry=QUICK_RETRY)
def invalid_text_error(ctx: TaskContext) -> None:
    record_run(ctx)
    raise RuntimeError("file b'\\xff' is named \udcff")


@app.handler("raises_base", retry=QUICK_RETRY)
def raises_base(ctx: TaskContext) -> None:
    record_run(ctx)
    name = ctx.payload["raise"]
    if name == "SystemExit":
        sys.exit(3)
    if name == "KeyboardInterrupt":
        raise KeyboardInterrupt("raised by a handler")
    raise GeneratorExit("raised by a handler")


@app.handler("hung_sync", timeout=1.0, retry=QUICK_RETRY)
def hung_sync(ctx: TaskContext) -> None:
    record_run(ctx)
    time.sleep(ctx.payload.get("seconds", 30))


# -- lanes contained (issue: a broken handler must not make HIGH wait) -------------------


@app.handler("hangs", timeout=2.0, retry=QUICK_RETRY)
def hangs(ctx: TaskContext) -> None:
    """A plain handler hung far past its 2 s timeout: a library call without a timeout.
    It runs in a handler process (the default for a plain handler with a timeout), which
    is killed when the timeout passes."""
    record_run(ctx)
    time.sleep(ctx.payload.get("seconds", 3600))


@app.handler("blocks_loop", retry=QUICK_RETRY)
async def blocks_loop(ctx: TaskContext) -> None:
    """A synchronous call inside `async def`: it blocks its lane's event loop."""
    record_run(ctx)
    time.sleep(ctx.payload["seconds"])


@app.handler("dies", isolation="process", retry=QUICK_RETRY)
def dies(ctx: TaskContext) -> None:
    """The process running it dies mid-task: SIGKILL (what the OOM killer sends) or a real
    segmentation fault in C code."""
    record_run(ctx)
    if ctx.payload["how"] == "segfault":
        import ctypes

        ctypes.string_at(0)
    os.kill(os.getpid(), 9)
