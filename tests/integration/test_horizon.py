"""Who holds VACUUM's horizon back, named: a session keeping a snapshot open is logged by
the sweep leader (pid, application, age) once past --horizon-warn, counted by `sweeper
--once`, judged by `pgsched doctor`, and exported by the leader's metrics."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.support.metrics_helpers import wait_scrape
from tests.support.processes import Processes, run_cli
from tests.support.worker_helpers import wait_until


def sweeper_once(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, "sweeper", "--once", *args)


@pytest.fixture
def holder(connect: Callable[..., psycopg.Connection[Any]]) -> tuple[int, psycopg.Connection]:
    """A report's session: a REPEATABLE READ transaction that has read, so holds a snapshot."""
    conn = connect(autocommit=True)
    conn.execute("SET application_name = 'nightly-report'")
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM pgsched.tasks")
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0]), conn


def test_the_sweep_leader_names_a_session_holding_the_horizon(
    db_env: dict[str, str], holder: tuple[int, psycopg.Connection]
) -> None:
    pid, conn = holder
    wait_until(
        lambda: 'holding_back": 1' in sweeper_once(db_env, "--horizon-warn", "1").stdout,
        30,
        what="the holder to pass one second",
    )
    done = sweeper_once(db_env, "--horizon-warn", "1")
    assert done.returncode == 0, done.stderr
    assert 'horizon: {"holding_back": 1}' in done.stdout
    assert (
        f"vacuum horizon held back by session pid {pid} (application 'nightly-report'"
        in done.stderr
    ), done.stderr
    assert "transaction open" in done.stderr
    # Below the threshold: counted as nothing, said nowhere.
    quiet = sweeper_once(db_env, "--horizon-warn", "3600")
    assert 'horizon: {"holding_back": 0}' in quiet.stdout
    assert "vacuum horizon held back" not in quiet.stderr
    conn.execute("COMMIT")
    after = sweeper_once(db_env, "--horizon-warn", "1")
    assert 'horizon: {"holding_back": 0}' in after.stdout, after.stdout + after.stderr


def test_a_bad_threshold_is_refused_naming_it(db_env: dict[str, str]) -> None:
    done = sweeper_once(db_env, "--horizon-warn", "-1")
    assert done.returncode == 2
    assert "--horizon-warn" in done.stderr and "Traceback" not in done.stderr


def test_doctor_and_the_leaders_metrics_see_it(
    db_env: dict[str, str], holder: tuple[int, psycopg.Connection], processes: Processes
) -> None:
    pid, _ = holder
    index = processes.start("sweeper", "sweeper", "--metrics-port", "0", "--horizon-warn", "1")
    processes.wait_log(index, "metrics on http://", 30)
    base = processes.log(index).split("metrics on ", 1)[1].split("/metrics", 1)[0]
    got = wait_scrape(
        base,
        lambda s: (s.value("pgsched_horizon_transaction_age_seconds") or 0) > 0,
        30,
        what="the horizon gauge",
    )
    assert (got.value("pgsched_horizon_xmin_age_xids") or 0) > 0
    processes.wait_log(index, f"vacuum horizon held back by session pid {pid}", 60)
    doctor = run_cli(db_env, "doctor", "--json", "--max-xact-age", "1")
    xmin = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["xmin"]
    assert xmin["result"] == "fail"
    assert f"session pid {pid} (application 'nightly-report'" in xmin["detail"]
