"""The claim floor: where a lane's claims start reading its queued rows.

Every claim leaves its rows' entries in the claim indexes, at the start of the ranges the
next claims read. Vacuum clears them, and scans mark them dead in passing, but not while a
session holds a snapshot older than them (a transaction left open, a replica's
hot_standby_feedback): then every claim steps over all of them, a heap visit each, and a
claim that took 1.5 ms takes tens. With a floor, `task_claim_many` and `lane_next_due`
read from `next_run_at >= floor` on: the index seek lands past them (sql/code/claim.sql,
0046).

The floor must never hide a QUEUED row for long. It is this worker's own knowledge:

- A claim that got fewer rows than it asked for (none, too) took every due row it could
  see from its floor on: every row left QUEUED is due later than the latest this worker
  took, by that claim or the full ones before it. The floor rises to that, less MARGIN. A
  full claim does not raise it (another tenant's or priority's older rows may be
  waiting).
- A row queued after that with an earlier due time (an explicit past run_at, a producer's
  long transaction, a promoted overdue row) comes with a NOTIFY whose payload is its due
  time: the floor goes down to it, less MARGIN, before the next claim. A wake-up that says
  no due time (the lease rescue, retries, a requeue, an older producer) or a listener that
  reconnected (notifications may have been lost) drops the floor: the next claim is
  unbounded.
- What no NOTIFY announces (a row another worker locked, then rolled back; rows a task
  limit held back when the limit goes away) is found by a probe every PROBE_S seconds, beside
  the claims: the lane's earliest queued due time read from the start (`lane_next_due`
  without a floor, no locks), taken in as a wake-up with that due time.

With no floor (the first claim, after a drop) the claim is as it always was. Under task
limits the database ignores the floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

# Slack below the latest due time a claim took: rows committed a little late with due
# times just before it are read without needing their NOTIFY.
MARGIN = timedelta(seconds=1)
# The probe for queued rows behind the floor at least this often: the bound on how long a
# row no NOTIFY announced (a rolled-back claim's) waits behind it. It runs beside the
# claims, never in their way: under a held horizon it steps over every dead entry of the
# lane, a heap visit each (56 ms after 200,000 claims), which a claim must not.
PROBE_S = 60.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def queued_due(payload: str) -> datetime | None:
    """The due time a lane's NOTIFY payload carries (epoch seconds), None if it carries
    none or something else."""
    try:
        seconds = Decimal(payload)
    except (InvalidOperation, ValueError):
        return None
    if not seconds.is_finite():
        return None
    try:
        return _EPOCH + timedelta(microseconds=int(seconds * 1_000_000))
    except OverflowError:
        return None


class ClaimFloor:
    """One lane's floor, kept by its claim loop: `bound()` before a claim, `claimed()`
    after it, `queued()` from the wake-ups and the probe."""

    def __init__(self, margin: timedelta = MARGIN) -> None:
        self.margin = margin
        self._value: datetime | None = None
        self._earliest_queued: datetime | None = None
        # The latest due time taken since the floor last rose.
        self._taken_top: datetime | None = None
        self._unknown_queued = False
        self.last_bound: datetime | None = None
        self.unbounded_claims = 0
        self.bounded_claims = 0

    def queued(self, due: datetime | None) -> None:
        """A wake-up, or the probe: rows are queued, the earliest due at `due` (None: not
        said)."""
        if due is None:
            self._unknown_queued = True
        elif self._earliest_queued is None or due < self._earliest_queued:
            self._earliest_queued = due

    def hides(self, due: datetime) -> bool:
        """Whether a row due at `due` is behind the floor (the next claim would miss it)."""
        return self._value is not None and due < self._value

    def bound(self) -> datetime | None:
        """The floor for the next claim (None: unbounded), with the wake-ups heard so far
        taken in."""
        if self._unknown_queued:
            self._value = None
            self._unknown_queued = False
        if self._earliest_queued is not None:
            if self._value is not None:
                self._value = min(self._value, self._earliest_queued - self.margin)
            self._earliest_queued = None
        self.last_bound = self._value
        return self.last_bound

    def claimed(self, bound: datetime | None, asked: int, due_times: Sequence[datetime]) -> None:
        """After a claim made with `bound` that asked for `asked` rows and got rows due at
        `due_times` (a claim with a row it could not decode: pass `asked` due times, it
        counts as full)."""
        if bound is None:
            self.unbounded_claims += 1
        else:
            self.bounded_claims += 1
        if due_times:
            latest = max(due_times)
            if self._taken_top is None or latest > self._taken_top:
                self._taken_top = latest
        if len(due_times) >= asked or self._taken_top is None:
            return
        top = self._taken_top - self.margin
        self._taken_top = None
        if bound is not None:
            top = max(top, bound)
        if self._value is None or top > self._value:
            self._value = top
