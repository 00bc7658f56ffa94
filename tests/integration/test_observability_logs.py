"""JSON log lines of a real worker: one object per line, the task's facts as keys."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from tests.support.processes import Processes
from tests.support.worker_helpers import Workers, schedule, wait_until

if TYPE_CHECKING:
    from tests.conftest import PgServer


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
    # How long the attempt ran: the handler's timeout is 0.5 s.
    assert 500 <= timeout["duration_ms"] < 5000, timeout
    assert retried["duration_ms"] >= 0 and dead["duration_ms"] >= 0
    assert timeout["task_type"] == "slow_async"

    (missing,) = about(unhandled, "dead")
    assert missing["error_class"] == "no_handler"
    assert "no handler" in missing["msg"]
    assert "task DEAD" in missing["msg"]


def _events(text: str) -> list[str]:
    return [r["event"] for r in json_lines(text) if "event" in r]


def test_json_lines_of_the_sweeper_leader_quarantine_and_database_outage(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path
) -> None:
    processes = Processes(db_env, tmp_path)
    try:
        sweeper = processes.start(
            "sweeper", "--log-format", "json", "sweeper", "--leader-retry", "0.5"
        )
        wait_until(
            lambda: "leader_gained" in _events(processes.log(sweeper)), 30, what="leadership"
        )
        # A schedule whose row the database refuses to arm: quarantined, by id.
        bad = conn.execute(
            "SELECT pgsched.schedule_recurring(task_type => 'minutely',"
            " cron_expression => '*/5 * * * *')"
        ).fetchone()[0]
        conn.execute("UPDATE pgsched.schedules SET priority = 11 WHERE id = %s", (bad,))
        conn.execute("NOTIFY pgsched_recurring")

        def quarantined() -> list[dict[str, Any]]:
            return [
                r
                for r in json_lines(processes.log(sweeper))
                if r.get("event") == "schedule_quarantined"
            ]

        (line,) = wait_until(quarantined, 15, what="the quarantine line")
        assert line["schedule_id"] == bad and line["level"] == "ERROR"
        assert "priority 11" in line["error"]

        # Its sessions are cut: leadership lost, the database back, leadership again.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        wait_until(
            lambda: _events(processes.log(sweeper)).count("leader_gained") == 2,
            20,
            what="re-election",
        )
        events = _events(processes.log(sweeper))
        start = events.index("leader_lost")
        assert events[start:] == [
            "leader_lost",
            "database_unreachable",
            "database_back",
            "leader_gained",
        ], events
    finally:
        processes.close()


def test_a_worker_says_once_that_the_database_is_gone_and_once_that_it_is_back(
    conn: psycopg.Connection, workers: Workers, db_name: str, pg_server: PgServer
) -> None:
    worker = workers.start("outage", extra=["--log-format", "json"])
    worker.wait_running()
    admin = pg_server.connect()
    try:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(db_name))
        )
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (db_name,),
        )
        wait_until(
            lambda: "database_unreachable" in _events(worker.log()), 20, what="the outage line"
        )
        time.sleep(2)  # several failed claims meanwhile: still one line
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(db_name))
        )
        wait_until(lambda: "database_back" in _events(worker.log()), 20, what="the back line")
    finally:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(db_name))
        )
        admin.close()
    records = [r for r in json_lines(worker.log()) if r.get("event")]
    assert [r["event"] for r in records] == ["database_unreachable", "database_back"], records
    assert records[1]["down_s"] >= 2
