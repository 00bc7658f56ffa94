"""Handlers that misbehave, for the isolation tests (tests/integration/test_worker_isolation.py and
tests/integration/test_handler_processes.py):

    pgsched worker --app tests.apps.isolation:app --lanes high,low ...

Plain `def` handlers that hang past their timeout (in a handler process, the default, or
in a thread), an `async def` that blocks the event loop, handlers whose process dies,
handlers that raise SystemExit / KeyboardInterrupt / GeneratorExit. Each records its start
in ``public.worker_test_log`` (see tests/apps/dispatch.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from pgsched import App, RetryPolicy, TaskContext, TaskHandler

from .dispatch import arecord, record

app = App()

QUICK_RETRY = RetryPolicy(base_seconds=0.1, jitter=0.0)


@app.handler("hung_sync", timeout=1.0, retry=QUICK_RETRY)
def hung_sync(ctx: TaskContext) -> None:
    """Hangs far past its 1 s timeout, in a handler process (the default for a plain
    handler with a timeout): the process is killed when the timeout passes. Records the
    process id, to check that it is gone."""
    record(ctx, "start", str(os.getpid()))
    time.sleep(ctx.payload.get("seconds", 60))


@app.handler("hung_sync_thread", timeout=1.0, retry=QUICK_RETRY, isolation="thread")
def hung_sync_thread(ctx: TaskContext) -> None:
    """Hangs far past its 1 s timeout in a thread (isolation='thread'): the thread stays
    busy after the attempt failed."""
    record(ctx, "start")
    time.sleep(ctx.payload.get("seconds", 60))


@app.handler("dies", isolation="process", retry=QUICK_RETRY)
def dies(ctx: TaskContext) -> None:
    """Its process dies mid-task: payload['how'] is 'sigkill' (what the OOM killer
    sends) or 'segfault' (a real segmentation fault, in C)."""
    record(ctx, "start")
    if ctx.payload["how"] == "segfault":
        import ctypes

        ctypes.string_at(0)
    os.kill(os.getpid(), signal.SIGKILL)


@app.handler("process_steps", timeout=30.0)
class ProcessSteps(TaskHandler):
    """Every step plain, with a timeout: all of them run in one handler process, in order,
    and ctx.state carries between them."""

    def before_execute(self, ctx: TaskContext) -> None:
        ctx.state["pid"] = os.getpid()

    def execute(self, ctx: TaskContext) -> None:
        record(ctx, "execute", f"{ctx.state['pid']} {os.getpid()}")
        if ctx.payload.get("fail"):
            raise ValueError("execute failed on purpose")


@app.handler("waits_for_cancel", timeout=60.0)
def waits_for_cancel(ctx: TaskContext) -> None:
    """In a handler process: stops when asked (ctx.cancelled), by raising."""
    record(ctx, "start", str(os.getpid()))
    while not ctx.wait_cancelled(0.05):
        pass
    record(ctx, "saw_cancel")
    ctx.raise_if_cancelled()


@app.handler("ignores_cancel", timeout=60.0)
def ignores_cancel(ctx: TaskContext) -> None:
    """In a handler process: never looks at ctx.cancelled; killed after the grace."""
    record(ctx, "start", str(os.getpid()))
    time.sleep(60)


@app.handler("quick_sync")
def quick_sync(ctx: TaskContext) -> None:
    """Needs a thread of its lane's pool, and nothing else."""
    return None


@app.handler("quick_async")
async def quick_async(ctx: TaskContext) -> None:
    return None


@app.handler("blocks_loop")
async def blocks_loop(ctx: TaskContext) -> None:
    """An async handler that blocks the event loop (a bug the watchdog must name)."""
    await arecord(ctx, "start")
    time.sleep(ctx.payload["seconds"])


def raise_base(name: str) -> None:
    """What payload['raise'] names: each is a BaseException, not an Exception."""
    if name == "SystemExit":
        sys.exit(3)
    if name == "KeyboardInterrupt":
        raise KeyboardInterrupt("raised by a handler")
    if name == "GeneratorExit":
        raise GeneratorExit("raised by a handler")
    raise AssertionError(f"unknown exception {name!r}")


@app.handler("raises_base_async", retry=QUICK_RETRY)
async def raises_base_async(ctx: TaskContext) -> None:
    await arecord(ctx, "start")
    raise_base(ctx.payload["raise"])


@app.handler("raises_base_sync", retry=QUICK_RETRY)
def raises_base_sync(ctx: TaskContext) -> None:
    record(ctx, "start")
    raise_base(ctx.payload["raise"])


@app.handler("holds_a_lease")
async def holds_a_lease(ctx: TaskContext) -> None:
    """Works payload['seconds'] s; records 'end' only if nobody stopped it first."""
    await arecord(ctx, "start")
    await asyncio.sleep(ctx.payload["seconds"])
    await arecord(ctx, "end")
