"""`pgsched migrate` against fresh databases of the test server (never the template clone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
import pytest

from pgsched import migrations as migrations_module
from pgsched.migrations import MIGRATION_LOCK_KEY, MigrationError, migrate, schema_version
from pgsched.sql_files import BASELINE_VERSION, Migration, migrations
from tests.support.paths import REPO_ROOT

if TYPE_CHECKING:
    from tests.conftest import PgServer

SHIPPED = [m.version for m in migrations()]


def schema_dump(pg_server: PgServer, dsn: str) -> str:
    """The schema as pg_dump sees it, minus the per-run \\restrict key of newer pg_dumps."""
    out = subprocess.run(
        [str(pg_server.bindir / "pg_dump"), "--schema-only", "--no-owner", "-d", dsn],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [
        line
        for line in out.stdout.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict"))
    ]
    return "\n".join(lines)


def versions(dsn: str) -> list[tuple[int, str, str, object]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT version, name, checksum, applied_at FROM pgsched.schema_migrations"
            " ORDER BY version"
        ).fetchall()


def test_shipped_migrations_are_numbered(pg_server: PgServer) -> None:
    # From the baseline (0033, the squashed 0001..0033 of earlier releases) on, without gaps.
    assert list(range(BASELINE_VERSION, BASELINE_VERSION + len(SHIPPED))) == SHIPPED
    assert len(SHIPPED) >= 2


def test_migrate_twice_applies_nothing_the_second_time(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    dsn = new_database()
    first = migrate(dsn)
    assert first.applied == SHIPPED
    assert first.current_version == SHIPPED[-1]
    dump = schema_dump(pg_server, dsn)
    assert "CREATE TABLE pgsched.tasks_hot" in dump
    recorded = versions(dsn)
    assert [(v, n, c) for v, n, c, _ in recorded] == [
        (m.version, m.name, m.checksum) for m in migrations()
    ]

    second = migrate(dsn)
    assert second.applied == []
    assert second.current_version == SHIPPED[-1]
    assert schema_dump(pg_server, dsn) == dump
    assert versions(dsn) == recorded
    with psycopg.connect(dsn) as conn:
        assert schema_version(conn) == SHIPPED[-1]


def test_schema_version_of_untouched_database_is_zero(new_database: Callable[..., str]) -> None:
    with psycopg.connect(new_database()) as conn:
        assert schema_version(conn) == 0


def test_upgrade_applies_only_what_is_missing(
    pg_server: PgServer, new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    straight = new_database()
    migrate(straight)

    stepped = new_database()
    # An earlier release: its migrations, without today's code files (which may use the
    # tables of the later migrations).
    monkeypatch.setattr(migrations_module, "migrations", lambda: migrations()[:1])
    monkeypatch.setattr(migrations_module, "code_files", lambda: [])
    assert migrate(stepped).applied == SHIPPED[:1]
    monkeypatch.undo()
    assert migrate(stepped).applied == SHIPPED[1:]
    assert schema_dump(pg_server, stepped) == schema_dump(pg_server, straight)


def test_failed_migration_leaves_nothing_behind(
    new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database()
    broken = Migration(
        SHIPPED[0] + 1, "broken", "CREATE TABLE pgsched.half_done (id int);\nSELECT 1 / 0;\n"
    )
    monkeypatch.setattr(migrations_module, "migrations", lambda: [migrations()[0], broken])
    with pytest.raises(psycopg.errors.DivisionByZero):
        migrate(dsn)
    # One transaction for the whole run (the numbered files and the code files): nothing of
    # it stays, not even the baseline applied before the broken file.
    with psycopg.connect(dsn) as conn:
        assert schema_version(conn) == 0
        assert conn.execute("SELECT to_regclass('pgsched.half_done')").fetchone() == (None,)
        assert conn.execute("SELECT to_regclass('pgsched.tasks')").fetchone() == (None,)
    monkeypatch.undo()
    assert migrate(dsn).applied == SHIPPED


_MIGRATE_IN_CHILD = """
import json, sys
from pgsched.migrations import migrate
result = migrate(sys.argv[1])
print(json.dumps({"applied": result.applied, "current": result.current_version}))
"""


def test_two_processes_migrating_at_once(
    pg_server: PgServer, new_database: Callable[..., str]
) -> None:
    dsn = new_database()
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *sys.path]))
    with psycopg.connect(dsn, autocommit=True) as holder:
        # Hold the migration lock so both processes are provably inside migrate() at once,
        # then let them race for it.
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _MIGRATE_IN_CHILD, dsn],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        try:
            deadline = time.monotonic() + 60
            waiting = 0
            while time.monotonic() < deadline:
                waiting = holder.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                    " WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = %s",
                    (dbname,),
                ).fetchone()[0]
                if waiting == 2 or any(c.poll() is not None for c in children):
                    break
                time.sleep(0.05)
            assert waiting == 2, "both migrations should be waiting on the lock together"
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
        outcomes = []
        for child in children:
            stdout, stderr = child.communicate(timeout=120)
            assert child.returncode == 0, stderr
            outcomes.append(json.loads(stdout))
    assert sorted(o["applied"] for o in outcomes) == [[], SHIPPED]
    assert all(o["current"] == SHIPPED[-1] for o in outcomes)
    assert [v for v, *_ in versions(dsn)] == SHIPPED


def test_newer_schema_is_refused(new_database: Callable[..., str]) -> None:
    dsn = new_database()
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgsched.schema_migrations (version, name, checksum)"
            " VALUES (%s, 'from_the_future', 'abc')",
            (SHIPPED[-1] + 7,),
        )
    before = versions(dsn)
    with pytest.raises(MigrationError) as caught:
        migrate(dsn)
    message = str(caught.value)
    assert "newer pgsched" in message
    assert str(SHIPPED[-1] + 7) in message
    assert versions(dsn) == before


def test_edited_checksum_is_refused(new_database: Callable[..., str]) -> None:
    dsn = new_database()
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgsched.schema_migrations SET checksum = 'edited' WHERE version = %s",
            (SHIPPED[0],),
        )
    before = versions(dsn)
    with pytest.raises(MigrationError, match="different checksum") as caught:
        migrate(dsn)
    assert f"{SHIPPED[0]:04d}" in str(caught.value)
    assert versions(dsn) == before


def test_edited_shipped_file_is_refused(
    new_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the same check: the file changed after it was applied."""
    dsn = new_database()
    migrate(dsn)
    edited = [
        Migration(m.version, m.name, m.sql + "\n-- a harmless-looking edit\n")
        if m.version == SHIPPED[0]
        else m
        for m in migrations()
    ]
    monkeypatch.setattr(migrations_module, "migrations", lambda: edited)
    with pytest.raises(MigrationError, match="never edit an applied one"):
        migrate(dsn)


def test_renamed_file_with_same_version_and_content_is_accepted(
    new_database: Callable[..., str],
) -> None:
    """A database migrated when the baseline was called `time` takes the clearer name only."""
    dsn = new_database()
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgsched.schema_migrations SET name = 'time' WHERE version = %s", (SHIPPED[0],)
        )
    before = versions(dsn)
    result = migrate(dsn)
    assert result.applied == []
    after = versions(dsn)
    assert [(v, n, c) for v, n, c, _ in after] == [
        (m.version, m.name, m.checksum) for m in migrations()
    ]
    # Only the name moved: checksums and applied_at are the recorded ones.
    assert [(v, c, a) for v, _, c, a in after] == [(v, c, a) for v, _, c, a in before]


def test_renamed_and_edited_file_is_still_refused(new_database: Callable[..., str]) -> None:
    dsn = new_database()
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgsched.schema_migrations SET name = 'time', checksum = 'edited'"
            " WHERE version = %s",
            (SHIPPED[0],),
        )
    before = versions(dsn)
    with pytest.raises(MigrationError, match="different checksum"):
        migrate(dsn)
    assert versions(dsn) == before
