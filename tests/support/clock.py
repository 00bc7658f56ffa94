"""A monotonic clock a test moves by hand, for the bookkeeping that refreshes on time."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
