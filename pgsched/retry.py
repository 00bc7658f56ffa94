"""How long a failed attempt waits before the next: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """delay(attempt) = min(base * factor ** (attempt - 1), cap), then +/- jitter.

    Jitter spreads retries of tasks that failed together (a flaky dependency) so they do
    not come back as one thundering herd.
    """

    base_seconds: float = 2.0
    factor: float = 2.0
    cap_seconds: float = 3600.0
    jitter: float = 0.2  # fraction of the delay, drawn uniformly in [-jitter, +jitter]

    def __post_init__(self) -> None:
        if self.base_seconds < 0 or self.factor < 1 or self.cap_seconds < 0:
            raise ValueError("RetryPolicy needs base >= 0, factor >= 1, cap >= 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("RetryPolicy.jitter is a fraction in [0, 1)")

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """The wait after failed attempt number `attempt` (1-based)."""
        raw = min(self.base_seconds * self.factor ** max(attempt - 1, 0), self.cap_seconds)
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return timedelta(seconds=max(raw * (1 + spread), 0.0))
