"""Placing an order: the receipt is scheduled in the caller's transaction, if given."""

from datetime import UTC, datetime, timedelta

from shop.tasks import app


def place_order(order: int, email: str, *, conn=None):
    """Schedule the order's receipt (once per order) and its review request a week on."""
    receipt = app.schedule(
        "send_receipt",
        {"order": order, "email": email},
        idempotency_key=f"receipt:{order}",
        conn=conn,
    )
    app.schedule(
        "ask_for_review",
        {"order": order},
        run_at=datetime.now(UTC) + timedelta(days=7),
        conn=conn,
    )
    return receipt
