"""Reaching Redis: the hot tier's settings, its start-up check, its scripts.

Redis must not evict: an evicted key would silently drop ids from the mirror (claims would
still find the work in Postgres, but the mirror would lie until the next rebuild), and an
evicted meta key looks like a flush. So a process refuses to start unless Redis'
`maxmemory-policy` is `noeviction`, or the operator said `--redis-allow-eviction`, which
is logged loudly. Redis unreachable at start is no refusal: the process runs on Postgres
claims alone and checks the policy when Redis answers.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from pgsched.errors import ConfigError
from pgsched.hot_tier.config import HotTierConfig

log = logging.getLogger("pgsched.hot_tier")

# Short: a claim waits on Redis at most this long before it claims from Postgres instead.
SOCKET_TIMEOUT = 0.5


def client(config: HotTierConfig) -> redis.Redis:
    return redis.Redis.from_url(
        config.url,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        decode_responses=True,
    )


def async_client(config: HotTierConfig, socket_timeout: float | None = SOCKET_TIMEOUT) -> Any:
    return redis.asyncio.Redis.from_url(
        config.url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=SOCKET_TIMEOUT,
        decode_responses=True,
    )


def policy_problem(policy: str | None, config: HotTierConfig) -> str | None:
    """Why the hot tier cannot trust this Redis (None when it can, or when the operator
    overrode the check, which is logged)."""
    if policy == "noeviction":
        return None
    seen = f"is {policy!r}" if policy else "could not be read (CONFIG GET refused)"
    if config.allow_eviction:
        log.warning(
            "REDIS MAY EVICT THE HOT TIER: maxmemory-policy %s at %s, and "
            "--redis-allow-eviction is set. An evicted key drops mirrored ids or looks like "
            "a flush; claims still come from Postgres, but the mirror lies until rebuilt. "
            "Set maxmemory-policy noeviction.",
            seen,
            redacted(config.url),
        )
        return None
    return (
        f"Redis at {redacted(config.url)}: maxmemory-policy {seen}; the hot tier needs "
        "maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in "
        "redis.conf), or pass --redis-allow-eviction to run anyway"
    )


def read_policy(conn: redis.Redis) -> str | None:
    try:
        found: dict[str, str] = conn.config_get("maxmemory-policy")  # type: ignore[assignment]
    except redis.ResponseError:
        return None
    return found.get("maxmemory-policy")


async def read_policy_async(conn: Any) -> str | None:
    try:
        found: dict[str, str] = await conn.config_get("maxmemory-policy")
    except redis.ResponseError:
        return None
    return found.get("maxmemory-policy")


def check_at_start(config: HotTierConfig) -> bool:
    """Refuse (ConfigError) a Redis that may evict; True when Redis answered and passed,
    False when it is unreachable now (the caller runs on Postgres and checks later)."""
    conn = client(config)
    try:
        policy = read_policy(conn)
    except redis.RedisError as exc:
        log.warning(
            "Redis at %s unreachable at start (%s): claiming from Postgres alone until it answers",
            redacted(config.url),
            exc,
        )
        return False
    finally:
        conn.close()
    problem = policy_problem(policy, config)
    if problem:
        raise ConfigError(problem)
    return True


def redacted(url: str) -> str:
    """The URL without its password, for logs."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at:
        return url
    user = creds.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{host}" if user else f"{scheme}{sep}***@{host}"


@cache
def script(name: str) -> str:
    """A Lua script of this package (`pop_due`, `swap_in`)."""
    return (Path(__file__).parent / f"{name}.lua").read_text()
