"""Chaos, short form: real workers, a real server of the suite's own, one fault each.

Each test prints its figures (``CHAOS name: scheduled= completed= lost= run_twice=
reruns= recovery=``); ``pytest tests/chaos -s`` shows them, and the long form
(``python -m benchmarks.chaos``) runs the same scenarios longer.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.chaos import scenarios
from tests.support.chaos_harness import Figures, Scenario

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


def test_dead_pooled_connections_under_transactional_handlers(scenario: MakeScenario) -> None:
    f = scenarios.terminated_backends(scenario(), seconds=12)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    assert f.extra["kills"] >= 3
    # The handler's write commits with the completion: once per completed task.
    assert f.extra["writes_not_once"] == 0
    assert f.extra["worker_alive"] and f.extra["sigterm_exit"] == 0
    assert f.recovery_s is not None and f.recovery_s < 10


def test_too_few_connection_slots(scenario: MakeScenario) -> None:
    f = scenarios.too_few_connection_slots(scenario(), seconds=12)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    # No crash loop: each of the four started once and is still running.
    assert f.extra["workers_alive"] == 4 and f.extra["worker_starts"] == 4
    # Each worker short of slots says so (a worker that got none still waits and logs).
    assert f.extra["workers_saying_short"] >= 1 and f.extra["workers_idle_unexplained"] == 0
    assert f.recovery_s is not None and f.recovery_s < 15
    assert f.extra["tracebacks"] == 0
    assert f.extra["writes_not_once"] == 0
    assert f.extra["sigterm_exits"] == ["0"]


def test_xmin_held_while_tasks_flow(scenario: MakeScenario) -> None:
    f = scenarios.xmin_held(scenario(), hold_s=20, before_s=6, after_s=8, rate=150)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled
    # The hold was real: what finished during it stayed behind as dead tuples.
    hold = [w for w in f.series if w["phase"] == "hold"]
    assert f.extra["dead_tuples_peak"] >= sum(w["completed"] for w in hold) > 0


def _contained(f: Figures) -> None:
    """HIGH beside a broken LOW lane, against its own control run in the same worker."""
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled, f.line()
    assert f.extra["worker_alive"] and f.extra["worker_exit"] is None, f.line()
    assert f.extra["high_ran"] == f.extra["high_scheduled"], f.line()
    control, beside = f.extra["high_control_p99_ms"], f.extra["high_p99_ms"]
    assert beside <= 2 * control + 50, f.line()


def test_hung_low_handlers_are_killed_and_high_stays_on_time_with_default_flags(
    scenario: MakeScenario,
) -> None:
    f = scenarios.lanes_contained(scenario(), bad="hung", seconds=5)
    _contained(f)
    assert f.extra["bad_final"] == {"FAILED": 20}, f.line()
    assert f.extra["bad_errors_timeout"] == 20, f.line()


def test_a_blocking_async_low_handler_delays_only_its_own_lane(scenario: MakeScenario) -> None:
    f = scenarios.lanes_contained(scenario(), bad="block", seconds=6)
    _contained(f)
    assert f.extra["low_after_block"] == 5, f.line()


def test_handler_processes_that_die_fail_only_their_attempt(scenario: MakeScenario) -> None:
    f = scenarios.handler_process_deaths(scenario(), count=6)
    assert f.lost == 0 and f.completed == f.scheduled, f.line()
    assert f.extra["killed_named"] == 3 and f.extra["segfault_named"] == 3, f.line()
    assert f.extra["worker_alive"], f.line()


def test_point_in_time_restore_into_a_running_system(scenario: MakeScenario) -> None:
    f = scenarios.point_in_time_restore(scenario(), seconds=9)
    # Everything acknowledged before the restore point is back, and finishes there.
    assert f.lost == 0 and f.completed == f.scheduled > 0
    # Nothing COMPLETED at the point runs again; no keyed call sent again makes a task.
    assert f.run_twice == 0
    assert f.extra["keyed_sent_again"] > 0 and f.extra["keyed_created_again"] == 0
    assert f.extra["completed_at_restore"] > 0
    # What the point cut off is gone by design; what was running at it ran again.
    assert f.extra["cut_off"] > 0 and f.extra["processing_at_restore"] > 0
    assert f.recovery_s is not None and f.recovery_s < 30


def test_failover_to_a_synchronous_standby(scenario: MakeScenario) -> None:
    f = scenarios.failover(scenario(), synchronous=True, promote_after=0, seconds=10)
    # Every task acknowledged to the producer survives on the promoted standby, and runs once.
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled > 0
    assert f.extra["workers_alive"] == 2 and f.extra["leader_before"]
    assert f.recovery_s is not None and f.recovery_s < 2
    assert f.extra["doctor_replication"] == "pass"  # a synchronous standby loses nothing
    # The lead comes back within one lease (15 s) of the promotion, and no schedule runs twice.
    assert f.extra["leader_back_s"] is not None and f.extra["leader_back_s"] < 15 + 2
    assert f.extra["schedule_run_twice"] == 0


def test_failover_after_an_outage_comes_back_within_two_seconds(scenario: MakeScenario) -> None:
    f = scenarios.failover(scenario(), synchronous=True, promote_after=20, seconds=10)
    assert f.lost == 0 and f.run_twice == 0 and f.completed == f.scheduled > 0
    assert f.recovery_s is not None and f.recovery_s < 2
    assert f.extra["leader_back_s"] is not None and f.extra["leader_back_s"] < 15 + 2
    assert f.extra["schedule_run_twice"] == 0


def test_failover_to_an_asynchronous_standby_is_what_doctor_warns_of(
    scenario: MakeScenario,
) -> None:
    f = scenarios.failover(scenario(), synchronous=False, promote_after=0, seconds=8)
    assert f.extra["doctor_replication"] == "warn"
    # What can be lost is the last commits not replayed on the standby; the rest runs once.
    assert f.run_twice == 0 and f.completed + f.lost == f.scheduled
    assert f.recovery_s is not None and f.recovery_s < 2
