"""How long a failed attempt waits before the next: exponential backoff with jitter
(`RetryPolicy`), or an explicit schedule: a list of waits, or a function of the attempt and
the error that may give up (`RetrySchedule`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
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


MAX_RETRY_DELAYS = 100  # the longest explicit retry schedule (pgsched.task_options_problem)


def retry_delay_list(values: Iterable[float | timedelta]) -> list[timedelta]:
    """An explicit retry schedule as the database takes it (`retry_delays`): 1 to 100
    waits, each 0 to 30 days, given in seconds or as timedeltas. Refused with
    InvalidTaskError naming the element, as `pgsched.task_options_problem` does."""
    if isinstance(values, str | bytes):
        raise InvalidTaskError("retry_delays must be a list of delays, not a string")
    delays: list[timedelta] = []
    for index, value in enumerate(values):
        delays.append(_delay(value, f"retry_delays[{index + 1}]"))
    if not delays:
        raise InvalidTaskError("retry_delays must be a one-dimensional list of at least one delay")
    if len(delays) > MAX_RETRY_DELAYS:
        raise InvalidTaskError(
            f"retry_delays holds {len(delays)} delays; at most {MAX_RETRY_DELAYS}"
        )
    return delays


def _delay(value: object, name: str) -> timedelta:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidTaskError(f"{name} {value!r} is not a delay (seconds or a timedelta)")
    # Written so that NaN fails the check too.
    if not 0 <= seconds <= MAX_BACKOFF_SECONDS:
        raise InvalidTaskError(f"{name} {value!r} is out of range (0 to 30 days)")
    return timedelta(seconds=seconds)


# A handler's own retry rule: (attempt, error) -> the wait before the next attempt (seconds
# or a timedelta), or None to give up (the task goes to the DEAD lane at once).
RetryDecision = Callable[[int, BaseException], "float | timedelta | None"]


def pick_delay(delays: Sequence[timedelta], attempt: int) -> timedelta:
    """The wait after failed attempt `attempt` (1-based) in an explicit schedule: its
    element, or the last one for attempts past its end."""
    return delays[min(max(attempt, 1), len(delays)) - 1]


@dataclass(frozen=True)
class RetrySchedule:
    """What follows a failed attempt, in this order: the task's own `retry_delays` (set when
    it was scheduled), the handler's explicit list or its function, else its policy."""

    policy: RetryPolicy = RetryPolicy()
    delays: tuple[timedelta, ...] | None = None
    decide: RetryDecision | None = None

    @classmethod
    def of(
        cls,
        retry: RetryPolicy | None,
        retry_delays: Sequence[float | timedelta] | RetryDecision | None,
        what: str = "the handler",
    ) -> RetrySchedule:
        """A handler's schedule from `retry=` and `retry_delays=` (one of them at most)."""
        if retry is not None and retry_delays is not None:
            raise InvalidTaskError(
                f"{what}: give retry= (a RetryPolicy) or retry_delays= (a list or a function), "
                "not both"
            )
        policy = retry or RetryPolicy()
        if retry_delays is None:
            return cls(policy)
        if callable(retry_delays):
            return cls(policy, decide=retry_delays)
        return cls(policy, delays=tuple(retry_delay_list(retry_delays)))

    def delay(
        self,
        attempt: int,
        error: BaseException,
        task_delays: Sequence[timedelta] | None = None,
    ) -> timedelta | None:
        """The wait after failed attempt `attempt`, or None: give up. A function that raises
        or returns what is not a delay raises (InvalidTaskError for a bad value)."""
        if task_delays:
            return pick_delay(task_delays, attempt)
        if self.delays is not None:
            return pick_delay(self.delays, attempt)
        if self.decide is not None:
            value = self.decide(attempt, error)
            if value is None:
                return None
            return _delay(value, f"retry_delays({attempt}, ...) returned")
        return self.policy.delay(attempt)
