"""Shared by the tests that drive a `LaneLoop` in-process against the test's database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from pgsched.claims import lane_next_due
from pgsched.handlers import HandlerRegistry
from pgsched.lanes import Lane
from pgsched.worker.config import WorkerConfig
from pgsched.worker.lane_engine import LaneEngine


@asynccontextmanager
async def opened_pool(dsn: str, max_size: int = 2) -> AsyncIterator[AsyncConnectionPool]:
    pool = AsyncConnectionPool(
        dsn, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


def next_due_in(
    pool: AsyncConnectionPool,
) -> Callable[[Lane], Awaitable[tuple[datetime | None, datetime]]]:
    """A loop's `next_due`, asked on a connection of `pool`."""

    async def next_due(lane: Lane) -> tuple[datetime | None, datetime]:
        async with pool.connection() as conn:
            return await lane_next_due(conn, lane.value)

    return next_due


def bare_lane_engine(dsn: str, worker_id: str) -> LaneEngine:
    """A NORMAL lane engine with no handlers, no heartbeat thread and no worker around it:
    for tests of one of its loops, or of its start and stop."""
    return LaneEngine(
        Lane.NORMAL,
        dsn,
        worker_id,
        HandlerRegistry(),
        WorkerConfig(lanes=(Lane.NORMAL,), rescue_interval=0.001),
        keeper=cast(Any, None),  # never reached by those tests: nothing is claimed
        metrics=None,
        plain_pool=None,
        open_plain_pool=False,
        on_thread_stuck=lambda *_: None,
        arm_next=lambda _: None,
        stop_worker=lambda: None,
    )
