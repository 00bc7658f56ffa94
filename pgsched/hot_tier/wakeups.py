"""Lane wake-ups over Redis pub/sub: the mirror publishes when it adds ids to a lane, and
workers subscribed to the lane's channel wake at once, with no LISTEN on Postgres (which a
pooler in transaction mode cannot carry). A hint, never the truth: the claim loops poll
too. On reconnecting every lane is woken once, since messages sent meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import logging

from pgsched.hot_tier.config import HotTierConfig
from pgsched.hot_tier.connection import async_client, redacted
from pgsched.hot_tier.keys import LaneKeys
from pgsched.lanes import Lane

log = logging.getLogger("pgsched.hot_tier.wakeups")


class RedisWakeups:
    def __init__(self, config: HotTierConfig, events: dict[Lane, asyncio.Event]) -> None:
        self.config = config
        self.events = events
        self._by_channel = {LaneKeys(config.namespace, lane.value).wake: lane for lane in events}
        self.received = 0

    async def run(self) -> None:
        backoff = 0.1
        lost = False
        while True:
            # No read timeout: a subscriber waits for messages as long as it takes.
            r = async_client(self.config, socket_timeout=None)
            try:
                async with r.pubsub() as pubsub:
                    await pubsub.subscribe(*self._by_channel)
                    if lost:
                        log.info("Redis wake-ups resumed")
                    lost = False
                    backoff = 0.1
                    for event in self.events.values():
                        event.set()
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        lane = self._by_channel.get(message.get("channel"))
                        if lane is not None:
                            self.received += 1
                            self.events[lane].set()
                    raise ConnectionError("the subscription ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not lost:
                    log.warning(
                        "Redis wake-ups from %s lost (%s); reconnecting",
                        redacted(self.config.url),
                        exc,
                    )
                lost = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                await r.aclose()
