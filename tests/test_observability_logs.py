"""JSON log lines of a real worker: one object per line, the task's facts as keys."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from worker_helpers import Workers, schedule, wait_until


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line must be one JSON object: a stray text line fails the test."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_log_lines_of_failed_dead_timeout_and_missing_handler(
    conn: psycopg.Connection, workers: Workers
) -> None:
    failed = schedule(conn, "always_fails", max_attempts=2)
    timed_out = schedule(conn, "slow_async", max_attempts=1)
    unhandled = schedule(conn, "no_such_type", max_attempts=1)
    worker = workers.start("json-1", extra=["--log-format", "json"])

    def about(task_id: int, outcome: str) -> list[dict[str, Any]]:
        return [
            r
            for r in json_lines(worker.log())
            if r.get("task_id") == task_id and r.get("outcome") == outcome
        ]

    wait_until(lambda: about(failed, "dead"), 30, what="always_fails to go DEAD")
    wait_until(lambda: about(timed_out, "dead"), 30, what="slow_async to go DEAD")
    wait_until(lambda: about(unhandled, "dead"), 30, what="no_such_type to go DEAD")
    records = json_lines(worker.log())
    for record in records:
        assert {"ts", "level", "logger", "msg"} <= record.keys(), record

    startup = [r for r in records if r.get("process") == "worker"]
    assert len(startup) == 1, records
    assert startup[0]["lanes"] == "normal"
    assert isinstance(startup[0]["schema_version"], int)
    assert "password" not in json.dumps(startup[0])

    (retried,) = about(failed, "retried")
    assert retried["level"] == "WARNING"
    assert retried["task_type"] == "always_fails"
    assert retried["lane"] == "NORMAL"
    assert retried["tenant"] == "default"
    assert "\n" not in retried["msg"]
    assert (retried["attempt"], retried["max_attempts"]) == (1, 2)
    assert retried["next_retry_in_s"] == pytest.approx(0.4)
    (dead,) = about(failed, "dead")
    assert dead["level"] == "ERROR"
    assert dead["attempt"] == 2
    assert dead["error_class"]

    (timeout,) = about(timed_out, "dead")
    assert timeout["error_class"] == "timeout"
    assert timeout["task_type"] == "slow_async"

    (missing,) = about(unhandled, "dead")
    assert missing["error_class"] == "no_handler"
    assert "no handler" in missing["msg"]
    assert "task DEAD" in missing["msg"]
