"""Chaos, short form, for the Redis hot tier: a real redis-server flushed, killed and
restarted empty, unreachable at a worker's start and at its maxmemory, under load. Nothing
is lost, nothing runs twice: Redis holds only ids, the rows are the truth."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.chaos import scenarios
from tests.support.chaos_harness import Scenario

MakeScenario = Callable[[], Scenario]


def test_redis_flushed_killed_and_full_under_load(scenario: MakeScenario) -> None:
    f = scenarios.redis_faults(scenario(), seconds=12)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    # Both workers ran to the end and stopped cleanly when told.
    assert f.extra["stop_codes"] == [0, 0]
    assert f.extra["claimed_by_id"] > 0, "no task was claimed through Redis"
    assert f.extra["oom_seen"], "Redis at maxmemory refused nothing: the fault did not happen"
    assert f.recovery_s is not None and f.recovery_s < 10
