"""pgsched.testing: test the code that schedules tasks and the handlers that run them,
against your own Postgres, without a worker process.

    # conftest.py
    pytest_plugins = ["pgsched.testing"]

    # test_invoices.py
    from pgsched.testing import assert_scheduled, drain

    def test_an_invoice_is_sent(pgsched_app):
        billing.create_invoice(1042)               # schedules send_invoice
        assert_scheduled("send_invoice", payload={"invoice": 1042}, app=pgsched_app)
        result = drain(pgsched_app)                # runs it here, through the real lifecycle
        assert result.completed == 1

The fixtures are in `pgsched.testing.plugin`; `drain` in `pgsched.testing.drain`; the
assertions in `pgsched.testing.assertions`. The guide: docs/guides/testing.md.
"""

import contextlib

from pgsched.testing.assertions import (
    FoundTask,
    assert_not_scheduled,
    assert_scheduled,
    scheduled_tasks,
)
from pgsched.testing.drain import DrainResult, Ran, drain, drain_async

# The plugin's hooks and fixtures, so that `pytest_plugins = ["pgsched.testing"]` finds
# them here; without pytest the helpers above work alone.
with contextlib.suppress(ImportError):
    from pgsched.testing.plugin import (
        pgsched_app,
        pgsched_dsn,
        pgsched_server,
        pgsched_shared_dsn,
        pgsched_template,
        pgsched_tx,
        pytest_addoption,
    )

__all__ = [
    "DrainResult",
    "FoundTask",
    "Ran",
    "assert_not_scheduled",
    "assert_scheduled",
    "drain",
    "drain_async",
    "pgsched_app",
    "pgsched_dsn",
    "pgsched_server",
    "pgsched_shared_dsn",
    "pgsched_template",
    "pgsched_tx",
    "pytest_addoption",
    "scheduled_tasks",
]
