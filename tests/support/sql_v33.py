"""Migrations 0001..0033 as earlier releases shipped them (tests/fixtures/sql_v33/), applied
the way their `pgsched migrate` did: each numbered file once, in its own transaction,
recorded in pgsched.schema_migrations. Builds the databases the baseline upgrades from."""

from __future__ import annotations

import hashlib
import re

import psycopg

from tests.support.paths import TESTS_DIR

V33 = TESTS_DIR / "fixtures" / "sql_v33"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def migrate_v33(dsn: str, upto: int = 33) -> list[int]:
    """Apply the old numbered files not yet applied, up to `upto`; returns their versions."""
    done: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE SCHEMA IF NOT EXISTS pgsched;"
            " CREATE TABLE IF NOT EXISTS pgsched.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {v for (v,) in conn.execute("SELECT version FROM pgsched.schema_migrations")}
        for path in sorted(V33.glob("*.sql")):
            match = _NAME.match(path.name)
            assert match is not None, path
            version = int(match[1])
            if version > upto or version in applied:
                continue
            text = path.read_text()
            with conn.transaction():
                conn.execute(text.encode())
                conn.execute(
                    "INSERT INTO pgsched.schema_migrations (version, name, checksum)"
                    " VALUES (%s, %s, %s)",
                    (version, match[2], hashlib.sha256(text.encode()).hexdigest()),
                )
            done.append(version)
    return done
