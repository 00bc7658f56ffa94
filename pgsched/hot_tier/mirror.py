"""The mirror: the sweep leader keeps each lane's sorted set in step with Postgres.

Every pass (`mirror_interval`, default 1 s) reads each lane's window from Postgres through
the claim index (`hot_tier_window`: QUEUED, due within the immediate window, at most
`window_max` ids in claim order) and adds the ids new to it since the last pass, so a task
scheduled by plain SQL, retried, released, rescued or promoted is mirrored within a pass,
whoever made it QUEUED. When a pass added ids it publishes the lane's wake-up. Tasks
scheduled through the App with Redis, and tasks a worker's outcomes retried or released,
are also pushed right after their commit (`feed`, best effort); this pass is what makes
that optional.

Lanes. Only a lane whose claims are in plain priority order is mirrored: one with fair
claims across tenants (the default) or any task limit is claimed from Postgres alone, since
popping from a sorted set would be neither fair nor within limits
(`pgsched.hot_tier_lane_usable`; `pgsched.lane_set_fairness(lane, false)` opts a lane in).

Loss. Each lane's meta hash records the Redis run id and the Postgres system identifier
the set was built for. No meta (FLUSHALL, a restart without persistence, a lost key), a
run id that is not this server's (restart from an old snapshot, failover to a replica), or
another database's identifier: the lane's set cannot be trusted. Workers see the missing
or foreign meta on their next pop and claim from Postgres alone at once; this sweep
rebuilds the window into a new key and swaps it in atomically (`swap_in.lua`).

Drift. Ids leave the set when a worker pops them, or when a worker claims them from
Postgres; an id cancelled or finished otherwise stays until popped (and dropped then).
Every `reconcile_interval` the pass adds back ids of the window the set lost (popped by
a worker that died before claiming them), compares each set's size with the window's and
logs the drift; past a tenth of the window (and 100 ids) it rebuilds the set.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import redis

from pgsched.hot_tier.config import HotTierConfig
from pgsched.hot_tier.connection import (
    client,
    policy_problem,
    read_policy,
    redacted,
    script,
)
from pgsched.hot_tier.keys import LaneKeys, epoch_ms, score
from pgsched.lanes import WORK_LANES
from pgsched.queries import query

log = logging.getLogger("pgsched.hot_tier.mirror")

ZADD_CHUNK = 5_000


@dataclass
class MirrorSweep:
    config: HotTierConfig
    name: str = "redis_mirror"
    interval: float = field(init=False)
    rebuilds: int = 0
    _redis: Any = None
    _next_reconcile: float = 0.0
    _unreachable: bool = False
    # Checked on the first pass and whenever Redis answers again (it may be another server).
    _policy_ok: bool = False
    _refusal_logged: bool = False
    # Per lane: the ids the last pass saw in the window. Only ids new to the window are
    # added: re-adding the whole window would put back ids that workers popped and
    # claimed while the pass ran (each then popped again, dropped, and topped up).
    _seen: dict[str, set[int]] = field(default_factory=dict)
    # Lanes not served whose keys this leader deleted.
    _left_out: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.interval = self.config.mirror_interval

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        if self._redis is None:
            self._redis = client(self.config)
        try:
            counts = self._pass(conn)
        except redis.RedisError as exc:
            if not self._unreachable:
                log.warning(
                    "Redis at %s failed (%s): the mirror waits; workers claim from Postgres",
                    redacted(self.config.url),
                    exc,
                )
            self._unreachable = True
            self._policy_ok = False
            return {"redis_unreachable": 1}
        if self._unreachable:
            log.info("Redis at %s answers again", redacted(self.config.url))
            self._unreachable = False
        return counts

    def _pass(self, conn: psycopg.Connection[Any]) -> dict[str, int]:
        r = self._redis
        run_id = str(r.info("server")["run_id"])
        if not self._policy_ok:
            problem = policy_problem(read_policy(r), self.config)
            if problem:
                if not self._refusal_logged:
                    log.error("%s; the mirror is not kept meanwhile", problem)
                    self._refusal_logged = True
                return {"refused": 1}
            self._policy_ok = True
            self._refusal_logged = False
        system_id = system_identifier(conn)
        reconcile = time.monotonic() >= self._next_reconcile
        if reconcile:
            self._next_reconcile = time.monotonic() + self.config.reconcile_interval
        counts = {"mirrored": 0, "added": 0, "rebuilt": 0, "drift": 0}
        usable = lanes_usable(conn)
        for lane in WORK_LANES:
            keys = LaneKeys(self.config.namespace, lane.value)
            if lane.value not in usable:
                # Fair or limited: workers claim this lane from Postgres; nothing to mirror.
                # Its keys go, the meta too, so that no post-commit push (feed.py) writes
                # into a set nobody pops; once per leader and change.
                if lane.value not in self._left_out:
                    r.delete(keys.due, keys.meta)
                    self._left_out.add(lane.value)
                self._seen.pop(lane.value, None)
                continue
            self._left_out.discard(lane.value)
            rows = window(conn, lane.value, self.config.window_max)
            meta = r.hgetall(keys.meta)
            stale = why_stale(meta, run_id, system_id)
            if stale:
                log.warning("Redis mirror of lane %s %s: rebuilding it", lane, stale)
                self._seen[lane.value] = {int(row[0]) for row in rows}
                self.rebuild(keys, rows, run_id, system_id)
                counts["rebuilt"] += 1
                counts["mirrored"] += len(rows)
                continue
            seen = self._seen.get(lane.value, set())
            self._seen[lane.value] = {int(row[0]) for row in rows}
            added = add_all(r, keys.due, [row for row in rows if int(row[0]) not in seen])
            r.hset(keys.meta, mapping=window_marks(rows))
            counts["mirrored"] += len(rows)
            counts["added"] += added
            if added:
                r.publish(keys.wake, added)
            if reconcile:
                # Ids of the window missing from the set (popped by a worker that died
                # before its claim, or refused as not yet due by the database's clock):
                # claims found them in Postgres meanwhile; now they are mirrored again.
                missing = missing_from(r, keys.due, rows)
                counts["added"] += add_all(r, keys.due, missing)
                held = int(r.zcard(keys.due))
                drift = held - len(rows)
                counts["drift"] += abs(drift)
                log.info(
                    "Redis mirror of lane %s: %d ids, the window in Postgres %d (drift %+d)",
                    lane,
                    held,
                    len(rows),
                    drift,
                    extra={"lane": lane.value, "fields": {"redis": held, "postgres": len(rows)}},
                )
                if abs(drift) > max(100, len(rows) // 10):
                    log.warning("Redis mirror of lane %s drifted by %+d: rebuilding", lane, drift)
                    self.rebuild(keys, rows, run_id, system_id)
                    counts["rebuilt"] += 1
        return counts

    def rebuild(
        self, keys: LaneKeys, rows: list[tuple[Any, ...]], run_id: str, system_id: str
    ) -> int:
        """Write the window into a new key and swap it in (one script: atomic)."""
        r = self._redis
        r.delete(keys.build)
        add_all(r, keys.build, rows)
        marks = window_marks(rows)
        epoch = int(
            r.eval(
                script("swap_in"),
                3,
                keys.build,
                keys.due,
                keys.meta,
                run_id,
                system_id,
                marks["window_until"],
                marks["mirrored_at"],
            )
        )
        self.rebuilds += 1
        if rows:
            r.publish(keys.wake, len(rows))
        log.info("Redis mirror of lane %s rebuilt: %d ids, epoch %d", keys.lane, len(rows), epoch)
        return epoch


def why_stale(meta: dict[str, str], run_id: str, system_id: str) -> str | None:
    if not meta.get("epoch"):
        return "has no meta key (flushed, restarted empty, or never built)"
    if meta.get("run_id") != run_id:
        return f"was built on Redis run {meta.get('run_id')} (restarted or failed over)"
    if meta.get("system_id") != system_id:
        return f"was built from another database (system identifier {meta.get('system_id')})"
    return None


def window(conn: psycopg.Connection[Any], lane: str, max_tasks: int) -> list[tuple[Any, ...]]:
    """The lane's mirrored window: (id, priority, next_run_at, db_now) rows."""
    return conn.execute(query("hot_tier_window"), {"lane": lane, "max_tasks": max_tasks}).fetchall()


def lanes_usable(conn: psycopg.Connection[Any]) -> set[str]:
    """The lanes the hot tier serves: claims in plain priority order (fairness off for
    the lane, no task limits)."""
    row = conn.execute(query("hot_tier_lanes_usable")).fetchone()
    return set(row[0] or []) if row else set()


def system_identifier(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(query("system_identifier")).fetchone()
    assert row is not None
    return str(row[0])


def window_marks(rows: list[tuple[Any, ...]]) -> dict[str, str]:
    now = epoch_ms(rows[0][3]) if rows else int(time.time() * 1000)
    until = max((epoch_ms(row[2]) for row in rows), default=now)
    return {"window_until": str(until), "mirrored_at": str(now)}


def missing_from(r: Any, key: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    missing: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), ZADD_CHUNK):
        chunk = rows[start : start + ZADD_CHUNK]
        scores = r.zmscore(key, [str(row[0]) for row in chunk])
        missing += [row for row, held in zip(chunk, scores, strict=True) if held is None]
    return missing


def add_all(r: Any, key: str, rows: list[tuple[Any, ...]]) -> int:
    added = 0
    for start in range(0, len(rows), ZADD_CHUNK):
        chunk = rows[start : start + ZADD_CHUNK]
        added += int(r.zadd(key, {str(row[0]): score(row[1], row[2]) for row in chunk}))
    return added
