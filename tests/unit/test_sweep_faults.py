"""A sweep setting that would make a sweep loop forever or never run is refused when the
sweep is made, naming the setting (the running faults are in tests/integration)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from pgsched.errors import ConfigError
from pgsched.sweeps import (
    PromotionSweep,
    RecurringSweep,
    RescueSweep,
    RetentionSweep,
    Sweeper,
)


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: PromotionSweep(chunk=0), "promotion sweep chunk"),
        (lambda: PromotionSweep(chunk=-5), "promotion sweep chunk"),
        (lambda: PromotionSweep(chunk=2.5), "promotion sweep chunk"),  # type: ignore[arg-type]
        (lambda: PromotionSweep(interval=0), "promotion sweep interval"),
        (lambda: PromotionSweep(interval=float("nan")), "promotion sweep interval"),
        (lambda: RecurringSweep(batch=0), "recurring sweep batch"),
        (lambda: RecurringSweep(interval=-1), "recurring sweep interval"),
        (lambda: RescueSweep(chunk=0), "rescue sweep chunk"),
        (lambda: RescueSweep(interval=float("inf")), "rescue sweep interval"),
        (lambda: RescueSweep(overdue_after=timedelta(seconds=-1)), "rescue sweep overdue_after"),
        (lambda: RetentionSweep(chunk=0), "retention sweep chunk"),
        (lambda: RetentionSweep(keep=timedelta(0)), "retention sweep keep"),
        (lambda: RetentionSweep(interval=0), "retention sweep interval"),
        (lambda: Sweeper("", [], leader_retry=0), "sweeper leader_retry"),
        (lambda: Sweeper("", [], leader_retry=-2), "sweeper leader_retry"),
    ],
)
def test_a_bad_sweep_setting_is_refused_naming_it(make: Callable[[], Any], option: str) -> None:
    with pytest.raises(ConfigError, match=f"^{option} must be"):
        make()
