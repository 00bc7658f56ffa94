"""Who holds the vacuum horizon back.

While a session keeps an old snapshot or transaction open (a long report, a client idle in
a transaction), or a standby's hot_standby_feedback or a replication slot pins an old xmin,
VACUUM cannot remove the rows that died after it: the hot tier's claimed and finished rows
pile up, and claims step over them (measured: 1.5 ms a claim became 14.7 ms with a
snapshot held 5 minutes at 670 tasks/s). Nothing in pgsched can end such a session; what
it can do is name it early. The sweep leader reads the holders every `interval` seconds
(`HorizonSweep`) and logs a warning naming each one (pid, application, age) once it passes
`warn_after` seconds (or, for standbys and slots, which have no start time, `warn_xids`
transactions); `pgsched doctor` judges the same list, and the leader's metrics export the
oldest ages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from pgsched.option_checks import require_seconds
from pgsched.queries import query

log = logging.getLogger("pgsched.horizon")


@dataclass(frozen=True)
class HorizonHolder:
    kind: str  # 'session', 'standby' or 'replication slot'
    pid: int | None
    name: str | None  # the application's name, or the slot's
    username: str | None
    state: str | None
    age_s: float | None  # how long the session's transaction has been open
    xid_age: int | None  # transactions since the xmin it pins
    query: str | None

    def describe(self) -> str:
        """`session pid 4711 (application 'report', user bob, idle in transaction):
        transaction open 1200 s, xmin 52000 transactions old, last query '...'`"""
        label = "slot" if self.kind == "replication slot" else "application"
        who = []
        if self.name:
            who.append(f"{label} {self.name!r}")
        if self.username:
            who.append(f"user {self.username}")
        if self.state:
            who.append(self.state)
        head = self.kind if self.pid is None else f"{self.kind} pid {self.pid}"
        said = ", ".join(who)
        facts = []
        if self.age_s is not None:
            facts.append(f"transaction open {self.age_s:.0f} s")
        if self.xid_age is not None:
            facts.append(f"xmin {self.xid_age} transactions old")
        if self.query:
            facts.append(f"last query {self.query!r}")
        return f"{head} ({said}): {', '.join(facts)}" if said else f"{head}: {', '.join(facts)}"


def read_holders(conn: psycopg.Connection[Any]) -> list[HorizonHolder]:
    """The holders, the oldest pinned xmin first (sql/queries.sql: horizon_holders)."""
    return [HorizonHolder(*row) for row in conn.execute(query("horizon_holders")).fetchall()]


def is_old(holder: HorizonHolder, warn_after: float, warn_xids: int) -> bool:
    if holder.age_s is not None:
        return holder.age_s > warn_after
    return holder.xid_age is not None and holder.xid_age > warn_xids


@dataclass
class HorizonSweep:
    """Run by the sweep leader: a warning per holder past the threshold, once per holder."""

    interval: float = 30.0
    warn_after: float = 300.0
    warn_xids: int = 1_000_000
    name: str = "horizon"
    _warned: set[tuple[str, int | None, str | None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        require_seconds("horizon sweep interval", self.interval)
        require_seconds("--horizon-warn", self.warn_after)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        holders = read_holders(conn)
        old = [h for h in holders if is_old(h, self.warn_after, self.warn_xids)]
        seen = set()
        for holder in old:
            key = (holder.kind, holder.pid, holder.name)
            seen.add(key)
            if key in self._warned:
                continue
            log.warning(
                "vacuum horizon held back by %s: dead rows pile up in the hot tier and claims"
                " slow down until it ends",
                holder.describe(),
                extra={
                    "event": "horizon_held",
                    "fields": {
                        "kind": holder.kind,
                        "pid": holder.pid,
                        "name": holder.name,
                        "age_s": None if holder.age_s is None else round(holder.age_s, 1),
                        "xid_age": holder.xid_age,
                    },
                },
            )
        self._warned = seen
        return {"holding_back": len(old)}
