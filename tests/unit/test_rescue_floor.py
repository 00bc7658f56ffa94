"""The rescue floor's bookkeeping: it rises to the time of a sweep that left nothing
expired behind (less the margin), stays after a full sweep, gives way to a sweep without a
floor every refresh, and is dropped by a failed sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.worker.rescue_floor import RescueFloor
from tests.support.clock import Clock

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def swept_once() -> tuple[RescueFloor, Clock]:
    clock = Clock()
    floor = RescueFloor(refresh_s=60, margin=S, clock=clock)
    assert floor.bound() is None  # the first sweep reads every expired lease
    floor.swept(None, 3, 1000, T0)
    return floor, clock


def test_a_sweep_that_moved_less_than_it_could_raises_the_floor_to_its_time() -> None:
    floor, _ = swept_once()
    assert floor.bound() == T0 - S
    floor.swept(T0 - S, 0, 1000, T0 + 5 * S)
    assert floor.bound() == T0 + 4 * S


def test_a_full_sweep_leaves_the_floor_where_it_was() -> None:
    floor, _ = swept_once()
    floor.swept(T0 - S, 1000, 1000, T0 + 5 * S)
    assert floor.bound() == T0 - S


def test_the_floor_never_goes_down() -> None:
    floor, _ = swept_once()
    floor.swept(T0 - S, 0, 1000, T0 - 10 * S)  # a sweep whose time was earlier
    assert floor.bound() == T0 - S


def test_a_sweep_without_a_floor_every_refresh() -> None:
    floor, clock = swept_once()
    clock.now += 59
    assert floor.bound() == T0 - S
    clock.now += 1
    assert floor.bound() is None
    floor.swept(None, 0, 1000, T0 + 60 * S)
    assert floor.bound() == T0 + 59 * S


def test_a_failed_sweep_makes_the_next_one_read_everything() -> None:
    floor, _ = swept_once()
    floor.drop()
    assert floor.bound() is None
