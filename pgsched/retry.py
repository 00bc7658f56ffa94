"""How long a failed attempt waits before the next: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from pgsched.errors import InvalidTaskError

MAX_BACKOFF_SECONDS = 30 * 24 * 3600  # the longest wait between two attempts: 30 days
MAX_BACKOFF_FACTOR = 100.0


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
        # Written so that NaN fails every check too.
        if not 0 <= self.cap_seconds <= MAX_BACKOFF_SECONDS:
            raise InvalidTaskError(
                f"RetryPolicy.cap_seconds {self.cap_seconds} is out of range "
                f"(0 to {MAX_BACKOFF_SECONDS}, 30 days)"
            )
        if not 0 <= self.base_seconds <= self.cap_seconds:
            raise InvalidTaskError(
                f"RetryPolicy.base_seconds {self.base_seconds} is out of range "
                f"(0 to cap_seconds, {self.cap_seconds})"
            )
        if not 1 <= self.factor <= MAX_BACKOFF_FACTOR:
            raise InvalidTaskError(
                f"RetryPolicy.factor {self.factor} is out of range (1 to {MAX_BACKOFF_FACTOR:g})"
            )
        if not 0 <= self.jitter < 1:
            raise InvalidTaskError(f"RetryPolicy.jitter {self.jitter} is a fraction in [0, 1)")

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """The wait after failed attempt number `attempt` (1-based)."""
        # The exponent is capped before it is raised: factor ** 1000 overflows a float.
        exponent = min(max(attempt - 1, 0), 64)
        raw = min(self.base_seconds * self.factor**exponent, self.cap_seconds)
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return timedelta(seconds=max(raw * (1 + spread), 0.0))
