"""Lanes: urgent work never waits behind bulk work.

HIGH (priority 8-10), NORMAL (4-7), LOW (0-3) follow from the priority; BATCH is asked for
explicitly (bulk fan-out, throttled); DEAD is where terminal failures land. The database
decides a task's lane (SQL `pgsched.lane_for`); this mirror serves parsing and display.
"""

from __future__ import annotations

from enum import StrEnum


class Lane(StrEnum):
    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"
    BATCH = "BATCH"
    DEAD = "DEAD"

    @classmethod
    def parse(cls, name: str) -> Lane:
        try:
            return cls(name.strip().upper())
        except ValueError:
            known = ", ".join(lane.value for lane in cls)
            raise ValueError(f"unknown lane {name!r} (one of {known})") from None

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel that wakes this lane's workers."""
        return f"pgsched_{self.value.lower()}"


WORK_LANES = (Lane.HIGH, Lane.NORMAL, Lane.LOW, Lane.BATCH)
