"""Chaos, short form: real workers, a real server of the suite's own, one fault each.

Each test prints its figures (``CHAOS name: scheduled= completed= lost= run_twice=
reruns= recovery=``); ``pytest tests/chaos -s`` shows them, and the long form
(``python -m benchmarks.chaos``) runs the same scenarios longer.
"""

from __future__ import annotations

from collections.abc import Callable

import scenarios
from harness import Scenario

MakeScenario = Callable[[], Scenario]


def test_sigkill_of_workers_under_load(scenario: MakeScenario) -> None:
    f = scenarios.sigkill_workers(scenario(), seconds=8)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["killed"] == 2
    assert f.recovery_s is not None and f.recovery_s < 10


def test_postgres_restart_fast(scenario: MakeScenario) -> None:
    f = scenarios.postgres_restart(scenario(), "fast", seconds=8)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.recovery_s is not None and f.recovery_s < 15


def test_postgres_restart_immediate(scenario: MakeScenario) -> None:
    f = scenarios.postgres_restart(scenario(), "immediate", seconds=8)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.recovery_s is not None and f.recovery_s < 15


def test_listener_connection_killed(scenario: MakeScenario) -> None:
    f = scenarios.listener_killed(scenario(), rounds=3)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    # The worker polls every 30 s: a recovery well below that is the LISTEN coming back.
    assert f.recovery_s is not None and f.recovery_s < 8


def test_idle_session_timeout(scenario: MakeScenario) -> None:
    f = scenarios.idle_session_timeout(scenario(), trickles=4)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["worker_alive"]
    assert f.recovery_s is not None and f.recovery_s < 5


def test_nul_bytes_and_invalid_text_in_errors(scenario: MakeScenario) -> None:
    f = scenarios.unstorable_error_text(scenario(), count=30)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["worker_alive"]


def test_base_exceptions_in_handlers(scenario: MakeScenario) -> None:
    f = scenarios.base_exceptions(scenario(), count=30)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["worker_alive"]


def test_hung_low_handlers_high_keeps_its_lateness(scenario: MakeScenario) -> None:
    f = scenarios.hung_low_handlers(scenario(), urgent=20)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["hung_low_failed"] >= 4
    assert f.recovery_s is not None and f.recovery_s < 0.5


def test_database_read_only(scenario: MakeScenario) -> None:
    f = scenarios.database_read_only(scenario(), seconds=6)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["workers_alive"] == 2
    assert f.recovery_s is not None and f.recovery_s < 15
