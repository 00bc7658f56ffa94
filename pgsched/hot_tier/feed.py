"""Feeding the mirror after a commit: tasks that just became due soon reach Redis at once.

The sweep leader's mirror finds every task due soon within a pass (`mirror_interval`),
whoever queued it: producers never need Redis. Two writers know their ids right after
their commit and push them without waiting for that pass:

    ScheduleFeed  the Python App configured with Redis (`App(dsn, redis=URL)`): the tasks
                  it scheduled, once their transaction committed
    OutcomeFeed   a worker started with `--redis`: the tasks its outcomes retried or
                  released, once the outcome batch committed

Both ask Postgres, by id, which of the tasks the mirror would hold (`hot_tier_due_by_ids`:
QUEUED, due within the immediate window, on a lane the hot tier serves) with their lane,
priority and due time as the database wrote them, then add those in one script per lane
(`push_due.lua`), which writes only into a mirror the leader keeps for this database and
wakes the lane's workers when something is due already.

Best effort, always: a push that fails is logged with its task ids and never fails the
schedule or the outcome. Nothing is lost either way, since the task is in Postgres and the
leader's next pass adds it (claims top up from Postgres meanwhile). After a failure Redis
is left alone for a while (`RETRY_AFTER`, doubling to `RETRY_MAX`), so a dead Redis costs
producers and workers no timeouts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

import psycopg
import redis
from psycopg_pool import AsyncConnectionPool

from pgsched.hot_tier.config import HotTierConfig
from pgsched.hot_tier.connection import async_client, client, redacted, script
from pgsched.hot_tier.keys import LaneKeys, epoch_ms, score
from pgsched.queries import query

log = logging.getLogger("pgsched.hot_tier.feed")

RETRY_AFTER = 1.0
RETRY_MAX = 30.0
IDS_PER_QUERY = 10_000  # hot_tier_due_by_ids' own cap
PAIRS_PER_PUSH = 1_000  # push_due.lua's arguments stay well within Lua's stack
# Outcomes that may leave a task QUEUED again (a CANCELLED report without a cancel request
# is a failed attempt, retried like RETRY).
REQUEUING = frozenset({"RETRY", "RELEASED", "CANCELLED", "SNOOZED"})

Row = tuple[Any, ...]  # (id, lane, priority, next_run_at)


def pushes(
    namespace: str, system_id: str, rows: Iterable[Row], now_ms: int
) -> list[tuple[list[str], list[Any]]]:
    """The push_due.lua calls (keys, args) that add these rows: one a lane (and a call per
    PAIRS_PER_PUSH ids), waking the lane when one of them is due by `now_ms`."""
    by_lane: dict[str, list[Row]] = {}
    for row in rows:
        by_lane.setdefault(str(row[1]), []).append(row)
    calls: list[tuple[list[str], list[Any]]] = []
    for lane, lane_rows in by_lane.items():
        keys = LaneKeys(namespace, lane)
        for start in range(0, len(lane_rows), PAIRS_PER_PUSH):
            chunk = lane_rows[start : start + PAIRS_PER_PUSH]
            due_now = any(epoch_ms(row[3]) <= now_ms for row in chunk)
            args: list[Any] = [system_id, keys.wake if due_now else ""]
            for row in chunk:
                args += [score(int(row[2]), row[3]), str(row[0])]
            calls.append(([keys.due, keys.meta], args))
    return calls


def described(ids: list[int]) -> str:
    shown = ",".join(str(i) for i in ids[:20])
    return shown + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")


class _Backoff:
    """Redis is left alone for a while after a failure: RETRY_AFTER, doubling to RETRY_MAX
    while it keeps failing."""

    def __init__(self) -> None:
        self.until = 0.0
        self.wait = RETRY_AFTER
        self.failing = False

    def waiting(self) -> bool:
        return time.monotonic() < self.until

    def failed(self) -> None:
        self.until = time.monotonic() + self.wait
        self.wait = min(self.wait * 2, RETRY_MAX)
        self.failing = True

    def answered(self, url: str) -> None:
        if self.failing:
            log.info("Redis at %s answers again: pushing committed tasks to it", redacted(url))
        self.wait = RETRY_AFTER
        self.failing = False


class ScheduleFeed:
    """The App's post-commit hook: push newly scheduled tasks due soon to the mirror."""

    def __init__(self, config: HotTierConfig) -> None:
        self.config = config
        self._redis: redis.Redis | None = None
        self._push: Any = None
        self._system_id: str | None = None
        self._backoff = _Backoff()
        self.pushed = 0

    def after_commit(self, conn: psycopg.Connection[Any], task_ids: list[int]) -> None:
        """Called with the tasks' transaction committed and none open on `conn`. Never
        raises: a failure is logged with the ids, and the leader's next pass catches up."""
        if not task_ids:
            return
        if self._backoff.waiting():
            log.debug("Redis hot tier: tasks %s left to the mirror's pass", described(task_ids))
            return
        rows: list[Row] = []
        try:
            if self._system_id is None:
                row = conn.execute(query("system_identifier")).fetchone()
                assert row is not None
                self._system_id = str(row[0])
            for start in range(0, len(task_ids), IDS_PER_QUERY):
                chunk = task_ids[start : start + IDS_PER_QUERY]
                rows += conn.execute(query("hot_tier_due_by_ids"), {"ids": chunk}).fetchall()
            if not conn.autocommit:
                conn.rollback()  # a read: end its transaction, leave the connection as found
        except psycopg.Error as exc:
            if not conn.closed and not conn.autocommit:
                conn.rollback()
            log.warning(
                "Redis hot tier: reading tasks %s to push failed (%s); the mirror's next "
                "pass adds them",
                described(task_ids),
                exc,
            )
            return
        if not rows:
            return
        try:
            if self._redis is None:
                self._redis = client(self.config)
                self._push = self._redis.register_script(script("push_due"))
            for keys, args in pushes(
                self.config.namespace, self._system_id, rows, int(time.time() * 1000)
            ):
                if int(self._push(keys=keys, args=args)) >= 0:
                    self.pushed += (len(args) - 2) // 2
        except redis.RedisError as exc:
            self._backoff.failed()
            log.warning(
                "Redis hot tier: pushing tasks %s to %s failed (%s); the mirror's next "
                "pass adds them",
                described([int(r[0]) for r in rows]),
                redacted(self.config.url),
                exc,
            )
            return
        self._backoff.answered(self.config.url)

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None


class OutcomeFeed:
    """A worker's post-commit hook: push the tasks its outcomes retried or released."""

    def __init__(self, config: HotTierConfig, pool: AsyncConnectionPool) -> None:
        self.config = config
        self._pool = pool
        self._redis = async_client(config)
        self._push = self._redis.register_script(script("push_due"))
        self._system_id: str | None = None
        self._backoff = _Backoff()
        self._pushing: set[asyncio.Task[None]] = set()
        self.pushed = 0

    def after_outcomes(
        self, batch: Iterable[tuple[int, str]], applied: set[int]
    ) -> asyncio.Task[None] | None:
        """Called once a batch of outcomes committed, as (task id, outcome) pairs
        (`applied`: the ids whose outcome the database took). Returns the push, running in
        the background (None: nothing to push); it never raises."""
        ids = [task_id for task_id, outcome in batch if outcome in REQUEUING and task_id in applied]
        if not ids:
            return None
        if self._backoff.waiting():
            log.debug("Redis hot tier: tasks %s left to the mirror's pass", described(ids))
            return None
        pushing = asyncio.create_task(self._requeued(ids), name="pgsched-redis-feed")
        self._pushing.add(pushing)
        pushing.add_done_callback(self._pushing.discard)
        return pushing

    async def _requeued(self, ids: list[int]) -> None:
        try:
            async with self._pool.connection() as conn:
                if self._system_id is None:
                    cur = await conn.execute(query("system_identifier"))
                    found = await cur.fetchone()
                    assert found is not None
                    self._system_id = str(found[0])
                cur = await conn.execute(query("hot_tier_due_by_ids"), {"ids": ids})
                rows = await cur.fetchall()
        except Exception as exc:
            # Not even the read: the pass finds them (the outcome itself is written).
            log.warning(
                "Redis hot tier: reading requeued tasks %s failed (%s); the mirror's next "
                "pass adds them",
                described(ids),
                exc,
            )
            return
        if not rows:
            return
        try:
            for keys, args in pushes(
                self.config.namespace, self._system_id, rows, int(time.time() * 1000)
            ):
                if int(await self._push(keys=keys, args=args)) >= 0:
                    self.pushed += (len(args) - 2) // 2
        except redis.RedisError as exc:
            self._backoff.failed()
            log.warning(
                "Redis hot tier: pushing requeued tasks %s to %s failed (%s); the mirror's "
                "next pass adds them",
                described([int(r[0]) for r in rows]),
                redacted(self.config.url),
                exc,
            )
            return
        self._backoff.answered(self.config.url)

    async def close(self) -> None:
        # The worker awaits its pushes before its pool closes; one started by the very
        # last flush is given up here (the mirror's pass adds its tasks).
        for pushing in self._pushing:
            pushing.cancel()
        await asyncio.gather(*self._pushing, return_exceptions=True)
        await self._redis.aclose()
