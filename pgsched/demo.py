"""The main job: see the engine work in under a minute (`pgsched demo`).

Schedules a mix of work across every tier (immediate, hot, cold) and lane (HIGH, NORMAL,
LOW, BATCH), including tasks that fail and retry, one that exhausts its retries, and one
that `validate` refuses; runs a worker until the due work is done; prints per-lane counts
and lateness percentiles, read back from the record (pgsched.task_runs).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from pgsched.app import App
from pgsched.handlers import TaskContext, TaskHandler
from pgsched.lanes import WORK_LANES
from pgsched.queries import query
from pgsched.retry import RetryPolicy
from pgsched.worker import Worker, WorkerConfig

app = App()
QUICK_RETRY = RetryPolicy(base_seconds=0.3, factor=2.0, jitter=0.1)


@app.handler("send_otp")
async def send_otp(ctx: TaskContext) -> None:
    await asyncio.sleep(0.001)  # a user is waiting: tiny and urgent


@app.handler("render_report")
def render_report(ctx: TaskContext) -> None:
    time.sleep(0.005)  # plain functions run in a thread pool


@app.handler("cleanup")
async def cleanup(ctx: TaskContext) -> None:
    await asyncio.sleep(0.002)


@app.handler("newsletter_chunk")
async def newsletter_chunk(ctx: TaskContext) -> None:
    await asyncio.sleep(0.002)


@app.handler("charge_card", retry=QUICK_RETRY)
async def charge_card(ctx: TaskContext) -> None:
    # The payment provider times out on the first try; the retry goes through.
    if ctx.task.attempt == 1:
        raise ConnectionError("payment provider timed out")


@app.handler("flaky_webhook", retry=QUICK_RETRY)
async def flaky_webhook(ctx: TaskContext) -> None:
    raise ConnectionError("webhook endpoint returned 503")


@app.handler("import_csv")
class ImportCsv(TaskHandler):
    def validate(self, ctx: TaskContext) -> None:
        if "url" not in ctx.payload:
            raise ValueError("payload has no 'url': this import can never run")

    async def execute(self, ctx: TaskContext) -> None:
        await asyncio.sleep(0.001)


def demo_tasks(now: datetime) -> list[dict[str, Any]]:
    rng = random.Random(7)
    tasks: list[dict[str, Any]] = []

    def add(task_type: str, count: int, **fields: Any) -> None:
        for i in range(count):
            tasks.append(
                {"task_type": task_type, "tenant_id": "demo", "payload": {"n": i}, **fields}
            )

    # IMMEDIATE: due now, every lane.
    add("send_otp", 60, priority=9)
    add("render_report", 80, priority=5)
    add("cleanup", 40, priority=2)
    add("newsletter_chunk", 200, lane="BATCH", priority=1)
    # IMMEDIATE, due at precise moments over the next few seconds.
    for i in range(100):
        due = now + timedelta(seconds=2 + i * 0.05 + rng.random() * 0.01)
        tasks.append({"task_type": "send_otp", "tenant_id": "demo", "priority": 8, "run_at": due})
    # Failures: one retry then success; one that exhausts its attempts; one validate refuses.
    add("charge_card", 5, priority=7)
    add("flaky_webhook", 1, priority=5, max_attempts=3)
    add("import_csv", 1, priority=5, payload={"file": "customers.csv"})
    # HOT: later today. COLD: beyond the 24 h window, costing only disk.
    add("render_report", 30, priority=5, run_at=now + timedelta(hours=3))
    add("cleanup", 20, priority=1, run_at=now + timedelta(days=3))
    add("send_otp", 10, priority=9, run_at=now + timedelta(days=30))
    return tasks


def run_demo(dsn: str, echo: Any = print) -> dict[str, Any]:
    """Schedule the mix, run a worker until the due work is done, return the figures."""
    demo = App(dsn)
    now = datetime.now(UTC)
    ids = demo.schedule_many(demo_tasks(now))
    first_id = min(ids)
    echo(f"scheduled {len(ids)} tasks (ids {first_id}..{max(ids)}) for tenant 'demo'")
    started = time.monotonic()
    worker_started = datetime.now(UTC)
    asyncio.run(_work_until_due_done(dsn, first_id, now + timedelta(seconds=8)))
    echo(f"worker ran until the due work was done: {time.monotonic() - started:.1f}s")
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        per_lane = cur.execute(query("demo_per_lane"), {"first_id": first_id}).fetchall()
        lateness = cur.execute(
            query("demo_lateness"), {"first_id": first_id, "worker_started": worker_started}
        ).fetchall()
    return {"per_lane": per_lane, "lateness": lateness}


@dataclass
class Unfinished:
    unfinished: int


async def _work_until_due_done(dsn: str, first_id: int, horizon: datetime) -> None:
    config = WorkerConfig(lanes=WORK_LANES, concurrency=32, batch_rate=400.0, poll_interval=0.5)
    worker = Worker(dsn, app.registry, config)
    running = asyncio.create_task(worker.run(install_signal_handlers=False))
    deadline = time.monotonic() + 60
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        conn.cursor(row_factory=class_row(Unfinished)) as cur,
    ):
        while time.monotonic() < deadline and not running.done():
            await asyncio.sleep(0.25)
            await cur.execute(query("demo_unfinished"), {"first_id": first_id, "horizon": horizon})
            row = await cur.fetchone()
            if row is not None and row.unfinished == 0 and datetime.now(UTC) > horizon:
                break
    worker.request_stop()
    await running
