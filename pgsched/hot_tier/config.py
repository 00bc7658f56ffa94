"""What the Redis hot tier is told: checked when built, before anything connects (a
refusal is a `ConfigError` naming the option). Importing this needs no Redis client."""

from __future__ import annotations

from dataclasses import dataclass

from pgsched.errors import ConfigError
from pgsched.option_checks import require_int, require_seconds


@dataclass(frozen=True)
class HotTierConfig:
    url: str
    namespace: str = "pgsched"
    # Run even though Redis may evict keys (logged loudly at start).
    allow_eviction: bool = False
    # The sweep leader's mirror pass and reconciliation (seconds), and how many ids of a
    # lane the mirror holds at most (the head of the window: what claims take next).
    mirror_interval: float = 1.0
    reconcile_interval: float = 30.0
    window_max: int = 10_000

    def __post_init__(self) -> None:
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                f"--redis: {self.url!r} is not a Redis URL (redis://host:port/db, "
                "rediss:// or unix://)"
            )
        if not self.namespace or any(c in self.namespace for c in "{} "):
            raise ConfigError(
                f"--redis-namespace: {self.namespace!r} must be non-empty, without braces or spaces"
            )
        require_seconds("--redis-mirror-interval", self.mirror_interval)
        require_seconds("--redis-reconcile-interval", self.reconcile_interval)
        require_int("--redis-window-max", self.window_max, 1)
