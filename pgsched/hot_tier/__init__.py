"""The optional Redis hot tier: a rebuildable mirror of the ids due soon, per lane.

Redis never holds the only copy of anything. It holds task ids and their claim order
(priority, then due time) for the IMMEDIATE window; the rows in Postgres stay the truth.

    keys        key names (namespace + Redis Cluster hash tag per lane) and scores
    config      HotTierConfig: the URL, namespace and intervals (needs no Redis client)
    connection  connecting, the maxmemory-policy check, the Lua scripts
    mirror      MirrorSweep: the sweep leader mirrors the window, detects a lost or foreign
                mirror (meta key), rebuilds it into new keys and swaps them in, reconciles
    feed        ScheduleFeed (the App) and OutcomeFeed (a worker's retries and releases):
                ids pushed right after their commit, best effort
    claims      RedisClaimSource: a worker pops due ids, claims exactly those in Postgres,
                tops up with the normal claim; falls back to Postgres when the mirror is gone
    wakeups     RedisWakeups: lane wake-ups over Redis pub/sub (no LISTEN needed)
"""

from pgsched.hot_tier.config import HotTierConfig

__all__ = ["HotTierConfig"]
