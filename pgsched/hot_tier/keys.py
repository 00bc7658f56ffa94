"""Key names and scores of the hot tier.

Every key of a lane carries the lane in a Redis Cluster hash tag (`pgsched:{HIGH}:due`), so
the keys one script touches (the lane's sorted set, its meta hash, the set a rebuild fills)
live in one slot. A sorted set's score orders claims as Postgres does: higher priority
first, then earlier due time. The priority is a band of `BAND` milliseconds:

    score = (10 - priority) * BAND + due time in epoch milliseconds

`BAND` is above any due time this side of the year 2286, and the largest score (11 * BAND)
is below 2**53, so every score is an exact integer in Redis' double.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

BAND = 10**13
PRIORITIES = range(10, -1, -1)  # highest first, as claims take them


@dataclass(frozen=True)
class LaneKeys:
    namespace: str
    lane: str

    @property
    def _prefix(self) -> str:
        return f"{self.namespace}:{{{self.lane}}}"

    @property
    def due(self) -> str:
        """The sorted set of the lane's mirrored ids."""
        return f"{self._prefix}:due"

    @property
    def build(self) -> str:
        """Where a rebuild writes before it is swapped in as `due`."""
        return f"{self._prefix}:due:build"

    @property
    def meta(self) -> str:
        """A hash: epoch, run_id (Redis'), system_id (Postgres'), window, mirrored_at."""
        return f"{self._prefix}:meta"

    @property
    def wake(self) -> str:
        """The pub/sub channel that wakes the lane's workers."""
        return f"{self._prefix}:wake"


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def score(priority: int, due: datetime) -> int:
    return (10 - priority) * BAND + epoch_ms(due)


def due_bands(now_ms: int) -> list[str]:
    """The score ranges holding what is due at `now_ms`, highest priority first: the
    pop script's ARGV pairs (min, max)."""
    bands: list[str] = []
    for priority in PRIORITIES:
        base = (10 - priority) * BAND
        bands += [str(base), str(base + now_ms)]
    return bands
