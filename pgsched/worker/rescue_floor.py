"""The rescue floor: from which expiry time a lane's lease rescue reads the leases.

Every claim and every renewal leaves an entry in the lease index (`tasks_hot_lease_idx`),
and once the task finishes or the lease is renewed that entry is dead. Vacuum clears them,
but not while a session holds an old snapshot: then a rescue reading the expired leases
from the start steps over every one of them (34 ms a sweep after 200,000 claims, against
0.2 ms). With a floor, `lease_rescue_expired` reads from `lease_expires_at >= floor` on
(sql/code/leases_rescue.sql, 0047), so each dead entry is stepped over about once: by the
sweep during which its lease time passes.

The floor is this worker's own knowledge, kept per lane:

- A sweep that rescued fewer than it could (`max_tasks`) moved every lease it saw expired
  before the time it compared with (`swept_at`): the floor rises to that, less MARGIN. A
  full sweep leaves expired leases behind and keeps the floor where it was.
- A lease written in a transaction that began before a sweep but committed after it can
  carry an expiry below that sweep's time (a claim or renewal slower than MARGIN), and a
  lease the sweep skipped because another session held its row lock (a finish that then
  rolled back) stays expired below the floor. Both are found by a sweep without a floor,
  made at least every REFRESH_S seconds, and on the sweep after any failed one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

# Slack below the time a complete sweep compared with.
MARGIN = timedelta(seconds=1)
# A sweep without a floor at least this often: the bound on how long a lease the floor
# hides stays expired before it is rescued, on top of the lease itself.
REFRESH_S = 60.0


class RescueFloor:
    """One lane's floor, kept by its rescue: `bound()` before a sweep, `swept()` after it,
    `drop()` when a sweep failed."""

    def __init__(
        self,
        refresh_s: float = REFRESH_S,
        margin: timedelta = MARGIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.refresh_s = refresh_s
        self.margin = margin
        self._clock = clock
        self._value: datetime | None = None
        self._unbounded_at: float | None = None

    def bound(self) -> datetime | None:
        """The floor for the next sweep (None: read every expired lease)."""
        if self._unbounded_at is None or self._clock() - self._unbounded_at >= self.refresh_s:
            return None
        return self._value

    def swept(
        self, bound: datetime | None, rescued: int, max_tasks: int, swept_at: datetime
    ) -> None:
        """After a sweep made with `bound` that rescued `rescued` of at most `max_tasks`,
        comparing the leases with `swept_at`."""
        if bound is None:
            self._unbounded_at = self._clock()
        if rescued >= max_tasks:
            return
        top = swept_at - self.margin
        if self._value is None or top > self._value:
            self._value = top

    def drop(self) -> None:
        """A sweep failed (the connection, the database): the next one reads everything."""
        self._value = None
        self._unbounded_at = None
