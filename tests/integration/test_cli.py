"""The `pgsched` command line as a user runs it (subprocesses, a real Postgres): one error
boundary (exit 2 for bad input, 1 for runtime faults, a traceback only with --debug),
--version, help on every option, and the refusals of bad input, each with nothing written."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import click
import psycopg
import pytest

from pgsched.cli import main
from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def written(conn: psycopg.Connection) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks), (SELECT count(*) FROM pgsched.schedules),"
        " (SELECT count(*) FROM pgsched.tenants)"
    ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]), int(row[2]))


def walk(command: click.Command, path: str = "pgsched") -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, f"{path} {name}")


def test_every_command_and_option_has_help_text() -> None:
    missing = [
        f"{path} {'/'.join(param.opts)}"
        for path, command in walk(main)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert missing == []
    undocumented = [path for path, command in walk(main) if not (command.help or "").strip()]
    assert undocumented == []
    assert len(list(walk(main))) > 15  # the walk reached the subcommands


def test_version_comes_from_the_package_metadata(db_env: dict[str, str]) -> None:
    shown = run_cli(db_env, "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"pgsched {version('pgsched')}"


def test_the_package_runs_as_a_module_too(db_env: dict[str, str]) -> None:
    for module in ("pgsched", "pgsched.cli"):
        shown = subprocess.run(
            [sys.executable, "-m", module, "status", "--check"],
            cwd=REPO_ROOT,
            env=db_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, (module, shown.stderr)
        assert "sweeper leader: none" in shown.stdout


BAD_INPUT = {
    "empty --tz for a recurring schedule": (
        ["schedule", "report", "--cron", "0 9 * * *", "--tz", ""],
        "--tz",
    ),
    "empty --tz for a wall-clock time": (
        ["schedule", "report", "--at", "2027-01-05T09:00:00", "--tz", ""],
        "--tz",
    ),
    "a UTC offset together with --tz": (
        ["schedule", "report", "--at", "2027-01-05T09:00:00+01:00", "--tz", "Europe/Paris"],
        "has a UTC offset and --tz Europe/Paris names a zone",
    ),
    "non-object --metadata": (
        ["schedule", "report", "--metadata", "[1]"],
        "--metadata",
    ),
    "non-object tenant --metadata": (
        ["tenants", "add", "acme", "--product", "crm", "--metadata", "[1]"],
        "--metadata",
    ),
    "an unknown --log-level": (
        ["worker", "--app", "tests.apps.dispatch:app", "--log-level", "LOUD"],
        "--log-level",
    ),
    "an unknown --log-level for the sweeper": (
        ["sweeper", "--once", "--log-level", "LOUD"],
        "--log-level",
    ),
    "a time that is not one": (
        ["schedule", "report", "--at", "tomorrow-ish"],
        "is not a time",
    ),
    "an --at past what a datetime holds": (
        ["schedule", "report", "--at", "+99999999d"],
        "--at",
    ),
    "an --at too large for a duration": (
        ["schedule", "report", "--at", "+999999999999d"],
        "--at",
    ),
    "an --at past the accepted range": (
        ["schedule", "report", "--at", "9999-06-01T00:00:00+00:00"],
        "--at: 9999-06-01T00:00:00+00:00 is out of range",
    ),
    "a --since before what a datetime holds": (
        ["history", "--since", "-99999999d"],
        "--since",
    ),
}


@pytest.mark.parametrize("argv, named", BAD_INPUT.values(), ids=list(BAD_INPUT))
def test_bad_input_is_refused_with_exit_2_naming_the_field_and_nothing_written(
    conn: psycopg.Connection, db_env: dict[str, str], argv: list[str], named: str
) -> None:
    before = written(conn)
    refused = run_cli(db_env, *argv)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert named in refused.stderr
    assert "Traceback" not in refused.stderr
    assert written(conn) == before


def task_run_at(conn: psycopg.Connection, task_id: int) -> datetime:
    row = conn.execute("SELECT next_run_at FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    return row[0]


def test_a_wall_clock_time_in_a_spring_forward_gap_is_shifted_forward_and_said(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    # New York, 2027-03-14: at 02:00 EST the clocks jump to 03:00 EDT; 02:30 never happens.
    done = run_cli(
        db_env, "schedule", "report", "--at", "2027-03-14T02:30:00", "--tz", "America/New_York"
    )
    assert done.returncode == 0, done.stderr
    assert "does not exist in America/New_York" in done.stderr
    assert "2027-03-14T03:30:00-04:00" in done.stderr
    assert task_run_at(conn, int(done.stdout.split()[-1])) == datetime(
        2027, 3, 14, 7, 30, tzinfo=UTC
    )

    # 2027-11-07: 01:30 happens twice (EDT, then EST); the first is meant, and said.
    done = run_cli(
        db_env, "schedule", "report", "--at", "2027-11-07T01:30:00", "--tz", "America/New_York"
    )
    assert done.returncode == 0, done.stderr
    assert "occurs twice in America/New_York" in done.stderr
    assert task_run_at(conn, int(done.stdout.split()[-1])) == datetime(
        2027, 11, 7, 5, 30, tzinfo=UTC
    )

    # An ordinary wall-clock time: no note.
    done = run_cli(
        db_env, "schedule", "report", "--at", "2027-01-05T09:00:00", "--tz", "America/New_York"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert task_run_at(conn, int(done.stdout.split()[-1])) == datetime(
        2027, 1, 5, 14, 0, tzinfo=UTC
    )


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung or firewalled server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_database_fails_within_the_connect_timeout_with_one_line(
    db_env: dict[str, str], silent_server: int
) -> None:
    env = {k: v for k, v in db_env.items() if k != "PGCONNECT_TIMEOUT"}
    dsn = f"postgresql://nobody@127.0.0.1:{silent_server}/nothing"
    started = time.monotonic()
    hung = run_cli(env, "--dsn", dsn, "status", timeout=60)
    took = time.monotonic() - started
    assert hung.returncode == 1, hung.stdout + hung.stderr
    assert took < 20, f"took {took:.1f}s"
    assert hung.stderr.strip().splitlines() == [hung.stderr.strip()]
    assert "error: cannot reach the database:" in hung.stderr

    dsn = f"postgresql://nobody@127.0.0.1:{closed_port()}/nothing"
    for argv in (["status"], ["cancel", "7"], ["dead", "list"], ["migrate"], ["sweeper", "--once"]):
        refused = run_cli(env, "--dsn", dsn, *argv, timeout=60)
        assert refused.returncode == 1, (argv, refused.stderr)
        assert refused.stderr.strip().startswith("error: cannot reach the database:"), argv
        assert len(refused.stderr.strip().splitlines()) == 1, (argv, refused.stderr)


def test_debug_shows_the_traceback(db_env: dict[str, str]) -> None:
    dsn = f"postgresql://nobody@127.0.0.1:{closed_port()}/nothing"
    quiet = run_cli(db_env, "--dsn", dsn, "status")
    loud = run_cli(db_env, "--debug", "--dsn", dsn, "status")
    assert quiet.returncode == loud.returncode == 1
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr and "OperationalError" in loud.stderr
    assert loud.stderr.strip().endswith(quiet.stderr.strip())


def test_runtime_refusals_exit_1_and_unknown_tasks_exit_2(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    done = run_cli(db_env, "schedule", "report")
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.split()[-1]  # "created task N"
    assert run_cli(db_env, "cancel", task_id).returncode == 0
    again = run_cli(db_env, "cancel", task_id)  # a state the task is no longer in: runtime
    assert again.returncode == 1, again.stderr
    assert again.stderr.startswith("error: ") and "Traceback" not in again.stderr
    unknown = run_cli(db_env, "cancel", "987654321")  # no such task: the input was wrong
    assert unknown.returncode == 2, unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_the_sweeper_has_the_old_scheduler_name_as_a_hidden_alias(db_env: dict[str, str]) -> None:
    listed = run_cli(db_env, "--help")
    commands = [
        line.split()[0] for line in listed.stdout.split("Commands:")[1].splitlines() if line
    ]
    assert "sweeper" in commands and "scheduler" not in commands
    new, old = run_cli(db_env, "sweeper", "--once"), run_cli(db_env, "scheduler", "--once")
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    assert [line.split(":")[0] for line in new.stdout.splitlines()] == [
        line.split(":")[0] for line in old.stdout.splitlines()
    ]
    assert "deprecated" not in new.stderr
    assert "`pgsched scheduler` is deprecated" in old.stderr
