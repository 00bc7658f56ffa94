"""The worker command refuses a bad option as a user meets it (exit 2, the option named, no
traceback); the garbage-collector tuning runs in the worker process with its settings; a
running worker passes the interpreter between its threads every millisecond."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.worker_helpers import (
    create_test_tables,
    run_cli,
    running_workers,
    schedule,
    steps,
    wait_until,
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be at least 1 (got 0)"),
        (["--batch-size", "-1"], "--batch-size must be at least 1 (got -1)"),
        (["--flush-size", "0"], "--flush-size must be at least 1 (got 0)"),
        (["--lease", "-1"], "--lease must be at least 1 seconds (got -1)"),
        (["--poll-interval", "0"], "--poll-interval must be more than 0 seconds (got 0)"),
        (["--batch-rate", "-1"], "--batch-rate must be a positive number of tasks per second"),
        (["--max-stuck-threads", "-2"], "--max-stuck-threads must be at least 0 (got -2)"),
        (["--cancel-grace", "-1"], "--cancel-grace must be at least 0 seconds (got -1)"),
    ],
)
def test_the_worker_command_refuses_bad_options_without_a_traceback(
    db_env: dict[str, str], argv: list[str], message: str
) -> None:
    done = run_cli(db_env, "worker", "--app", "tests.apps.dispatch:app", *argv, timeout=30)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_gc_tuning_is_one_named_function_with_the_worker_settings() -> None:
    code = (
        "import gc\n"
        "from pgsched.worker.gc_tuning import tune_gc_for_throughput\n"
        "keep = [object() for _ in range(1000)]\n"
        "tune_gc_for_throughput()\n"
        "print(gc.get_threshold(), gc.get_freeze_count() >= 1000)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "(20000, 20, 100) True"


def test_a_running_worker_switches_threads_every_millisecond(
    db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection
) -> None:
    create_test_tables(conn)
    with running_workers(db_env, tmp_path) as workers:
        worker = workers.start("switching", app="tests.apps.dispatch:app")
        worker.wait_running()
        task_id = schedule(conn, "switch_interval")
        wait_until(lambda: steps(conn, task_id), 20, what="the handler to run")
    # The handler ran in the worker process: its interval, not CPython's 0.005.
    assert [s["detail"] for s in steps(conn, task_id)] == ["0.001"]
