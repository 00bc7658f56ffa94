"""What a process started with `--redis` runs: a worker's claim source, wake-ups and
post-commit feed of the tasks its outcomes requeue, and the mirror sweep (a sweeper's, or
a worker's with `--sweeps`); and the App's post-commit feed. The Redis client is imported
only when asked for: a process without `--redis` runs without the `redis` extra."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgsched.errors import ConfigError
from pgsched.hot_tier.config import HotTierConfig
from pgsched.lanes import Lane

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from pgsched.hot_tier.claims import RedisClaimSource
    from pgsched.hot_tier.feed import OutcomeFeed, ScheduleFeed
    from pgsched.hot_tier.mirror import MirrorSweep


@dataclass
class WorkerHotTier:
    config: HotTierConfig
    source: RedisClaimSource
    feed: OutcomeFeed | None = field(default=None, init=False)

    def outcome_feed(self, pool: AsyncConnectionPool) -> OutcomeFeed:
        """The worker's post-commit hook: retried and released tasks back to Redis."""
        from pgsched.hot_tier.feed import OutcomeFeed

        self.feed = OutcomeFeed(self.config, pool)
        return self.feed

    async def close(self) -> None:
        await self.source.close()
        if self.feed is not None:
            await self.feed.close()

    def wakeups(self, events: dict[Lane, asyncio.Event]) -> Any:
        from pgsched.hot_tier.wakeups import RedisWakeups

        return RedisWakeups(self.config, events).run()

    def mirror(self) -> MirrorSweep:
        from pgsched.hot_tier.mirror import MirrorSweep

        return MirrorSweep(self.config)


def require_redis_client() -> None:
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--redis: the Redis client is not installed; pip install 'pgsched[redis]'"
        ) from None


def open_hot_tier(config: HotTierConfig | None) -> WorkerHotTier | None:
    """None without `--redis`; else the worker's hot tier, after refusing a Redis that may
    evict (ConfigError)."""
    if config is None:
        return None
    require_redis_client()
    from pgsched.hot_tier.claims import open_claim_source

    return WorkerHotTier(config, open_claim_source(config))


def open_mirror(config: HotTierConfig) -> MirrorSweep:
    """At a sweeper's start: the mirror sweep, after refusing a Redis that may evict."""
    require_redis_client()
    from pgsched.hot_tier.connection import check_at_start
    from pgsched.hot_tier.mirror import MirrorSweep

    check_at_start(config)
    return MirrorSweep(config)


def schedule_feed(config: HotTierConfig) -> ScheduleFeed:
    """The App's post-commit feed (`App(dsn, redis=...)`). No start-up check of Redis'
    eviction policy: the feed writes only into a mirror the sweep leader keeps, and the
    leader refuses a Redis that may evict."""
    require_redis_client()
    from pgsched.hot_tier.feed import ScheduleFeed

    return ScheduleFeed(config)
