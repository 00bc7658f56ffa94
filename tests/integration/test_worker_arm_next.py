"""A worker that cannot arm a schedule's next occurrence says which tasks it was for."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from pgsched.handlers import HandlerRegistry
from pgsched.worker.config import WorkerConfig
from pgsched.worker.worker import Worker

if TYPE_CHECKING:
    from tests.conftest import PgServer


def test_arming_that_fails_names_its_task_ids(
    pg_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A real server that refuses the connection: this database does not exist.
    worker = Worker(pg_server.dsn("no_such_database"), HandlerRegistry(), WorkerConfig())
    caplog.set_level(logging.WARNING, logger="pgsched.worker")
    worker._arm_next([7, 8])
    warned: list[Any] = [r for r in caplog.records if "arming" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "tasks 7,8:" in warned[0].getMessage()
    assert "recurring sweep will" in warned[0].getMessage()
    assert warned[0].task_id == 7
