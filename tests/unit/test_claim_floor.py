"""The claim floor's bookkeeping: it rises only after short claims, falls to what a
wake-up or the probe says was queued, drops on a wake-up that says nothing, and is never
dropped on a timer (the probe, beside the claims, looks behind it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.worker.claim_floor import ClaimFloor, queued_due

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def floor_after_short_claim() -> ClaimFloor:
    floor = ClaimFloor(margin=S)
    assert floor.bound() is None  # the first claim is unbounded
    floor.claimed(None, 10, [T0, T0 + 5 * S])
    return floor


def test_a_short_claim_raises_the_floor_to_its_latest_due_time_less_the_margin() -> None:
    floor = floor_after_short_claim()
    assert floor.bound() == T0 + 4 * S


def test_a_full_claim_leaves_the_floor_and_the_next_short_one_raises_it_past_both() -> None:
    floor = floor_after_short_claim()
    bound = floor.bound()
    floor.claimed(bound, 2, [T0 + 50 * S, T0 + 60 * S])  # full: older rows may wait
    assert floor.bound() == T0 + 4 * S
    # Nothing left to take: every row the full claim took was due before this claim.
    floor.claimed(bound, 2, [])
    assert floor.bound() == T0 + 59 * S
    floor.claimed(floor.bound(), 2, [])  # nothing taken since: nothing to rise to
    assert floor.bound() == T0 + 59 * S


def test_a_claim_with_a_row_it_could_not_decode_counts_as_full() -> None:
    floor = floor_after_short_claim()
    bound = floor.bound()
    floor.claimed(bound, 0, [])  # as the lane engine passes it: asked what it got
    assert floor.bound() == T0 + 4 * S


def test_the_floor_never_falls_below_the_bound_a_short_claim_read_from() -> None:
    floor = floor_after_short_claim()
    bound = floor.bound()
    floor.claimed(bound, 10, [T0 + 4 * S])
    assert floor.bound() == T0 + 4 * S


def test_a_wake_up_with_an_earlier_due_time_lowers_the_floor_before_the_next_claim() -> None:
    floor = floor_after_short_claim()
    floor.queued(T0 - 3600 * S)
    floor.queued(T0 + 100 * S)  # later than the floor: changes nothing
    assert floor.bound() == T0 - 3601 * S
    # Heard during a claim: applied to the one after, whatever that claim raised it to.
    bound = floor.bound()
    floor.queued(T0 - 7200 * S)
    floor.claimed(bound, 10, [T0 + 30 * S])
    assert floor.bound() == T0 - 7201 * S


def test_a_wake_up_without_a_due_time_makes_the_next_claim_unbounded() -> None:
    floor = floor_after_short_claim()
    floor.queued(None)
    assert floor.bound() is None
    assert floor.last_bound is None


def test_only_a_wake_up_without_a_due_time_unbounds_the_claims() -> None:
    floor = floor_after_short_claim()
    for _ in range(1000):  # however many claims, however long: the floor stays
        bound = floor.bound()
        floor.claimed(bound, 10, [])
        assert bound == T0 + 4 * S
    assert (floor.unbounded_claims, floor.bounded_claims) == (1, 1000)


def test_hides_says_which_due_times_the_next_claim_would_miss() -> None:
    floor = ClaimFloor(margin=S)
    assert not floor.hides(T0 - 3600 * S)  # no floor yet: nothing hidden
    floor.claimed(None, 10, [T0 + 5 * S])
    assert floor.hides(T0 + 3 * S)
    assert not floor.hides(T0 + 4 * S)
    floor.queued(T0)  # as the probe does with what it found
    floor.bound()
    assert not floor.hides(T0)


def test_queued_due_reads_epoch_seconds_and_nothing_else() -> None:
    assert queued_due("1767225600.123456") == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    assert queued_due("") is None
    assert queued_due("soon") is None
    assert queued_due("NaN") is None
    assert queued_due("Infinity") is None
    assert queued_due("1e300") is None
