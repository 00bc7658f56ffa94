"""LISTEN/NOTIFY wake-ups. A hint, never the truth: the lane loops also poll.

A lane's payload, when the sender gives one, is the earliest due time it queued: handed
to `on_queued` (the lane's claim floor, pgsched/worker/claim_floor.py) before the lane
is woken; no payload, or a reconnect, hands it None.

The same connection hears cancel requests (`pgsched_cancel`, the task id as payload) and
hands them to `on_cancel`; the heartbeat thread asks too, in case one is lost.

LISTEN needs a server session of its own, which a transaction pooler does not keep: behind
one, it runs on a direct connection (`--listen-dsn`), or nowhere (`--listen-dsn none`: no
wake-ups, the lanes find new work at their next poll).

One dedicated autocommit connection (TCP keepalives on) listens to the lanes' channels.
When it drops (server restart, `pg_terminate_backend`, network, a failover) it reconnects
with a short backoff that stops growing at PROBE_INTERVAL_S, and wakes every lane once on
reconnecting, since notifications sent while it was gone are lost. Its connection attempts
are also how the worker notices that the database is unreachable, and that it answers
again (`reachability`: one line each, and the lane's pools are told at once, so they
reconnect then rather than when their own backoff ends).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg import sql

from pgsched.lanes import Lane
from pgsched.observability.logs import Reachability
from pgsched.worker.cancels import CANCEL_CHANNEL
from pgsched.worker.claim_floor import queued_due

log = logging.getLogger("pgsched.worker.wakeup")

# While the database does not answer, the listener tries again this often: it is the
# lane's probe, so claims resume within about this long of the database answering, however
# long it was gone.
PROBE_INTERVAL_S = 0.5

KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


class Wakeups:
    def __init__(
        self,
        dsn: str | None,
        lanes: tuple[Lane, ...],
        on_cancel: Callable[[int], object] | None = None,
        reachability: Reachability | None = None,
        on_queued: Callable[[Lane, datetime | None], object] | None = None,
    ) -> None:
        self._reachability = reachability
        self._on_queued = on_queued
        self._dsn = dsn
        self._by_channel = {lane.channel: lane for lane in lanes}
        self._on_cancel = on_cancel
        self.events = {lane: asyncio.Event() for lane in lanes}
        self.connected = asyncio.Event()
        self.reconnects = 0

    def wake_all(self) -> None:
        for lane, event in self.events.items():
            if self._on_queued is not None:
                # Notifications may have been lost: no telling what was queued, or when due.
                self._on_queued(lane, None)
            event.set()

    async def run(self) -> None:
        dsn = self._dsn
        if dsn is None:
            log.info("no LISTEN (--listen-dsn none): lanes poll at their idle interval")
            self.connected.set()
            await asyncio.Future()  # never done: a worker loop must not end on its own
            return
        backoff = 0.05
        while True:
            try:
                conninfo = psycopg.conninfo.make_conninfo(dsn, **KEEPALIVES)
                try:
                    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
                except psycopg.OperationalError as exc:
                    if self._reachability is not None:
                        self._reachability.failed(exc)
                    raise
                if self._reachability is not None:
                    self._reachability.answered()
                async with conn:
                    # The cancel channel first: the lanes' LISTENs are the session's last
                    # statements, which is what an operator sees in pg_stat_activity.
                    channels = [*self._by_channel]
                    if self._on_cancel is not None:
                        channels.insert(0, CANCEL_CHANNEL)
                    for channel in channels:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.connected.set()
                    self.wake_all()
                    backoff = 0.05
                    async for note in conn.notifies():
                        lane = self._by_channel.get(note.channel)
                        if lane is not None:
                            if self._on_queued is not None:
                                # The earliest due time queued, if the sender said it
                                # (pgsched/worker/claim_floor.py).
                                self._on_queued(lane, queued_due(note.payload))
                            self.events[lane].set()
                        elif (
                            note.channel == CANCEL_CHANNEL
                            and self._on_cancel is not None
                            and note.payload.isdigit()
                        ):
                            self._on_cancel(int(note.payload))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.connected.clear()
                self.reconnects += 1
                log.warning("listener connection lost (%s); reconnecting in %.2fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, PROBE_INTERVAL_S)
