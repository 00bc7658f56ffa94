"""`pgsched migrate`: apply the numbered SQL files, forward only, each exactly once, then
the code files (functions, views, triggers by concept) that changed.

The version table records each applied numbered file with its checksum; pgsched.schema_code
records each code file of sql/code/ with the checksum it was last applied with. A code file
is applied again when its checksum changed, and every code file is applied after a numbered
migration ran (one may have dropped what a file defines). All of it runs in one transaction,
so a numbered migration that drops an old signature commits with the code that replaces it.

An advisory lock makes two processes migrating at once take turns; the second then finds
nothing left to do. A database migrated by a newer pgsched (a version this one does not
know) is refused, and so is an applied file whose checksum changed, since that means the
schema is not what the code expects. A file renamed with its version and content unchanged
is the same migration: its recorded name is updated.

The numbered files start at the baseline (0033), which squashes migrations 0001..0033 of
earlier releases. A database those 33 files made (their checksums recorded, see
`LEGACY_CHECKSUMS`) is recorded as at the baseline and gets the code files; one older than
0033 must first be migrated by an earlier pgsched.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import psycopg

from pgsched.errors import SchemaMismatchError
from pgsched.queries import query
from pgsched.sql_files import (
    BASELINE_VERSION,
    LEGACY_CHECKSUMS,
    CodeFile,
    Migration,
    code_files,
    migrations,
)

# An arbitrary constant shared by every pgsched process: "the migration lock".
MIGRATION_LOCK_KEY = 0x7067736368656400 >> 8


class MigrationError(RuntimeError):
    """The database's schema is not one this version of pgsched can work with."""


@dataclass(frozen=True)
class MigrateResult:
    applied: list[int]
    current_version: int
    code_applied: list[str] = field(default_factory=list)
    # What `migrate --distributed` did: 'distributed', 'already distributed', or None.
    distributed: str | None = None


_VERSION_TABLE = """
CREATE SCHEMA IF NOT EXISTS pgsched;
CREATE TABLE IF NOT EXISTS pgsched.schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS pgsched.schema_code (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

_OLDER_THAN_BASELINE = (
    "this database's pgsched schema is at version {current}, older than {baseline}, the "
    "oldest this pgsched upgrades from: migrate it first with an earlier pgsched (one that "
    "ships sql/0033_comments.sql), then with this one"
)


def migrate(conninfo: str, *, distributed: bool = False) -> MigrateResult:
    """Bring the database at `conninfo` up to the newest schema this package ships; with
    `distributed`, then distribute its tables over the Citus worker nodes in the same
    transaction (`pgsched.distribute()`, sql/code/distribution.sql). Check
    `distribution_problem` first: a database that cannot be distributed is refused there
    before anything changes."""
    known = migrations()
    code = code_files()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            with conn.transaction():
                result = _migrate_locked(conn, known, code)
                if distributed:
                    row = conn.execute(query("tables_distribute")).fetchone()
                    result = replace(result, distributed=str(row[0]) if row else None)
                return result
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


def distribution_problem(conninfo: str) -> str | None:
    """Why the database at `conninfo` cannot be distributed over Citus worker nodes (no
    citus extension, no worker node registered), or None. Reads only: nothing changes."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(query("citus_installed")).fetchone()
        if not (row and row[0]):
            return (
                "the citus extension is not in this database: load it (shared_preload_libraries"
                " = citus) and run CREATE EXTENSION citus on the coordinator and on every"
                " worker node"
            )
        nodes = conn.execute(query("citus_worker_nodes")).fetchone()
        if not (nodes and nodes[0]):
            return (
                "no worker node is registered with this coordinator: run SELECT"
                " citus_set_coordinator_host(host, port) once and SELECT"
                " citus_add_node(host, port) for each worker node"
            )
    return None


def _is_legacy(applied: dict[int, tuple[str, str]]) -> bool:
    """Recorded by the numbered files of earlier releases (0001..0033), not the baseline."""
    if any(version < BASELINE_VERSION for version in applied):
        return True
    recorded = applied.get(BASELINE_VERSION)
    return recorded is not None and recorded[1] == LEGACY_CHECKSUMS[BASELINE_VERSION]


def _adopt_legacy(
    conn: psycopg.Connection, applied: dict[int, tuple[str, str]], baseline: Migration
) -> None:
    """A database made by migrations 0001..0033 of earlier releases has the baseline's
    tables: record it as at the baseline (the code files then replace its functions, views
    and triggers with the same ones)."""
    legacy = sorted(v for v in applied if v <= BASELINE_VERSION)
    if legacy != list(range(1, BASELINE_VERSION + 1)):
        raise MigrationError(
            _OLDER_THAN_BASELINE.format(current=max(legacy), baseline=BASELINE_VERSION)
        )
    for version in legacy:
        name, checksum = applied[version]
        if checksum != LEGACY_CHECKSUMS[version]:
            raise MigrationError(
                f"migration {version:04d}_{name} was applied with a different checksum than "
                "the file earlier pgsched releases shipped; the schema is not what the code "
                "expects. Migrations are forward-only: never edit an applied one."
            )
    conn.execute("DELETE FROM pgsched.schema_migrations WHERE version < %s", (BASELINE_VERSION,))
    conn.execute(
        "UPDATE pgsched.schema_migrations SET name = %s, checksum = %s WHERE version = %s",
        (baseline.name, baseline.checksum, BASELINE_VERSION),
    )
    for version in legacy:
        del applied[version]
    applied[BASELINE_VERSION] = (baseline.name, baseline.checksum)


def _migrate_locked(
    conn: psycopg.Connection, known: list[Migration], code: list[CodeFile]
) -> MigrateResult:
    conn.execute(_VERSION_TABLE)
    rows = conn.execute("SELECT version, name, checksum FROM pgsched.schema_migrations").fetchall()
    applied = {version: (name, checksum) for version, name, checksum in rows}
    newest_known = known[-1].version if known else 0
    unknown = sorted(v for v in applied if v > newest_known)
    if unknown:
        raise MigrationError(
            f"this database was migrated by a newer pgsched (schema version {max(unknown)}); "
            f"this pgsched knows versions up to {newest_known}. Upgrade pgsched."
        )
    if known and _is_legacy(applied):
        _adopt_legacy(conn, applied, known[0])
    renamed: list[Migration] = []
    for migration in known:
        if migration.version in applied:
            name, checksum = applied[migration.version]
            if checksum != migration.checksum:
                raise MigrationError(
                    f"migration {migration.version:04d}_{name} was applied with a different "
                    "checksum than the file this pgsched ships; the schema is not what the code "
                    "expects. Migrations are forward-only: never edit an applied one."
                )
            if name != migration.name:
                renamed.append(migration)
    # Same version, same content, a clearer file name: the record follows the file.
    for migration in renamed:
        conn.execute(
            "UPDATE pgsched.schema_migrations SET name = %s WHERE version = %s",
            (migration.name, migration.version),
        )
    done: list[int] = []
    for migration in known:
        if migration.version in applied:
            continue
        conn.execute(migration.sql.encode())
        conn.execute(
            "INSERT INTO pgsched.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            (migration.version, migration.name, migration.checksum),
        )
        done.append(migration.version)
    recorded: dict[str, str] = dict(
        conn.execute("SELECT name, checksum FROM pgsched.schema_code").fetchall()
    )
    code_done: list[str] = []
    for code_file in code:
        if not done and recorded.get(code_file.name) == code_file.checksum:
            continue
        conn.execute(code_file.sql.encode())
        conn.execute(
            "INSERT INTO pgsched.schema_code (name, checksum) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum,"
            " applied_at = excluded.applied_at",
            (code_file.name, code_file.checksum),
        )
        code_done.append(code_file.name)
    return MigrateResult(applied=done, current_version=newest_known, code_applied=code_done)


def schema_version(conn: psycopg.Connection) -> int:
    """The newest applied migration, or 0 on a database pgsched never touched."""
    # Two statements: Postgres resolves table names before a CASE could skip them.
    exists = conn.execute("SELECT to_regclass('pgsched.schema_migrations')").fetchone()
    if not exists or exists[0] is None:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM pgsched.schema_migrations").fetchone()
    return int(row[0]) if row else 0


def require_current_schema(database: str | psycopg.Connection) -> int:
    """Refuse to run against a schema this pgsched was not built for: not migrated, migrated
    by an older pgsched (some files not applied), by a newer one, or with a changed file.
    Long-running processes call this at start, so they stop at once with what to run instead
    of failing on a missing function later. Returns the schema version."""
    if isinstance(database, str):
        with psycopg.connect(database, autocommit=True) as conn:
            return require_current_schema(conn)
    known = {m.version: m for m in migrations()}
    newest_known = max(known, default=0)
    row = database.execute(query("schema_migrations_present")).fetchone()
    if not (row and row[0]):
        raise SchemaMismatchError(
            "this database has no pgsched schema: run `pgsched migrate` (with the same "
            "--dsn / PGSCHED_DSN) first"
        )
    try:
        applied = database.execute(query("schema_migrations_applied")).fetchall()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaMismatchError(
            f"cannot read pgsched.schema_migrations ({exc.diag.message_primary}): "
            "grant this login a pgsched role"
        ) from None
    versions = {version for version, _, _ in applied}
    newer = sorted(v for v in versions if v > newest_known)
    if newer:
        raise SchemaMismatchError(
            f"this database was migrated by a newer pgsched (schema version {max(newer)}); "
            f"this pgsched knows versions up to {newest_known}: upgrade pgsched"
        )
    if _is_legacy({version: (name, checksum) for version, name, checksum in applied}):
        raise SchemaMismatchError(
            f"this database's pgsched schema is at version {max(versions, default=0)}, made by "
            "the numbered migrations of an earlier pgsched: run `pgsched migrate`"
        )
    for version, name, checksum in applied:
        if checksum != known[version].checksum:
            raise SchemaMismatchError(
                f"migration {version:04d}_{name} was applied from a different file than this "
                "pgsched ships: run the pgsched version that migrated this database"
            )
    missing = sorted(known.keys() - versions)
    if missing:
        current = max(versions, default=0)
        raise SchemaMismatchError(
            f"this database's pgsched schema is at version {current} and this pgsched needs "
            f"{newest_known} (missing {', '.join(f'{v:04d}' for v in missing)}): "
            "run `pgsched migrate`"
        )
    stale = stale_code_files(database)
    if stale:
        raise SchemaMismatchError(
            f"this database's pgsched functions and views are not this pgsched's "
            f"(sql/code/ {', '.join(stale)}): run `pgsched migrate`"
        )
    return newest_known


def stale_code_files(conn: psycopg.Connection) -> list[str]:
    """The files of sql/code/ not applied to this database as this pgsched ships them (by
    name, in their order): functions, views or triggers `pgsched migrate` would apply."""
    recorded: dict[str, str] = dict(
        conn.execute("SELECT name, checksum FROM pgsched.schema_code").fetchall()
    )
    return [f.name for f in code_files() if recorded.get(f.name) != f.checksum]
