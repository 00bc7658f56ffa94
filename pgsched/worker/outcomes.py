"""The outcome buffer: completions and failures written in batches, one statement a flush.

A flush happens when `flush_size` outcomes wait or `flush_interval` has passed since the
first one arrived. The lanes stop claiming while `flush_size` outcomes wait (`room`): a
worker never holds leases on far more tasks than it has running, and a slow flush slows
the claims instead of growing the next flush.

If the database is unreachable the outcomes stay buffered and are retried; should the
leases expire meanwhile, the tasks run again (at least once) and the late reports are
recorded as stale, never applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgsched.queries import query

log = logging.getLogger("pgsched.worker.outcomes")


@dataclass(frozen=True)
class Outcome:
    task_id: int
    lease_token: Any
    outcome: str  # COMPLETED | RETRY | FAILED | RELEASED
    error: str | None = None
    retry_delay: timedelta | None = None


def finish_params(outcomes: list[Outcome]) -> dict[str, Any]:
    return {
        "task_ids": [o.task_id for o in outcomes],
        "lease_tokens": [o.lease_token for o in outcomes],
        "outcomes": [o.outcome for o in outcomes],
        "errors": [o.error for o in outcomes],
        "retry_delays": [o.retry_delay for o in outcomes],
    }


class OutcomeBuffer:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        flush_size: int,
        flush_interval: float,
        on_flushed: Callable[[list[Outcome], set[int]], None],
    ) -> None:
        self._pool = pool
        self._flush_size = flush_size
        self._flush_interval = flush_interval
        self._on_flushed = on_flushed
        self._items: list[Outcome] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._roomy = asyncio.Event()
        self._roomy.set()
        self.flushed = 0
        self.stale = 0

    def add(self, outcome: Outcome) -> None:
        self._items.append(outcome)
        self._arrived.set()
        if len(self._items) >= self._flush_size:
            self._full.set()
            self._roomy.clear()

    def __len__(self) -> int:
        return len(self._items)

    async def room(self) -> None:
        """Return once fewer than `flush_size` outcomes wait to be written."""
        while len(self._items) >= self._flush_size:
            self._roomy.clear()
            await self._roomy.wait()

    async def run(self) -> None:
        while True:
            await self._arrived.wait()
            if not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self._flush_interval)
            await self.flush()

    async def flush(self) -> None:
        backoff = 0.05
        while self._items:
            # At most flush_size per statement: a backlog is written in bounded steps.
            batch = self._items[: self._flush_size]
            del self._items[: self._flush_size]
            self._arrived.clear()
            self._full.clear()
            try:
                async with self._pool.connection() as conn:
                    cur = await conn.execute(query("task_finish_many"), finish_params(batch))
                    rows = await cur.fetchall()
            except psycopg.Error as exc:
                log.warning("writing %d outcomes failed (%s); retrying", len(batch), exc)
                self._items[:0] = batch
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if len(self._items) < self._flush_size:
                self._roomy.set()
            self.flushed += len(batch)
            applied = {task_id for task_id, ok in rows if ok}
            self.stale += len(batch) - len(applied)
            self._on_flushed(batch, applied)
