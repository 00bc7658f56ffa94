"""Bounds Python checks before anything reaches the database: retry backoff (base, factor,
cap, jitter) and handler timeouts, each refused naming the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pgsched import InvalidTaskError, RetryPolicy
from pgsched.handlers import Registration, TaskHandler


class Noop(TaskHandler):
    def execute(self, ctx: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"cap_seconds": 10.0**300}, "RetryPolicy.cap_seconds .* out of range"),
        ({"cap_seconds": float("nan")}, "RetryPolicy.cap_seconds"),
        ({"base_seconds": 7200.0}, "RetryPolicy.base_seconds 7200.0 is out of range"),
        ({"factor": 1000.0}, "RetryPolicy.factor 1000.0 is out of range"),
        ({"factor": 0.5}, "RetryPolicy.factor"),
        ({"jitter": 1.0}, "RetryPolicy.jitter"),
    ],
)
def test_backoff_bounds(policy: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidTaskError, match=message):
        RetryPolicy(**policy)


def test_backoff_delay_of_a_late_attempt_stays_at_the_cap() -> None:
    policy = RetryPolicy(base_seconds=1, factor=100, cap_seconds=60, jitter=0)
    assert policy.delay(1000) == timedelta(seconds=60)


@pytest.mark.parametrize("timeout", [0, -1, 86401, float("inf"), float("nan")])
def test_handler_timeout_bounds(timeout: float) -> None:
    with pytest.raises(InvalidTaskError, match=r"timeout .* is out of range"):
        Registration("t", Noop(), timeout=timeout)
    Registration("t", Noop(), timeout=86400)
