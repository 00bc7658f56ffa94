"""pgsched's pools retry lost connections promptly (pgsched/pools.py), and only those: an
idle connection is still closed after the pool's `max_idle`, not within the retry interval.
Shrinking every second closed a connection the moment it sat unused, before its first use;
a worker short of server slots lost its plain transactional handlers' only connection to
the lane pool growing into the freed slot, and their tasks waited out the pool timeout."""

from __future__ import annotations

import asyncio
import time

from pgsched.pools import RECONNECT_INTERVAL_S, PromptAsyncPool, PromptPool

# Well past the reconnection interval: a shrink capped to it would have run twice.
WATCHED_S = 3 * RECONNECT_INTERVAL_S


def test_an_idle_connection_outlives_the_reconnection_interval(db_dsn: str) -> None:
    with PromptPool(db_dsn, min_size=1, max_size=3, open=True) as pool:
        held = [pool.getconn() for _ in range(3)]
        for conn in held:
            pool.putconn(conn)
        assert pool.get_stats()["pool_size"] == 3
        time.sleep(WATCHED_S)
        assert pool.get_stats()["pool_size"] == 3, pool.get_stats()


def test_an_idle_async_connection_outlives_the_reconnection_interval(db_dsn: str) -> None:
    async def run() -> None:
        async with PromptAsyncPool(db_dsn, min_size=1, max_size=3, open=False) as pool:
            held = [await pool.getconn() for _ in range(3)]
            for conn in held:
                await pool.putconn(conn)
            assert pool.get_stats()["pool_size"] == 3
            await asyncio.sleep(WATCHED_S)
            assert pool.get_stats()["pool_size"] == 3, pool.get_stats()

    asyncio.run(run())


def test_an_idle_connection_is_still_closed_after_max_idle(db_dsn: str) -> None:
    with PromptPool(db_dsn, min_size=1, max_size=3, max_idle=0.5, open=True) as pool:
        held = [pool.getconn() for _ in range(3)]
        for conn in held:
            pool.putconn(conn)
        deadline = time.monotonic() + 10
        while pool.get_stats()["pool_size"] > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.get_stats()["pool_size"] == 1, pool.get_stats()
