"""The worker's connections: pools that never hand out a dead connection, and the
dedicated connections' health check.

A pooled connection can die while it sits idle (`idle_session_timeout`, a backend killed by
`pg_terminate_backend`, a server restart). The server says so before closing: a FATAL
message arrives on a connection that has nothing in flight, so its socket turns readable.
Checking that costs one `select` call, no round trip; only a connection that looks dead is
tested with a query, and discarded if it fails. The pool replaces what it discards (with
backoff, logging each failed attempt).

Server connection slots can be short (`max_connections`, a role's `CONNECTION LIMIT`): the
worker starts once it holds one pooled connection, says how many of the pool's minimum it
could not open, and the pool grows as slots free up.
"""

from __future__ import annotations

import asyncio
import logging
import select
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from pgsched.pools import PromptAsyncPool, PromptPool

log = logging.getLogger("pgsched.worker.connections")


def looks_dead(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when an idle connection is closed, broken, or has unread input (the server's
    goodbye: nothing else arrives unasked on a connection that does not LISTEN)."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class CheckedAsyncPool(PromptAsyncPool):
    """An AsyncConnectionPool whose checkout discards connections that died idle."""

    # What open_async_pool grows the pool to once it holds its first connection.
    target_min_size = 1
    target_max_size = 1

    async def getconn(self, timeout: float | None = None) -> Any:
        while True:
            conn = await super().getconn(timeout)
            if not looks_dead(conn):
                return conn
            try:
                await AsyncConnectionPool.check_connection(conn)
            except Exception as exc:
                log.warning("discarding a dead pooled connection (%s); reconnecting", exc)
                await conn.close()
                await self.putconn(conn)
                continue
            return conn


class CheckedPool(PromptPool):
    """A ConnectionPool whose checkout discards connections that died idle."""

    # Set once the server has given this pool a connection (see `sync_pool`).
    has_connected = False

    def getconn(self, timeout: float | None = None) -> Any:
        while True:
            conn = super().getconn(timeout)
            if not looks_dead(conn):
                return conn
            try:
                ConnectionPool.check_connection(conn)
            except Exception as exc:
                log.warning("discarding a dead pooled connection (%s); reconnecting", exc)
                conn.close()
                self.putconn(conn)
                continue
            return conn


def _gave_up(pool: Any) -> None:
    log.warning(
        "connection slots short: pool %s gave up opening a connection; it holds %s of %s",
        pool.name,
        pool.get_stats().get("pool_available", 0),
        pool.max_size,
    )


def async_pool(dsn: str, min_size: int, max_size: int, **kwargs: Any) -> CheckedAsyncPool:
    """The worker's async pool, not opened yet (see `open_async_pool`, which opens it with
    one connection and then grows it to `min_size`)."""
    pool = CheckedAsyncPool(
        dsn,
        min_size=1,
        max_size=1,
        open=False,
        reconnect_failed=_gave_up,
        **kwargs,
    )
    pool.target_min_size = min_size
    pool.target_max_size = max_size
    return pool


def sync_pool(dsn: str, max_size: int, **kwargs: Any) -> CheckedPool:
    """The pool of plain transactional handlers, made once, not opened yet: it keeps one
    connection, opened by `open_async_pool` before the async pool grows. With few server
    slots the async pool growing first could take every slot, and these handlers would
    wait for a connection forever (each attempt timing out while it holds a worker slot)."""

    def connected(conn: psycopg.Connection[Any]) -> None:
        pool.has_connected = True

    pool = CheckedPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=False,
        reconnect_failed=_gave_up,
        configure=connected,
        **kwargs,
    )
    return pool


async def open_async_pool(
    pool: CheckedAsyncPool,
    stopping: asyncio.Event,
    settle: float = 2.0,
    plain_pool: ConnectionPool[Any] | None = None,
) -> bool:
    """Open `pool` and wait until it holds one working connection, retrying with backoff
    (a log line per attempt) until `stopping` is set; False when stopped first. Then open
    `plain_pool` (plain transactional handlers) and give it up to `settle` seconds for its
    one connection, then grow `pool`; say whether either is short."""
    await pool.open(wait=False)
    backoff = 1.0
    while not stopping.is_set():
        try:
            async with pool.connection(timeout=backoff) as conn:
                await conn.execute("SELECT 1")
            break
        except (PoolTimeout, psycopg.OperationalError) as exc:
            log.warning("no database connection yet (%s); retrying", exc or "timed out")
            backoff = min(backoff * 2, 10.0)
    else:
        return False
    if plain_pool is not None:
        await _open_plain_pool(plain_pool, settle)
    # Only now grow: opened together, several connections racing for the last free slot
    # can all be refused, again and again (each counts the others while they start up).
    target = pool.target_min_size
    await pool.resize(target, max(target, pool.target_max_size))
    deadline = asyncio.get_running_loop().time() + settle
    while asyncio.get_running_loop().time() < deadline:
        if pool.get_stats().get("pool_available", 0) >= target:
            return True
        await asyncio.sleep(0.05)
    log.warning(
        "connection slots short: opened %s of the pool's %s connections; running with what "
        "there is, growing as the server frees slots",
        pool.get_stats().get("pool_available", 0),
        target,
    )
    return True


async def _open_plain_pool(pool: ConnectionPool[Any], settle: float) -> None:
    """Open the plain transactional handlers' pool and wait up to `settle` seconds for its
    kept connection; if the server has no slot for it, say so and go on (it keeps trying)."""
    await asyncio.to_thread(pool.open, wait=False)

    def one_connection() -> None:
        with pool.connection(timeout=settle):
            pass

    try:
        await asyncio.to_thread(one_connection)
    except (PoolTimeout, psycopg.OperationalError):
        log.warning(
            "connection slots short: no connection yet for plain transactional handlers; "
            "their tasks wait for one (retried after the pool timeout) as the server frees slots"
        )
