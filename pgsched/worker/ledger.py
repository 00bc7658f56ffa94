"""The completed-work ledger, written in batches.

A keyed task's work is recorded as done right after `execute` returns, before its batched
completion: a worker dying in between leaves the entry, and the retry becomes a recorded
no-op instead of a second effect. Tasks finishing within a few milliseconds of each other
share one statement; each waits for its own batch, so `after_execute` still runs only once
its entry is written (or the write has failed, which the runner logs and carries on from:
the completion writes the entry too).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgsched.queries import query
from pgsched.worker.swallowed_cancels import raise_if_cancel_swallowed


class LedgerWriter:
    def __init__(self, pool: AsyncConnectionPool, batch_size: int = 200, window: float = 0.002):
        self._pool = pool
        self._batch_size = batch_size
        self._window = window
        self._pending: list[tuple[int, Any, asyncio.Future[bool]]] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()

    async def record_done(self, task_id: int, lease_token: Any) -> bool:
        """Write the ledger entry of a task this worker holds; True when it was written
        now (False: the lease is gone, or the key's work was already recorded)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((task_id, lease_token, done))
        self._arrived.set()
        if len(self._pending) >= self._batch_size:
            self._full.set()
        return await done

    async def run(self) -> None:
        try:
            while True:
                await self._arrived.wait()
                if not self._full.is_set():
                    # Not asyncio.wait_for, which on Python 3.11 can swallow the shutdown's
                    # cancel (see LaneLoop._sleep_until_work).
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._window):
                            await self._full.wait()
                batch = self._pending[: self._batch_size]
                del self._pending[: self._batch_size]
                if len(self._pending) < self._batch_size:
                    self._full.clear()
                if not self._pending:
                    self._arrived.clear()
                await self._write(batch)
                # A cancel landing as the pool handed the write its connection is swallowed.
                raise_if_cancel_swallowed()
        finally:
            # Stopping: nobody will write what is left; let its waiters carry on.
            for _, _, done in self._pending:
                if not done.done():
                    done.set_exception(self._stopped())

    @staticmethod
    def _stopped() -> RuntimeError:
        return RuntimeError("the ledger writer stopped")

    async def _write(self, batch: list[tuple[int, Any, asyncio.Future[bool]]]) -> None:
        params = {
            "task_ids": [task_id for task_id, _, _ in batch],
            "lease_tokens": [token for _, token, _ in batch],
        }
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("work_record_done_many"), params)
                recorded: dict[int, bool] = dict(await cur.fetchall())
        except BaseException as exc:
            # Every waiter hears of it and carries on; of a cancel too (the writer stopping
            # mid-write): the batch has left _pending, so nothing else would answer them
            # and a task waiting for its entry would wait for good.
            failure = exc if isinstance(exc, Exception) else self._stopped()
            for _, _, done in batch:
                if not done.done():
                    done.set_exception(failure)
            if failure is not exc:
                raise
            return
        for task_id, _, done in batch:
            if not done.done():
                done.set_result(bool(recorded.get(task_id)))
