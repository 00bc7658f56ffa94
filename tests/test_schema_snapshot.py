"""sql/schema.sql is exactly what a fresh migrate produces, so the two cannot drift."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pgsched.migrations import migrate
from pgsched.schema_dump import HEADER, REGENERATE, diff, dump_schema

if TYPE_CHECKING:
    from conftest import PgServer

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO_ROOT / "sql" / "schema.sql"


def test_committed_schema_is_what_a_fresh_migrate_produces(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    dsn = new_database()
    migrate(dsn)
    fresh = dump_schema(dsn, pg_server.bindir)
    committed = SCHEMA_FILE.read_text()
    assert committed == fresh, (
        f"sql/schema.sql differs from a fresh migrate; regenerate with `{REGENERATE}`\n"
        + diff(committed, fresh)
    )


def test_schema_file_says_it_is_generated() -> None:
    first = SCHEMA_FILE.read_text().splitlines()[0]
    assert first == HEADER.rstrip("\n")
    assert "generated" in first and REGENERATE in first and "do not edit" in first


def test_schema_holds_each_function_once_in_its_newest_form() -> None:
    """task_promote_due is created in 0005 and replaced in 0007: the file has 0007's body."""
    schema = SCHEMA_FILE.read_text()
    assert schema.count("CREATE FUNCTION pgsched.task_promote_due(") == 1
    # 0007's sargable horizon, not 0005's `next_run_at - t < window` filter.
    assert "horizon" in schema.split("CREATE FUNCTION pgsched.task_promote_due(", 1)[1][:3000]


def test_check_mode_reports_drift_with_the_regenerate_command(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """`python -m pgsched.schema_dump --check --dsn ...` exits 1 and prints a diff on drift."""
    sql_copy = tmp_path / "pgsched" / "sql"
    sql_copy.mkdir(parents=True)
    for path in (REPO_ROOT / "sql").glob("*.sql"):
        text = path.read_text()
        if path.name == "schema.sql":
            text = text.replace(
                "CREATE TABLE pgsched.tasks_hot", "CREATE TABLE pgsched.tasks_hot_x"
            )
        (sql_copy / path.name).write_text(text)
    # A package directory whose sql/ is the edited copy, code from the checkout.
    for path in (REPO_ROOT / "pgsched").rglob("*.py"):
        target = tmp_path / "pgsched" / path.relative_to(REPO_ROOT / "pgsched")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    result = subprocess.run(
        [sys.executable, "-m", "pgsched.schema_dump", "--check", "--dsn", pg_server.dsn()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "-CREATE TABLE pgsched.tasks_hot_x" in result.stdout
    assert "+CREATE TABLE pgsched.tasks_hot (" in result.stdout
    assert REGENERATE in result.stderr
