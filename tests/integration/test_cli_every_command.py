"""Every command of the command line, found by walking its click tree (a new command cannot
be left out: it fails the coverage test until it is given its arguments below), run as a
user runs it against a real Postgres: on a database never migrated, with a malformed DSN,
and with an id that names nothing. Each must end in one `error:` line and the exit code of
the table (2 bad input or not found, 1 runtime failure), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import click
import pytest

from pgsched.cli import main
from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
MISSING_ID = "987654"

# The least each command needs to run; "{id}" is where its id goes.
ARGUMENTS: dict[str, list[str]] = {
    "schedule": ["report"],
    "cancel": ["{id}"],
    "status": [],
    "history": [],
    "show": ["{id}"],
    "schedules list": [],
    "schedules show": ["{id}"],
    "schedules pause": ["{id}"],
    "schedules resume": ["{id}"],
    "schedules delete": ["{id}", "--yes"],
    "doctor": [],
    "dead list": [],
    "dead retry": ["{id}"],
    "dead discard": ["{id}"],
    "tenants add": ["{id}", "--product", "crm"],
    "tenants disable": ["{id}"],
    "tenants list": [],
    "limits set": ["--type", "report", "--max-processing", "1"],
    "limits clear": ["--type", "report"],
    "limits list": [],
    "limits fairness": ["high", "on"],
    "worker": ["--app", "tests.apps.dispatch:app", "--lanes", "normal"],
    "sweeper": ["--once"],
    "scheduler": ["--once"],
    "migrate": [],
    "up": [],
    "down": [],
    "demo": [],
    "bench": ["--quick"],
    "dashboard": [],
}

# Commands that never read pgsched's objects, or would not stop on their own.
NO_PGSCHED_OBJECTS = {
    "migrate": "creates them",
    "up": "starts the embedded Postgres",
    "down": "stops the embedded Postgres",
    "bench": "runs the benchmark suite on servers of its own",
    "dashboard": "serves pages until stopped",
}
# Commands that take no DSN at all: running them with one would do their real work.
NO_DSN = {
    "up": "starts the embedded Postgres, in its own folder",
    "down": "stops the embedded Postgres",
    "bench": "runs the benchmark suite on servers of its own",
}
# A command whose id argument names something it creates, not something it looks up.
CREATES_ITS_ID = {"tenants add"}


def leaf_commands(command: click.Command = main, path: str = "") -> Iterator[str]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from leaf_commands(sub, f"{path} {name}".strip())
    else:
        yield path


def command_at(path: str) -> click.Command:
    command: click.Command = main
    for name in path.split():
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def argv_of(path: str, task_id: str = MISSING_ID) -> list[str]:
    return [*path.split(), *(arg.replace("{id}", task_id) for arg in ARGUMENTS[path])]


def run_cli(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def run_all(
    runs: dict[str, Callable[[], subprocess.CompletedProcess[str]]],
) -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run) for name, run in runs.items()}
        return {name: future.result() for name, future in futures.items()}


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a refusal: one `error:` line, the last (a process may have logged its
    start first), and no traceback."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], done.stderr
    return errors[0]


def test_every_command_has_its_arguments_here() -> None:
    assert sorted(leaf_commands()) == sorted(ARGUMENTS)


def test_on_a_database_never_migrated_every_command_says_to_migrate_and_exits_2(
    new_database: Callable[..., str], db_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**db_env, "PGSCHED_DSN": new_database(), "PGSCHED_HOME": str(tmp_path / "embedded")}
    paths = [p for p in leaf_commands() if p not in NO_PGSCHED_OBJECTS]
    done = run_all({p: partial(run_cli, env, argv_of(p)) for p in paths})
    for path, result in done.items():
        if path == "doctor":  # a report: its schema check fails and names the fix
            assert result.returncode == 1, result.stdout + result.stderr
            assert "not migrated: run `pgsched migrate`" in result.stdout
            continue
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        line = one_error_line(result)
        assert "run `pgsched migrate`" in line, (path, line)
        assert "does not exist" not in line, (path, line)


@pytest.mark.parametrize("dsn", ["not a dsn", "postgresql://app@db:fivefourthreetwo/app"])
def test_a_malformed_dsn_is_bad_input_for_every_command(
    db_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    # No embedded Postgres may be started or stopped, whatever a command would do.
    env = {**db_env, "PGSCHED_HOME": str(tmp_path / "embedded")}
    paths = [p for p in leaf_commands() if p not in NO_DSN]
    done = run_all({p: partial(run_cli, env, ["--dsn", dsn, *argv_of(p)]) for p in paths})
    for path, result in done.items():
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        line = one_error_line(result)
        assert line.startswith("error: --dsn: "), (path, line)
        assert "connection string" in line, (path, line)
    assert not (tmp_path / "embedded").exists()

    from_env = run_cli({**env, "PGSCHED_DSN": dsn}, ["status"])
    assert from_env.returncode == 2
    assert one_error_line(from_env).startswith("error: PGSCHED_DSN: ")
    # Help needs no database.
    helped = run_cli({**env, "PGSCHED_DSN": dsn}, ["status", "--help"])
    assert helped.returncode == 0 and "Usage:" in helped.stdout, helped.stderr


def test_an_id_that_names_nothing_is_not_found_exit_2_for_every_command_that_takes_one(
    db_env: dict[str, str],
) -> None:
    takes_an_id = [
        path
        for path in leaf_commands()
        if any("{id}" in arg for arg in ARGUMENTS[path]) and path not in CREATES_ITS_ID
    ]
    assert len(takes_an_id) >= 9  # the walk found them
    missing = run_all({p: partial(run_cli, db_env, argv_of(p)) for p in takes_an_id})
    for path, result in missing.items():
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        line = one_error_line(result)
        assert MISSING_ID in line and line.startswith("error: no "), (path, line)
    integer_ids = [
        path
        for path in takes_an_id
        if any(
            isinstance(param, click.Argument) and param.type is click.INT
            for param in command_at(path).params
        )
    ]
    assert len(integer_ids) >= 8
    malformed = run_all({p: partial(run_cli, db_env, argv_of(p, "seven")) for p in integer_ids})
    for path, result in malformed.items():
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        assert "'seven' is not a valid integer" in one_error_line(result), path
