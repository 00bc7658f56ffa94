"""Refusals on the command line, as a user runs it (subprocesses, a real Postgres): in plain
words naming the option as typed and what it allows (no pydantic or regular expression
text), and in one style, `error: ...` on one line of stderr, whether click, the task model
or the database refused; exit 2 and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
CRON = ["--cron", "0 9 * * *"]
LIBRARY_WORDS = ("Input should", "Value error", "String should", "pattern", "Usage:", "Error:")


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def written(conn: psycopg.Connection) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks), (SELECT count(*) FROM pgsched.schedules)"
    ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]))


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refusal prints: exit 2, `error: `, no traceback, no library words."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not any(word in lines[0] for word in LIBRARY_WORDS), lines[0]
    return lines[0]


TASK_INPUT = {
    "unknown lane": (
        ["--lane", "URGENT"],
        "error: --lane: unknown lane 'URGENT' (one of HIGH, NORMAL, LOW, BATCH)",
    ),
    "priority below 0": (["--priority", "-1"], "error: --priority: -1 is out of range (0 to 10)"),
    "priority above 10": (["--priority", "11"], "error: --priority: 11 is out of range (0 to 10)"),
    "no attempts": (
        ["--max-attempts", "0"],
        "error: --max-attempts: 0 is out of range (1 to 1000)",
    ),
    "empty key": (["--key", ""], "error: --key: '' must be 1 to 200 characters"),
    "tenant with a space": (
        ["--tenant", "a b"],
        "error: --tenant: 'a b' is not a plain identifier",
    ),
}


@pytest.mark.parametrize("recurring", [False, True], ids=["one task", "recurring"])
@pytest.mark.parametrize("args, says", TASK_INPUT.values(), ids=list(TASK_INPUT))
def test_task_input_is_refused_in_plain_words_naming_the_option(
    conn: psycopg.Connection, db_env: dict[str, str], args: list[str], says: str, recurring: bool
) -> None:
    before = written(conn)
    line = refusal(run_cli(db_env, "schedule", "report", *args, *(CRON if recurring else [])))
    assert line.startswith(says), line
    assert written(conn) == before


def test_a_task_type_that_is_not_a_plain_name_says_what_a_name_may_hold(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    before = written(conn)
    line = refusal(run_cli(db_env, "schedule", "1report"))
    assert line == (
        "error: TASK_TYPE: '1report' is not allowed: use letters, digits, _ and ., starting"
        " with a letter or _, at most 100 characters"
    )
    assert written(conn) == before


CLICK_REFUSALS = {
    "not JSON": (["schedule", "report", "--payload", "{"], "error: --payload: not JSON"),
    "unknown option": (["schedule", "report", "--bogus"], "error: no such option '--bogus'"),
    "unknown global option": (["--bogus", "status"], "error: no such option '--bogus'"),
    "missing argument": (["schedule"], "error: missing argument 'TASK_TYPE'"),
    "not an integer": (
        ["schedule", "report", "--priority", "high"],
        "error: --priority: 'high' is not a valid integer",
    ),
    "out of range": (["dead", "list", "--limit", "0"], "error: --limit: 0 is not in the range"),
    "options that exclude each other": (
        ["schedule", "report", "--at", "now", *CRON],
        "error: --at and --cron exclude each other",
    ),
    "a choice": (
        ["schedule", "report", "--misfire", "never", *CRON],
        "error: --misfire: 'never' is not one of",
    ),
}


@pytest.mark.parametrize("argv, says", CLICK_REFUSALS.values(), ids=list(CLICK_REFUSALS))
def test_what_click_refuses_is_said_in_the_same_one_line_style(
    conn: psycopg.Connection, db_env: dict[str, str], argv: list[str], says: str
) -> None:
    before = written(conn)
    line = refusal(run_cli(db_env, *argv))
    assert line.startswith(says), line
    assert written(conn) == before


def test_what_the_database_refuses_does_not_carry_the_engine_prefix(
    db_env: dict[str, str],
) -> None:
    line = refusal(run_cli(db_env, "tenants", "disable", "nobody"))
    assert line == "error: no tenant nobody"
