"""The transaction-pooler settings refused as a user meets them: the CLI exits 2 naming the
option. Their effect through a real PgBouncer is in tests/integration/test_pgbouncer.py."""

from __future__ import annotations

import pytest

from tests.support.worker_helpers import run_cli

APP = "tests.apps.recurring_app:app"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["worker", "--app", APP, "--prepare-threshold", "sometimes"], "--prepare-threshold"),
        (["worker", "--app", APP, "--prepare-threshold", "-1"], "--prepare-threshold"),
        (["worker", "--app", APP, "--listen-dsn", " "], "--listen-dsn"),
        (["sweeper", "--prepare-threshold", "1.5"], "--prepare-threshold"),
        (["sweeper", "--listen-dsn", ""], "--listen-dsn"),
        (["sweeper", "--leader-lease", "0.5"], "--leader-lease"),
        (["sweeper", "--leader-lease", "7200"], "--leader-lease"),
        (["sweeper", "--once", "--leader-lease", "0"], "--leader-lease"),
    ],
)
def test_a_wrong_setting_exits_2_naming_it(
    db_env: dict[str, str], argv: list[str], named: str
) -> None:
    done = run_cli(db_env, *argv, timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
