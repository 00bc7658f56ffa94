"""The sample project of the testing guide (docs/examples/sample_project) runs its own
tests with `pytest`, as its users would, with pgsched.testing's plugin making its
databases on this session's server."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from tests.support.paths import REPO_ROOT

SAMPLE = REPO_ROOT / "docs" / "examples" / "sample_project"


def _run(pg_server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGSCHED_TEST_DSN"] = pg_server.dsn("postgres")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=SAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _test_databases(pg_server: Any) -> list[str]:
    with psycopg.connect(pg_server.dsn("postgres"), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'pgsched\\_test\\_%'"
        ).fetchall()
    return [row[0] for row in rows]


def test_the_sample_projects_tests_pass_and_leave_no_database(pg_server: Any) -> None:
    before = _test_databases(pg_server)
    done = _run(pg_server)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout, done.stdout
    assert _test_databases(pg_server) == before


def test_a_failing_expectation_fails_the_sample_project(pg_server: Any, tmp_path: Any) -> None:
    # The plugin's assertions can fail: an expectation the shop does not meet.
    test = tmp_path / "test_wrong.py"
    test.write_text(
        "from shop.orders import place_order\n"
        "from pgsched.testing import assert_scheduled\n\n"
        "def test_wrong(pgsched_app):\n"
        "    place_order(1, 'ada@example.com')\n"
        "    assert_scheduled('send_receipt', payload={'order': 2}, app=pgsched_app)\n"
    )
    done = _run(
        pg_server,
        str(test),
        "--rootdir",
        str(SAMPLE),
        "-c",
        str(SAMPLE / "pytest.ini"),
        "-p",
        "pgsched.testing",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "expected a task matching task_type='send_receipt', payload={'order': 2}" in done.stdout


def test_without_a_server_the_plugin_says_what_to_set(tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_orders.py::test_the_receipt_is_sent",
        ],
        cwd=SAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no Postgres server to test on: pass --pgsched-dsn" in done.stdout
    assert "Traceback" not in done.stdout


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("shop.nothing:app", "pgsched_app = shop.nothing:app: No module named 'shop.nothing'"),
        ("shop.tasks:nothing", "pgsched_app = shop.tasks:nothing: module 'shop.tasks' has no"),
        ("shop.tasks:SENT", "pgsched_app = shop.tasks:SENT is a list, not a pgsched App"),
        ("shop.tasks", "pgsched_app: expected module:attribute, got 'shop.tasks'"),
    ],
)
def test_a_wrong_pgsched_app_is_named(pg_server: Any, target: str, said: str) -> None:
    done = _run(
        pg_server, "-o", f"pgsched_app={target}", "tests/test_orders.py::test_the_receipt_is_sent"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stdout
    assert "Traceback" not in done.stdout
