"""--payload and --metadata read from a file (`@file.json`, or `@-` for stdin), as a user runs
the command line (subprocesses, a real Postgres): a document too large for an argument list
goes through a file; a missing or malformed file is refused, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
MIB = 1024 * 1024


def run_cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def task_row(conn: psycopg.Connection, task_id: int) -> tuple[Any, Any]:
    row = conn.execute(
        "SELECT payload, metadata FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def count_tasks(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone()
    assert row is not None
    return int(row[0])


def test_a_5_mib_metadata_goes_through_a_file(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path
) -> None:
    conn.execute("UPDATE pgsched.settings SET max_payload_bytes = %s", (8 * MIB,))
    metadata = {"manifest": "m" * (5 * MIB)}
    big = tmp_path / "metadata.json"
    big.write_text(json.dumps(metadata))
    with pytest.raises(OSError, match="Argument list too long"):
        run_cli(db_env, "schedule", "report", "--metadata", json.dumps(metadata))

    done = run_cli(db_env, "schedule", "report", "--metadata", f"@{big}")
    assert done.returncode == 0, done.stderr
    task_id = int(done.stdout.split()[-1])
    assert task_row(conn, task_id) == ({}, metadata)


def test_payload_and_metadata_from_files_and_stdin(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "payload.json").write_text('[1, {"to": "a@b.c"}]\n')
    (tmp_path / "meta.json").write_text('{"source": "import"}')
    done = run_cli(
        db_env,
        "schedule",
        "report",
        "--payload",
        f"@{tmp_path / 'payload.json'}",
        "--metadata",
        f"@{tmp_path / 'meta.json'}",
    )
    assert done.returncode == 0, done.stderr
    assert task_row(conn, int(done.stdout.split()[-1])) == (
        [1, {"to": "a@b.c"}],
        {"source": "import"},
    )

    piped = run_cli(db_env, "schedule", "report", "--payload", "@-", stdin='{"n": 7}')
    assert piped.returncode == 0, piped.stderr
    assert task_row(conn, int(piped.stdout.split()[-1]))[0] == {"n": 7}

    recurring = run_cli(
        db_env, "schedule", "tick", "--cron", "0 9 * * *", "--payload", f"@{tmp_path / 'meta.json'}"
    )
    assert recurring.returncode == 0, recurring.stderr
    row = conn.execute("SELECT payload FROM pgsched.schedules").fetchone()
    assert row == ({"source": "import"},)

    tenant = run_cli(
        db_env,
        "tenants",
        "add",
        "acme",
        "--product",
        "crm",
        "--metadata",
        f"@{tmp_path / 'meta.json'}",
    )
    assert tenant.returncode == 0, tenant.stderr
    row = conn.execute("SELECT metadata FROM pgsched.tenants WHERE tenant_id = 'acme'").fetchone()
    assert row == ({"source": "import"},)


def test_a_missing_or_malformed_file_is_refused_and_nothing_is_scheduled(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "broken.json").write_text('{"to": ')
    (tmp_path / "list.json").write_text("[1, 2]")
    cases = {
        ("--metadata", f"@{tmp_path / 'nowhere.json'}"): (
            f"error: --metadata: cannot read {tmp_path / 'nowhere.json'}: no such file"
        ),
        ("--payload", f"@{tmp_path / 'broken.json'}"): (
            f"error: --payload: {tmp_path / 'broken.json'} is not JSON"
        ),
        ("--metadata", f"@{tmp_path / 'list.json'}"): (
            f"error: --metadata: {tmp_path / 'list.json'} must hold a JSON object"
        ),
        ("--payload", "@"): "error: --payload: name a file after @",
    }
    before = count_tasks(conn)
    for args, says in cases.items():
        refused = run_cli(db_env, "schedule", "report", *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert refused.stderr.startswith(says), (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert count_tasks(conn) == before
