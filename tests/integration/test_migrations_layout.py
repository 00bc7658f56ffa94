"""The SQL by concept: numbered migrations hold the schema, sql/code/ every function, view and
trigger once. A database made by the 33 numbered files of earlier releases upgrades to the
same catalogue a fresh install has."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
import pytest

from pgsched import migrations as migrations_module
from pgsched.errors import SchemaMismatchError
from pgsched.migrations import MigrationError, migrate, require_current_schema
from pgsched.sql_files import (
    BASELINE_VERSION,
    LEGACY_CHECKSUMS,
    CodeFile,
    code_files,
    migrations,
)
from tests.support.paths import REPO_ROOT
from tests.support.sql_v33 import V33, migrate_v33
from tests.support.worker_helpers import doctor_checks, run_cli

if TYPE_CHECKING:
    from tests.conftest import PgServer


SQL = REPO_ROOT / "sql"


def catalogue(pg_server: PgServer, dsn: str) -> str:
    """pgsched's catalogue as pg_dump reads it: tables, columns, indexes, constraints,
    functions (signatures and bodies), views, triggers, grants and comments."""
    out = subprocess.run(
        [
            str(pg_server.bindir / "pg_dump"),
            "--schema-only",
            "--schema=pgsched",
            "--no-owner",
            "-d",
            dsn,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return "\n".join(
        line
        for line in out.stdout.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict"))
    )


def test_fixture_is_the_v33_release() -> None:
    files = sorted(V33.glob("*.sql"))
    assert len(files) == BASELINE_VERSION
    assert {
        int(p.name[:4]): hashlib.sha256(p.read_text().encode()).hexdigest() for p in files
    } == LEGACY_CHECKSUMS


def test_upgrade_from_v33_equals_a_fresh_install(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    fresh = new_database()
    result = migrate(fresh)
    assert result.applied == [m.version for m in migrations()]
    assert result.code_applied == [f.name for f in code_files()]

    old = new_database()
    migrate_v33(old)
    before = catalogue(pg_server, old)
    with pytest.raises(SchemaMismatchError, match="run `pgsched migrate`"):
        require_current_schema(old)
    upgraded = migrate(old)
    assert upgraded.applied == [m.version for m in migrations() if m.version > BASELINE_VERSION]
    assert upgraded.code_applied == [f.name for f in code_files()]
    require_current_schema(old)

    with psycopg.connect(old) as conn:
        recorded = conn.execute(
            "SELECT version, name, checksum FROM pgsched.schema_migrations ORDER BY version"
        ).fetchall()
    assert recorded == [(m.version, m.name, m.checksum) for m in migrations()]

    after = catalogue(pg_server, old)
    assert after == catalogue(pg_server, fresh)

    # The upgrade lost nothing of what 0001..0033 made: every object is still there, by name
    # (0034 only added its own table; later migrations change some objects on purpose, each
    # saying why, as a fresh install has them).
    def names(text: str) -> set[str]:
        return set(re.findall(r"\n-- Name: ([^(;]+)", text))

    assert {"tasks", "schedule_task", "task_claim_many"} <= names(before)
    # Migration 0050 drops task_events' primary key (a BRIN on id reads the same range) on
    # every partition, and makes tasks_finished_updated_idx again as a BRIN, whose
    # partitions' indexes take the names Postgres gives them.
    gone = re.compile(r"(^|\s)task_events\w*_pkey$|^tasks_finished\w*_updated_idx$")
    dropped_on_purpose = {name for name in names(before) if gone.search(name)}
    assert names(before) - dropped_on_purpose <= names(after), "the upgrade lost a v33 object"
    assert migrate(old).applied == []


def test_database_older_than_v33_is_sent_to_an_earlier_release(
    new_database: Callable[..., str],
) -> None:
    dsn = new_database()
    migrate_v33(dsn, upto=20)
    with pytest.raises(MigrationError, match=r"older than 33.*earlier pgsched"):
        migrate(dsn)


def test_v33_database_with_an_edited_file_is_refused(new_database: Callable[..., str]) -> None:
    dsn = new_database()
    migrate_v33(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgsched.schema_migrations SET checksum = 'edited' WHERE version = 12")
    with pytest.raises(MigrationError, match=r"0012_one_router.*different checksum"):
        migrate(dsn)


def test_a_changed_code_file_alone_is_applied_again(
    new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database()
    migrate(dsn)
    assert migrate(dsn).code_applied == []
    edited = [
        CodeFile(f.name, f.sql + "\n-- edited\n") if f.name == "claim" else f for f in code_files()
    ]
    monkeypatch.setattr(migrations_module, "code_files", lambda: edited)
    result = migrate(dsn)
    assert result.applied == []
    assert result.code_applied == ["claim"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT checksum FROM pgsched.schema_code WHERE name = 'claim'"
        ).fetchone() == (edited[[f.name for f in edited].index("claim")].checksum,)
    monkeypatch.undo()
    with pytest.raises(SchemaMismatchError, match="sql/code/ claim"):
        require_current_schema(dsn)
    assert migrate(dsn).code_applied == ["claim"]


def test_doctor_and_migrate_name_a_code_file_not_applied_as_shipped(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    _, checks = doctor_checks(db_env)
    assert checks["schema"]["result"] == "pass", checks["schema"]
    conn.execute("UPDATE pgsched.schema_code SET checksum = 'older' WHERE name = 'finish'")
    code, checks = doctor_checks(db_env)
    assert code == 1 and checks["schema"]["result"] == "fail"
    assert "sql/code/ finish" in checks["schema"]["detail"]
    assert "run `pgsched migrate`" in checks["schema"]["detail"]
    done = run_cli(db_env, "migrate")
    assert done.returncode == 0, done.stderr
    assert "applied sql/code/ finish;" in done.stdout
    _, checks = doctor_checks(db_env)
    assert checks["schema"]["result"] == "pass"
