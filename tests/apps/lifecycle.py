"""Handlers for the lifecycle tests (snooze, retry schedules, progress), run in real worker
processes:

    pgsched worker --app tests.apps.lifecycle:app --lanes normal ...

Each comes in the places a handler can run: a thread of the lane's pool (a plain `def`), a
handler process (`isolation="process"`) and the lane's event loop (`async def`).
"""

from __future__ import annotations

from datetime import timedelta

from pgsched import App, RetryPolicy, Snooze, TaskContext

app = App()

QUICK_RETRY = RetryPolicy(base_seconds=0.1, jitter=0.0)


def snooze_first_run(ctx: TaskContext) -> None:
    """Snoozes on its first run (payload seconds, with a reason), completes on the next."""
    if ctx.task.snoozes == 0:
        ctx.snooze(ctx.payload.get("seconds", 1), "waiting for the upstream export")


app.register("snooze_thread", snooze_first_run)
app.register("snooze_process", snooze_first_run, isolation="process")


@app.handler("snooze_async")
async def snooze_async(ctx: TaskContext) -> None:
    if ctx.task.snoozes == 0:
        raise Snooze(timedelta(seconds=ctx.payload.get("seconds", 1)))


def snooze_forever(ctx: TaskContext) -> None:
    ctx.snooze(0, "never ready")


app.register("snooze_capped", snooze_forever, max_snoozes=2, retry=QUICK_RETRY)
app.register(
    "snooze_capped_process",
    snooze_forever,
    max_snoozes=2,
    retry=QUICK_RETRY,
    isolation="process",
)


@app.handler("snooze_bad", retry=QUICK_RETRY)
def snooze_bad(ctx: TaskContext) -> None:
    ctx.snooze(-5)


# -- retry schedules -----------------------------------------------------------------------


def always_fails(ctx: TaskContext) -> None:
    if ctx.payload.get("permanent"):
        raise ValueError("permanent: the account is closed")
    raise RuntimeError("flaky: the service is warming up")


def permanent_gives_up(attempt: int, error: BaseException) -> float | None:
    """Give up on a permanent error; else wait 0.1 s per attempt so far."""
    if "permanent" in str(error):
        return None
    return attempt * 0.1


def broken_rule(attempt: int, error: BaseException) -> float | None:
    raise KeyError("no rule for this error")


app.register("retry_listed", always_fails, retry_delays=[0.2, 1.5])
app.register("retry_decided", always_fails, retry_delays=permanent_gives_up)
app.register(
    "retry_decided_process", always_fails, retry_delays=permanent_gives_up, isolation="process"
)
app.register("retry_broken_rule", always_fails, retry_delays=broken_rule)


# -- progress ------------------------------------------------------------------------------


def busy_progress(ctx: TaskContext) -> None:
    """Reports progress in a tight loop for payload seconds (every call a report), then
    its last one: 1.0, 'done'."""
    import time

    seconds = ctx.payload.get("seconds", 2.5)
    start = time.monotonic()
    calls = 0
    while (spent := time.monotonic() - start) < seconds:
        ctx.progress(min(spent / seconds, 0.99), f"call {calls}")
        calls += 1
    ctx.progress(1.0, f"done after {calls + 1} calls")


app.register("progress_thread", busy_progress)
app.register("progress_process", busy_progress, isolation="process")


@app.handler("progress_async")
async def progress_async(ctx: TaskContext) -> None:
    import asyncio

    for step in range(200):
        ctx.progress(step / 200, f"step {step}")
        await asyncio.sleep(0.01)
    ctx.progress(1.0, "done after 201 calls")


@app.handler("progress_bad", retry=QUICK_RETRY)
def progress_bad(ctx: TaskContext) -> None:
    ctx.progress(1.5)
