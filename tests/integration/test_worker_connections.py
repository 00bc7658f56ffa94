"""A plain transactional handler's connection comes back to the pool even when its task is
cancelled (lease lost, shutdown) while the connection is being acquired. The thread that
waits in the pool cannot be stopped: the connection it gets after the task is gone must be
rolled back and returned, or the pool shrinks by one for good and, once drained, every
later transactional task waits out the pool timeout and is retried."""

from __future__ import annotations

import asyncio

import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolTimeout

from pgsched.worker.connections import sync_pool
from pgsched.worker.runner import ConnectionSource


def test_a_connection_acquired_for_a_cancelled_task_goes_back_to_the_pool(db_dsn: str) -> None:
    pool = sync_pool(db_dsn, max_size=1)
    pool.open()
    try:
        # The pool's only connection is busy: the task's acquire waits for it.
        busy = pool.getconn()
        source = ConnectionSource(async_pool=None, sync_pool=pool)

        async def cancel_while_acquiring() -> None:
            acquiring = asyncio.create_task(source.acquire(False, "acme"))
            for _ in range(500):
                if pool.get_stats().get("requests_waiting", 0) == 1:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail(f"the acquire never waited in the pool: {pool.get_stats()}")
            acquiring.cancel()
            with pytest.raises(asyncio.CancelledError):
                await acquiring
            # The busy connection frees up after the task is gone; the waiting thread gets it.
            await asyncio.to_thread(pool.putconn, busy)
            try:
                back = await asyncio.to_thread(pool.getconn, 5.0)
            except PoolTimeout:
                pytest.fail("the connection acquired for the cancelled task never came back")
            # Rolled back on its way: no transaction (nor the task's tenant) left open.
            assert back.info.transaction_status == TransactionStatus.IDLE
            pool.putconn(back)

        asyncio.run(cancel_while_acquiring())
        assert pool.get_stats().get("pool_available") == 1
    finally:
        pool.close()
