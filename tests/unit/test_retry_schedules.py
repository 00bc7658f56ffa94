"""Retry schedules without a database: the order of the rules, an explicit list's last
wait repeating, a function giving up, and what is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgsched import App, InvalidTaskError, RetryPolicy
from pgsched.retry import RetrySchedule, retry_delay_list

S = timedelta(seconds=1)


def test_a_list_gives_each_attempt_its_wait_and_repeats_the_last() -> None:
    schedule = RetrySchedule.of(None, [1, 10, timedelta(minutes=1)])
    waits = [schedule.delay(attempt, RuntimeError("x")) for attempt in range(1, 6)]
    assert waits == [S, 10 * S, 60 * S, 60 * S, 60 * S]


def test_the_tasks_own_list_comes_first() -> None:
    schedule = RetrySchedule.of(None, lambda attempt, error: None)
    assert schedule.delay(2, RuntimeError("x"), [5 * S, 7 * S]) == 7 * S
    assert schedule.delay(2, RuntimeError("x")) is None


def test_a_function_sees_the_attempt_and_the_error() -> None:
    seen: list[tuple[int, str]] = []

    def rule(attempt: int, error: BaseException) -> float | None:
        seen.append((attempt, str(error)))
        return None if isinstance(error, ValueError) else 2.5

    schedule = RetrySchedule.of(None, rule)
    assert schedule.delay(3, RuntimeError("flaky")) == timedelta(seconds=2.5)
    assert schedule.delay(4, ValueError("bad")) is None
    assert seen == [(3, "flaky"), (4, "bad")]
    with pytest.raises(InvalidTaskError, match=r"retry_delays\(1, \.\.\.\) returned -1"):
        RetrySchedule.of(None, lambda attempt, error: -1).delay(1, RuntimeError())


def test_without_a_schedule_the_policy_decides() -> None:
    policy = RetryPolicy(base_seconds=3, jitter=0)
    assert RetrySchedule.of(policy, None).delay(1, RuntimeError()) == 3 * S


@pytest.mark.parametrize(
    ("delays", "words"),
    [
        ([], "at least one delay"),
        ([1, -1], r"retry_delays\[2\] -1 is out of range"),
        ([float("nan")], r"retry_delays\[1\] nan is out of range"),
        ([31 * 86400], r"retry_delays\[1\] 2678400 is out of range"),
        (["1s"], r"retry_delays\[1\] '1s' is not a delay"),
        ("10", "not a string"),
        ([1] * 101, "holds 101 delays; at most 100"),
    ],
)
def test_bad_lists_are_refused(delays: object, words: str) -> None:
    with pytest.raises(InvalidTaskError, match=words):
        retry_delay_list(delays)  # type: ignore[arg-type]


def test_a_handler_takes_a_policy_or_a_schedule_not_both() -> None:
    app = App("postgresql://unused")
    with pytest.raises(InvalidTaskError, match="not both"):
        app.register("a", lambda ctx: None, retry=RetryPolicy(), retry_delays=[1])
    with pytest.raises(InvalidTaskError, match=r"retry_delays\[1\]"):
        app.register("b", lambda ctx: None, retry_delays=[-1])
    registration = app.register("c", lambda ctx: None, retry_delays=[1, 2])
    assert registration.schedule is not None and registration.schedule.delays == (S, 2 * S)
