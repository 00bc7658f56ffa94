"""A lane engine asked to stop before its thread has made its event loop still stops."""

from __future__ import annotations

from tests.support.lane_loops import bare_lane_engine


def test_a_stop_asked_before_the_lane_runs_is_not_lost(db_dsn: str) -> None:
    engine = bare_lane_engine(db_dsn, "w-early-stop")
    engine.stop()  # a shutdown as the worker starts: the lane's loop does not exist yet
    engine.start()
    engine.finished.result(timeout=30)
    assert engine.started.result() is False  # it never ran
