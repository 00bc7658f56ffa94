"""A lane engine asked to stop before its thread has made its event loop still stops."""

from __future__ import annotations

from typing import Any, cast

from pgsched.handlers import HandlerRegistry
from pgsched.lanes import Lane
from pgsched.worker.config import WorkerConfig
from pgsched.worker.lane_engine import LaneEngine


def test_a_stop_asked_before_the_lane_runs_is_not_lost(db_dsn: str) -> None:
    engine = LaneEngine(
        Lane.NORMAL,
        db_dsn,
        "w-early-stop",
        HandlerRegistry(),
        WorkerConfig(lanes=(Lane.NORMAL,)),
        keeper=cast(Any, None),  # never reached: the lane stops before it claims
        metrics=None,
        plain_pool=None,
        open_plain_pool=False,
        on_thread_stuck=lambda *_: None,
        arm_next=lambda _: None,
        stop_worker=lambda: None,
    )
    engine.stop()  # a shutdown as the worker starts: the lane's loop does not exist yet
    engine.start()
    engine.finished.result(timeout=30)
    assert engine.started.result() is False  # it never ran
