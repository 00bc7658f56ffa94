"""Chaos, short form, behind PgBouncer: a real pgbouncer in transaction mode between the
workers (and the producer) and the server, SIGKILLed mid-run and started again on the same
port. Nothing is lost, nothing runs twice, the workers ride it out."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.chaos import scenarios
from tests.support.chaos_harness import Scenario

MakeScenario = Callable[[], Scenario]


def test_pgbouncer_killed_and_restarted_under_load(scenario: MakeScenario) -> None:
    f = scenarios.pgbouncer_restart(scenario(), seconds=12, down_s=3)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["workers_alive"] == 2
    # The handlers' writes commit with the completion: once per completed task.
    assert f.extra["writes_not_once"] == 0
    # The fault happened: the producer's calls failed while the pooler was down.
    assert f.extra["refused_while_down"] > 0
    # From the kill: the 3 s down, the reconnects, then lateness back to normal.
    assert f.recovery_s is not None and f.recovery_s < 15
