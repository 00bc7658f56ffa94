"""The sweep leader's lease: one row, taken and kept by compare-and-set, fenced by a generation.

A sweeper leads while it holds the lease (`pgsched.sweep_leader`,
sql/code/sweep_leader.sql). It takes an expired lease with `sweep_leader_acquire` (the
generation goes up by one), renews it every third of its length from a thread of its own
(`LeaseRenewer`, so a long sweep never lets it lapse), and releases it when it stops, so
another sweeper takes over at its next try. A leader that was SIGKILLed simply stops
renewing: its lease runs out, and a candidate takes it within one lease period (candidates
retry when the lease they saw expires).

Fencing: the sweeps' statements run on a `FencedConnection`, which wraps each one in a
transaction that first calls `sweep_leader_fence` (refused, SQLSTATE PS001, unless this
generation is current and unexpired; the row is held FOR SHARE so no takeover commits
meanwhile). A deposed leader therefore writes nothing more; it stops leading at its next
renewal, fenced statement or check of `held()`.

Nothing here keeps session state, so leadership works through a transaction pooler.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pgsched.errors import ConfigError
from pgsched.option_checks import require_seconds
from pgsched.queries import query
from pgsched.startup import connect, first_line

log = logging.getLogger("pgsched.leadership")

# SQLSTATE of sweep_leader_fence's refusal: this generation no longer leads.
DEPOSED_SQLSTATE = "PS001"
DEFAULT_LEASE_SECONDS = 15.0


def default_holder() -> str:
    """The name a sweeper's lease is held under: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def is_deposed(exc: BaseException) -> bool:
    """True for a fenced statement refused because its leader no longer leads."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == DEPOSED_SQLSTATE


@dataclass(frozen=True)
class LeaseState:
    acquired: bool
    generation: int
    leader: str | None
    expires_in_s: float


class LeaderLease:
    """One sweeper's claim on the lease: acquire, renew, release, and whether it still
    holds it by its own monotonic clock (`held`), which is never later than the database's
    expiry: the lease is counted from before the statement that set it was sent."""

    def __init__(self, holder: str | None = None, lease_seconds: float = DEFAULT_LEASE_SECONDS):
        require_seconds("--leader-lease", lease_seconds, minimum=1.0, zero_ok=True)
        if lease_seconds > 3600:
            raise ConfigError(f"--leader-lease must be at most 3600 s, not {lease_seconds}")
        self.holder = holder or default_holder()
        self.lease = timedelta(seconds=lease_seconds)
        self.generation: int | None = None
        self.deposed = False
        self._valid_until = 0.0
        self._lock = threading.Lock()

    @property
    def lease_seconds(self) -> float:
        return self.lease.total_seconds()

    def try_acquire(self, conn: psycopg.Connection[Any]) -> LeaseState:
        sent = time.monotonic()
        row = conn.execute(
            query("sweep_leader_acquire"), {"holder": self.holder, "lease": self.lease}
        ).fetchone()
        assert row is not None
        acquired, generation, leader, _, expires_in_s = row
        state = LeaseState(bool(acquired), int(generation), leader, float(expires_in_s))
        if state.acquired:
            with self._lock:
                self.generation = state.generation
                self.deposed = False
                self._valid_until = sent + self.lease_seconds
        return state

    def renew(self, conn: psycopg.Connection[Any]) -> bool:
        """Push the expiry on; False (and `deposed`) when another generation leads."""
        sent = time.monotonic()
        row = conn.execute(
            query("sweep_leader_renew"),
            {"holder": self.holder, "generation": self.generation, "lease": self.lease},
        ).fetchone()
        with self._lock:
            if row is None or row[0] is None:
                self.deposed = True
                return False
            self._valid_until = max(self._valid_until, sent + self.lease_seconds)
        return True

    def release(self, conn: psycopg.Connection[Any]) -> None:
        if self.generation is None:
            return
        conn.execute(
            query("sweep_leader_release"), {"holder": self.holder, "generation": self.generation}
        )
        with self._lock:
            self._valid_until = 0.0

    def held(self) -> bool:
        with self._lock:
            return (
                self.generation is not None
                and not self.deposed
                and time.monotonic() < self._valid_until
            )

    def fence(self) -> dict[str, Any]:
        return {"holder": self.holder, "generation": self.generation}


class LeaseRenewer(threading.Thread):
    """Renews a held lease every third of its length, until stopped or deposed, on `conn`
    (the connection the lease was acquired on, which its owner leaves to this thread
    meanwhile) or, once that fails, on a connection of its own."""

    def __init__(
        self,
        lease: LeaderLease,
        dsn: str,
        conn: psycopg.Connection[Any] | None = None,
        **connect_kwargs: Any,
    ) -> None:
        super().__init__(name="pgsched-leader-lease", daemon=True)
        self._lease = lease
        self._dsn = dsn
        self._kwargs = connect_kwargs
        self._stop_event = threading.Event()
        self._given = conn
        self._conn = conn

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self._lease.lease_seconds)

    def run(self) -> None:
        interval = self._lease.lease_seconds / 3
        try:
            while not self._stop_event.wait(interval):
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = connect(self._dsn, autocommit=True, **self._kwargs)
                    if not self._lease.renew(self._conn):
                        log.warning(
                            "sweeper %s: lease generation %s was taken over; stopping the sweeps",
                            self._lease.holder,
                            self._lease.generation,
                        )
                        return
                except psycopg.Error as exc:
                    log.warning("sweep leader lease not renewed (%s); retrying", first_line(exc))
                    self._drop_own()
                    self._conn = None
        finally:
            self._drop_own()

    def _drop_own(self) -> None:
        if self._conn is not None and self._conn is not self._given:
            self._conn.close()


def _fence_statement() -> Any:  # called where `query` names the statement argument
    return query("sweep_leader_fence")


class FencedCursor(psycopg.Cursor[Any]):
    """Runs each statement given outside a transaction inside one that first checks the
    connection's fence (see FencedConnection). Statements inside the caller's own
    transaction are not wrapped: the caller fences that transaction itself, if it must."""

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> FencedCursor:
        conn = self.connection
        fence = getattr(conn, "fence", None)
        if fence is None or conn.info.transaction_status != TransactionStatus.IDLE:
            super().execute(query, params, prepare=prepare, binary=binary)
            return self
        with conn.transaction():
            super().execute(_fence_statement(), fence)
            super().execute(query, params, prepare=prepare, binary=binary)
        return self


class FencedConnection(psycopg.Connection[Any]):
    """A connection whose statements are fenced by the lease generation while `fence` is
    set (the holder and generation to check), and run as usual while it is None."""

    fence: dict[str, Any] | None = None


def connect_fenced(dsn: str, **kwargs: Any) -> FencedConnection:
    conn = connect(
        dsn, cls=FencedConnection, autocommit=True, cursor_factory=FencedCursor, **kwargs
    )
    assert isinstance(conn, FencedConnection)
    return conn
