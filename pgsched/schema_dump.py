"""The schema a fresh migrate produces, as one file: `sql/schema.sql`.

    python -m pgsched.schema_dump            # rewrite sql/schema.sql
    python -m pgsched.schema_dump --check    # exit 1 with a diff when it is out of date

The migrations are the source; `sql/schema.sql` is their result, generated and committed so
that each function, table and index is read in one place (a function replaced by a later
migration appears once, in its newest form). A test migrates an empty database, dumps it the
same way and compares, so the two cannot drift.

The dump is pg_dump's `--schema-only --schema=pgsched --no-owner`, normalized to be stable
across runs and servers: pg_dump's version lines, session SETs and the per-run `\\restrict`
key are dropped, and so are the dated partitions and archives of task_events and of
tasks_finished, whose bounds depend on the day the migration ran (`partitions_maintain` and
`finished_partitions_maintain` make them; sql/0024, sql/0027). Grants
are kept: which role may call what is part of the schema (the roles themselves are
cluster-wide and created by the tenancy migration).
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

REGENERATE = "python -m pgsched.schema_dump"
HEADER = f"-- sql/schema.sql: generated; regenerate with `{REGENERATE}`; do not edit.\n"

# task_events' and tasks_finished's partitions by date, and their archives (bounded by a
# date too).
DATED_PARTITIONS = (
    "pgsched.task_events_p*",
    "pgsched.task_events_archive",
    "pgsched.tasks_finished_p*",
    "pgsched.tasks_finished_archive",
)

_DROPPED_PREFIXES = (
    "\\restrict",
    "\\unrestrict",
    "-- Dumped from database version",
    "-- Dumped by pg_dump version",
    "SET ",
    "SELECT pg_catalog.set_config(",
)


def normalize(dump: str) -> str:
    """pg_dump's output without what changes from run to run or server to server."""
    kept = [line.rstrip() for line in dump.splitlines() if not line.startswith(_DROPPED_PREFIXES)]
    out: list[str] = []
    for line in kept:
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return HEADER + "\n" + "\n".join(out) + "\n"


def dump_schema(dsn: str, bindir: Path) -> str:
    """The normalized schema of the database at `dsn` (pg_dump from `bindir`)."""
    out = subprocess.run(
        [
            str(bindir / "pg_dump"),
            "--schema-only",
            "--schema=pgsched",
            "--no-owner",
            *(f"--exclude-table={table}" for table in DATED_PARTITIONS),
            "-d",
            dsn,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return normalize(out.stdout)


def fresh_schema(server_dsn: str, bindir: Path) -> str:
    """Migrate a throwaway database on the server at `server_dsn` and dump it."""
    from pgsched.migrations import migrate

    name = "pgsched_schema_dump"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        dsn = make_conninfo(server_dsn, dbname=name)
        migrate(dsn)
        return dump_schema(dsn, bindir)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(drop)


def schema_file() -> Path:
    from pgsched.sql_files import sql_dir

    return sql_dir() / "schema.sql"


def diff(expected: str, actual: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            "sql/schema.sql (committed)",
            "fresh migrate",
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        help="a server where a throwaway database may be created (default: start a temporary"
        " local Postgres from the installed server binaries)",
    )
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)

    from pgsched.embedded import EmbeddedCluster, find_bindir

    bindir = find_bindir()
    if args.dsn:
        schema = fresh_schema(args.dsn, bindir)
    else:
        with tempfile.TemporaryDirectory(prefix="pgsched-schema-") as home:
            # Traversable, so a server running as another user keeps its data inside it.
            Path(home).chmod(0o755)
            cluster = EmbeddedCluster(Path(home))
            port = cluster.start()
            try:
                schema = fresh_schema(cluster.dsn(port).rsplit("/", 1)[0] + "/postgres", bindir)
            finally:
                cluster.stop()
    target = schema_file()
    if args.check:
        current = target.read_text() if target.exists() else ""
        if current != schema:
            sys.stdout.write(diff(current, schema))
            print(f"{target} is out of date: regenerate with `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    target.write_text(schema)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
