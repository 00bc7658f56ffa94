"""Claiming through the hot tier: pop due ids from Redis, claim exactly those in Postgres.

`RedisClaimSource.claim` has the signature of `pgsched.claims.claim_many` and
replaces it in a worker started with `--redis`:

1. Pop up to `n` due ids of the lane from its sorted set (`pop_due.lua`: one atomic,
   bounded script; two workers never pop the same id).
2. Claim those ids in Postgres (`task_claim_ids`): the same compare-and-set, lease and
   events as the normal claim, only rows still QUEUED, of the lane and due by the
   database's clock, SKIP LOCKED. An id that is gone, cancelled or taken is dropped: the
   row is the truth, and a QUEUED one left out comes back with the next mirror pass.
3. Short of `n`, top up with the normal claim (`task_claim_many`), and take the ids it
   claimed out of the set. A stale, empty or missing mirror costs a round trip to Redis,
   never work left waiting.

A lane whose claims are fair across tenants (the default) or under task limits is
claimed from Postgres alone: see `mirror` (and `task_claim_ids` claims nothing there).

Redis unreachable, or a lane's mirror missing (flushed, restarted) or built from another
database: the claim comes from Postgres alone at once, and each change of that state is
logged once. After a connection error Redis is left alone for `RETRY_AFTER` seconds, so a
dead Redis does not cost every claim a timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import redis

from pgsched.claims import claim_ids, claim_many
from pgsched.hot_tier.config import HotTierConfig
from pgsched.hot_tier.connection import (
    async_client,
    check_at_start,
    policy_problem,
    read_policy_async,
    redacted,
    script,
)
from pgsched.hot_tier.keys import LaneKeys, due_bands
from pgsched.queries import query
from pgsched.tasks import TaskRow, UndecodableRow

log = logging.getLogger("pgsched.hot_tier.claims")

RETRY_AFTER = 1.0
LANES_TTL = 5.0
POP_MAX = 1000  # pop_due.lua's own cap


class RedisClaimSource:
    def __init__(self, config: HotTierConfig, policy_checked: bool = False) -> None:
        self.config = config
        self._redis = async_client(config)
        self._pop = self._redis.register_script(script("pop_due"))
        self._system_id: str | None = None
        self._policy_ok = policy_checked
        self._skip_until = 0.0
        # Per lane: why its mirror is not used now (None: it is), for one log line a change.
        self._unusable: dict[str, str | None] = {}
        self._usable_lanes: set[str] = set()
        self._lanes_read_at = -LANES_TTL
        self.popped = 0
        self.claimed_by_id = 0
        self.dropped = 0
        self.topped_up = 0

    async def open(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Learn this database's identity (a mirror of another one is never used)."""
        cur = await conn.execute(query("system_identifier"))
        row = await cur.fetchone()
        assert row is not None
        self._system_id = str(row[0])

    async def close(self) -> None:
        log.info(
            "Redis hot tier: %d ids popped, %d claimed by id, %d dropped (gone or taken), "
            "%d claimed from Postgres to top up",
            self.popped,
            self.claimed_by_id,
            self.dropped,
            self.topped_up,
        )
        await self._redis.aclose()

    async def claim(
        self, conn: psycopg.AsyncConnection[Any], lane: str, n: int, worker: str, lease: Any
    ) -> tuple[list[TaskRow], list[UndecodableRow]]:
        if not await self._lane_usable(conn, lane):
            return await claim_many(conn, lane, n, worker, lease)
        ids = await self._pop_due(lane, n)
        tasks: list[TaskRow] = []
        undecodable: list[UndecodableRow] = []
        if ids:
            tasks, undecodable = await claim_ids(conn, lane, ids, worker, lease)
            self.popped += len(ids)
            self.claimed_by_id += len(tasks) + len(undecodable)
            self.dropped += len(ids) - len(tasks) - len(undecodable)
        short = n - len(tasks) - len(undecodable)
        if short > 0:
            more, more_undecodable = await claim_many(conn, lane, short, worker, lease)
            if more or more_undecodable:
                self.topped_up += len(more) + len(more_undecodable)
                await self._forget(lane, [t.id for t in more] + [u.id for u in more_undecodable])
            tasks += more
            undecodable += more_undecodable
        return tasks, undecodable

    async def _lane_usable(self, conn: psycopg.AsyncConnection[Any], lane: str) -> bool:
        """Whether claims by id serve this lane (read every LANES_TTL seconds; the SQL
        function checks again on every claim, so a change is never overstepped)."""
        if time.monotonic() >= self._lanes_read_at + LANES_TTL:
            cur = await conn.execute(query("hot_tier_lanes_usable"))
            row = await cur.fetchone()
            self._usable_lanes = set(row[0] or []) if row else set()
            self._lanes_read_at = time.monotonic()
        usable = lane in self._usable_lanes
        if not usable:
            self._set_unusable(
                lane,
                "claims fairly across tenants or under task limits; the hot tier serves "
                "lanes in plain priority order (pgsched.lane_set_fairness(lane, false), no "
                "task limits)",
            )
        return usable

    async def _pop_due(self, lane: str, n: int) -> list[int]:
        if time.monotonic() < self._skip_until or self._system_id is None:
            return []
        keys = LaneKeys(self.config.namespace, lane)
        try:
            if not self._policy_ok:
                problem = policy_problem(await read_policy_async(self._redis), self.config)
                if problem:
                    self._set_unusable("*", problem)
                    self._skip_until = time.monotonic() + 30 * RETRY_AFTER
                    return []
                self._policy_ok = True
            now_ms = int(time.time() * 1000)
            reply = await self._pop(
                keys=[keys.due, keys.meta],
                args=[min(n, POP_MAX), self._system_id, *due_bands(now_ms)],
            )
        except redis.RedisError as exc:
            self._set_unusable("*", f"Redis at {redacted(self.config.url)} failed ({exc})")
            self._skip_until = time.monotonic() + RETRY_AFTER
            self._policy_ok = False
            return []
        self._set_unusable("*", None)
        status = int(reply[0])
        if status == 0:
            self._set_unusable(lane, "has no mirror in Redis (flushed, restarted, not built yet)")
            return []
        if status < 0:
            self._set_unusable(lane, "has a Redis mirror built from another database")
            return []
        self._set_unusable(lane, None)
        return [int(member) for member in reply[1:]]

    async def _forget(self, lane: str, ids: list[int]) -> None:
        """Best effort: ids claimed from Postgres leave the mirror (else popped and
        dropped later)."""
        if time.monotonic() < self._skip_until:
            return
        try:
            await self._redis.zrem(LaneKeys(self.config.namespace, lane).due, *ids)
        except redis.RedisError:
            self._skip_until = time.monotonic() + RETRY_AFTER

    def _set_unusable(self, lane: str, why: str | None) -> None:
        if self._unusable.get(lane) == why:
            return
        self._unusable[lane] = why
        what = "Redis answers" if lane == "*" else f"lane {lane}"
        if why is None:
            log.info("%s: claiming through the Redis hot tier again", what)
        elif lane == "*":
            log.warning("%s: claiming from Postgres alone", why)
        else:
            log.warning("lane %s %s: claiming from Postgres alone", lane, why)


def open_claim_source(config: HotTierConfig) -> RedisClaimSource:
    """At a worker's start: refuse a Redis that may evict (ConfigError); one unreachable
    now is checked when it answers."""
    return RedisClaimSource(config, policy_checked=check_at_start(config))
