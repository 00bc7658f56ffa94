"""How a worker claims in distributed mode: tenant by tenant, in turn.

On a distributed database (`pgsched migrate --distributed`, docs/scaling.md) a claim must
stay on one shard: Citus refuses a row lock across shards, so the single claim that walks
every tenant of a lane (`task_claim_many`) cannot run there. A worker instead reads which
tenants of its lane have due work (one read without locks, across every shard), keeps the
list for a refresh interval, and claims from them in turn (`task_claim_tenant`, one shard
each), a share of its batch each, starting where its last pass stopped. Fairness between
the tenants of a lane holds per pass of one worker rather than per statement; two workers
visiting one tenant at once skip each other's rows, as everywhere.

A worker node that does not answer holds back only its own tenants: their claims fail
and they are left out until the next read of the list, and when that read fails (Citus
fails a read across every shard then) the tenants are read shard by shard from those that
answer (`lane_due_tenants_by_shard`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import psycopg

from pgsched.claims import claim_tenant, lane_due_tenants
from pgsched.startup import first_line
from pgsched.tasks import TaskRow, UndecodableRow

log = logging.getLogger("pgsched.worker")

# How long a pass trusts its list of tenants with due work before reading it again. A
# tenant whose work arrives meanwhile waits at most this long; a claim that finds every
# listed tenant empty reads the list again at once.
TENANTS_REFRESH_SECONDS = 1.0
# The most tenants one read lists (by name); the rest are reached as these run dry.
MAX_TENANTS = 1000


class TenantRotation:
    """The claims of one lane of a worker in distributed mode. Not thread-safe: one per
    lane, used from the lane's loop."""

    def __init__(
        self,
        refresh_seconds: float = TENANTS_REFRESH_SECONDS,
        clock: Any = time.monotonic,
    ) -> None:
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._tenants: list[str] = []
        self._read_at: float | None = None
        self._next = 0
        # What a worker node down looks like from here (logged once each, not every pass).
        self._unreachable = False
        self._failing: set[str] = set()

    async def claim(
        self,
        conn: psycopg.AsyncConnection[Any],
        lane: str,
        max_tasks: int,
        worker: str,
        lease: Any,
    ) -> tuple[list[TaskRow], list[UndecodableRow]]:
        """Up to `max_tasks` due tasks of `lane`, from the tenants with due work in turn."""
        read_now = self._stale()
        if read_now:
            await self._read_tenants(conn, lane)
        tasks, undecodable = await self._pass(conn, lane, max_tasks, worker, lease)
        if not tasks and not undecodable and not read_now:
            # Every listed tenant was empty: the list is older than the work there is.
            await self._read_tenants(conn, lane)
            tasks, undecodable = await self._pass(conn, lane, max_tasks, worker, lease)
        return tasks, undecodable

    def _stale(self) -> bool:
        return (
            self._read_at is None
            or not self._tenants
            or self._clock() - self._read_at >= self.refresh_seconds
        )

    async def _read_tenants(self, conn: psycopg.AsyncConnection[Any], lane: str) -> None:
        self._read_at = self._clock()
        try:
            self._tenants = await lane_due_tenants(conn, lane, MAX_TENANTS)
            self._unreachable = False
            return
        except psycopg.OperationalError as exc:
            # A worker node does not answer (Citus fails a read across every shard then):
            # the tenants of the shards that do, read one by one.
            if not self._unreachable:
                log.warning(
                    "lane %s: reading the tenants with due work failed (%s); reading shard by"
                    " shard until it works again",
                    lane,
                    first_line(exc),
                    extra={"lane": lane},
                )
            self._unreachable = True
        try:
            self._tenants = await lane_due_tenants(conn, lane, MAX_TENANTS, by_shard=True)
        except psycopg.OperationalError as exc:
            log.warning(
                "lane %s: reading the tenants shard by shard failed too (%s); keeping the last"
                " list",
                lane,
                first_line(exc),
                extra={"lane": lane},
            )
        if self._tenants:
            self._next %= len(self._tenants)

    async def _pass(
        self,
        conn: psycopg.AsyncConnection[Any],
        lane: str,
        wanted: int,
        worker: str,
        lease: Any,
    ) -> tuple[list[TaskRow], list[UndecodableRow]]:
        """One visit of each listed tenant at most, from where the last pass stopped."""
        tasks: list[TaskRow] = []
        undecodable: list[UndecodableRow] = []
        count = len(self._tenants)
        if count == 0 or wanted <= 0:
            return tasks, undecodable
        share = max(1, math.ceil(wanted / count))
        emptied: list[str] = []
        for _ in range(count):
            left = wanted - len(tasks) - len(undecodable)
            if left <= 0:
                break
            tenant = self._tenants[self._next % count]
            self._next = (self._next + 1) % count
            try:
                got, bad = await claim_tenant(conn, tenant, lane, min(share, left), worker, lease)
            except psycopg.OperationalError as exc:
                # Its worker node does not answer: its tasks wait, the others' run. Off the
                # list until the next read.
                if tenant not in self._failing:
                    log.warning(
                        "lane %s: claiming tenant %s's tasks failed (%s); its tasks wait,"
                        " the other tenants' run",
                        lane,
                        tenant,
                        first_line(exc),
                        extra={"lane": lane, "tenant_id": tenant},
                    )
                self._failing.add(tenant)
                emptied.append(tenant)
                continue
            self._failing.discard(tenant)
            tasks += got
            undecodable += bad
            if len(got) + len(bad) < min(share, left):
                emptied.append(tenant)
        # A tenant that had less than its share has no due work left: off the list until
        # the next read.
        for tenant in emptied:
            self._tenants.remove(tenant)
        if self._tenants:
            self._next %= len(self._tenants)
        else:
            self._next = 0
        return tasks, undecodable
