"""The handler context's short names read the task's own fields."""

from __future__ import annotations

from datetime import UTC, datetime

from pgsched.handlers import TaskContext, TaskRow


def test_the_context_names_the_attempt_where_users_look_first() -> None:
    row = TaskRow(
        id=7,
        task_type="report",
        tenant_id="acme",
        payload_json='{"a": 1}',
        metadata_json="{}",
        attempt=2,
        max_attempts=5,
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        lane="NORMAL",
        priority=5,
        idempotency_key=None,
        lease_token=None,
    )
    ctx = TaskContext(row, "w1")
    assert (ctx.attempt, ctx.max_attempts, ctx.task_id, ctx.tenant_id) == (2, 5, 7, "acme")
    assert ctx.payload == {"a": 1}
    assert not ctx.cancelled
