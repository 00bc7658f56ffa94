"""A worker refuses a configuration it cannot run with before it connects: the message
names the option and the value; lane and sweep settings likewise."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pgsched.errors import ConfigError, PgschedError
from pgsched.lanes import Lane
from pgsched.sweeps import (
    CHUNK_TIMINGS,
    PromotionSweep,
    RecurringSweep,
    RescueSweep,
    RetentionSweep,
)
from pgsched.worker import LaneSettings, WorkerConfig

REFUSED = [
    ({"concurrency": 0}, "--concurrency must be at least 1 (got 0)"),
    ({"concurrency": -3}, "--concurrency must be at least 1 (got -3)"),
    ({"batch_size": 0}, "--batch-size must be at least 1 (got 0)"),
    ({"flush_size": -1}, "--flush-size must be at least 1 (got -1)"),
    ({"batch_concurrency": 0}, "--batch-concurrency must be at least 1 (got 0)"),
    ({"lease_seconds": 0.0}, "--lease must be at least 1 seconds (got 0)"),
    ({"lease_seconds": -5.0}, "--lease must be at least 1 seconds (got -5)"),
    ({"poll_interval": 0.0}, "--poll-interval must be more than 0 seconds (got 0)"),
    ({"poll_interval": math.nan}, "--poll-interval must be a finite number of seconds (got nan)"),
    ({"grace_seconds": -1.0}, "--grace must be at least 0 seconds (got -1)"),
    ({"cancel_grace_seconds": -1.0}, "--cancel-grace must be at least 0 seconds (got -1)"),
    ({"cancel_grace_seconds": math.inf}, "--cancel-grace must be a finite number of seconds"),
    ({"batch_rate": -5.0}, "--batch-rate must be a positive number of tasks per second (got -5.0)"),
    ({"batch_rate": math.inf}, "--batch-rate must be a positive number of tasks per second"),
    ({"flush_interval": 0.0}, "--flush-interval must be more than 0 seconds (got 0)"),
    ({"rescue_interval": -1.0}, "rescue_interval must be more than 0 seconds (got -1)"),
    ({"max_stuck_threads": -1}, "--max-stuck-threads must be at least 0 (got -1)"),
    ({"stall_threshold": 0.0}, "--stall-threshold must be more than 0 seconds (got 0)"),
    ({"wakeup_debounce": -0.1}, "--wakeup-debounce must be at least 0 seconds (got -0.1)"),
    ({"claim_interval": -0.01}, "--claim-interval must be at least 0 seconds (got -0.01)"),
    ({"batch_size": 2.5}, "--batch-size must be a whole number (got 2.5)"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED)
def test_worker_config_refuses_with_the_option_named(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        WorkerConfig(**values)
    assert message in str(refused.value)
    assert isinstance(refused.value, PgschedError)


def test_lane_settings_refuse_zero_concurrency_and_rates() -> None:
    with pytest.raises(ConfigError, match=r"concurrency must be at least 1 \(got 0\)"):
        LaneSettings(0)
    with pytest.raises(ConfigError, match="rate must be a positive number"):
        LaneSettings(4, rate=0.0)
    with pytest.raises(ConfigError, match="--lanes"):
        WorkerConfig(lanes=(Lane.DEAD,))


def test_defaults_are_accepted() -> None:
    config = WorkerConfig()
    assert config.max_stuck_threads == 10
    assert config.lane_settings(Lane.BATCH) == LaneSettings(4, 200.0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PromotionSweep(chunk=0), "promotion sweep chunk must be at least 1 (got 0)"),
        (lambda: RescueSweep(chunk=-1), "rescue sweep chunk must be at least 1 (got -1)"),
        (lambda: RetentionSweep(chunk=0), "retention sweep chunk must be at least 1 (got 0)"),
        (lambda: RecurringSweep(batch=0), "recurring sweep batch must be at least 1 (got 0)"),
        (
            lambda: PromotionSweep(interval=0.0),
            "promotion sweep interval must be more than 0 seconds (got 0)",
        ),
    ],
)
def test_sweeps_refuse_a_chunk_that_would_loop_forever(build: Any, message: str) -> None:
    """A chunk of 0 promotes (or prunes) nothing, and `moved < chunk` never ends the loop."""
    with pytest.raises(ConfigError) as refused:
        build()
    assert message in str(refused.value)


def test_the_promotion_sweep_keeps_a_bounded_window_of_chunk_timings() -> None:
    sweep = PromotionSweep()
    for _ in range(CHUNK_TIMINGS + 500):
        sweep.chunk_seconds.append(0.001)
    assert len(sweep.chunk_seconds) == CHUNK_TIMINGS
