"""The shop's tests: what an order schedules, and what its handlers do, without a worker."""

from datetime import timedelta

from shop.orders import place_order
from shop.tasks import SENT

from pgsched.testing import assert_not_scheduled, assert_scheduled, drain, scheduled_tasks


def test_an_order_schedules_its_receipt_once(pgsched_app):
    place_order(1042, "ada@example.com")
    place_order(1042, "ada@example.com")  # a retried request: the same receipt
    assert_scheduled("send_receipt", payload={"order": 1042}, app=pgsched_app, count=1)


def test_the_receipt_is_sent(pgsched_app):
    SENT.clear()
    place_order(7, "grace@example.com")
    result = drain(pgsched_app, lanes=["normal"])
    assert result.completed == 1
    assert SENT == ["order 7 to grace@example.com"]
    assert_not_scheduled("send_receipt", app=pgsched_app)


def test_the_review_request_waits_a_week(pgsched_app):
    place_order(8, "alan@example.com")
    (review,) = assert_scheduled("ask_for_review", payload={"order": 8}, app=pgsched_app)
    drain(pgsched_app)
    # Not due yet: still scheduled (no handler here would run it anyway).
    assert_scheduled("ask_for_review", app=pgsched_app, run_at=review.run_at)


def test_a_bouncing_address_ends_in_the_dead_lane(pgsched_app):
    place_order(9, "nobody@invalid")
    first = drain(pgsched_app, lanes=["normal"])
    assert [r.outcome for r in first.ran] == ["RETRY"]
    # The retries are due minutes later: drain as of an hour on, by the claim's clock.
    (task,) = scheduled_tasks("send_receipt", app=pgsched_app)
    rest = drain(pgsched_app, lanes=["normal"], as_of=task.run_at + timedelta(hours=1))
    assert [r.outcome for r in rest.ran] == ["RETRY", "FAILED"]
    (dead,) = assert_scheduled("send_receipt", statuses=["FAILED"], app=pgsched_app)
    assert "mailbox nobody@invalid does not exist" in dead.last_error


def test_in_a_transaction_rolled_back_after_the_test(pgsched_tx):
    place_order(10, "ada@example.com", conn=pgsched_tx)
    assert_scheduled("send_receipt", payload={"order": 10}, conn=pgsched_tx)
