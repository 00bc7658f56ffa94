"""The transaction-pooler settings refused when wrong, before anything connects: the
prepare threshold, the LISTEN DSN, the leader lease (CLI exit 2 naming the option; Python a
ConfigError naming the field). Their effect through a real PgBouncer is in
tests/test_pgbouncer.py."""

from __future__ import annotations

import pytest
from worker_helpers import run_cli

from pgsched import App
from pgsched.errors import ConfigError
from pgsched.leadership import LeaderLease
from pgsched.pooler import listen_target, parse_prepare_threshold
from pgsched.worker import WorkerConfig

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


def test_prepare_threshold_words_and_numbers() -> None:
    assert parse_prepare_threshold("none") is None
    assert parse_prepare_threshold("OFF") is None
    assert parse_prepare_threshold(None) is None
    assert parse_prepare_threshold("0") == 0
    assert parse_prepare_threshold("7") == 7
    assert parse_prepare_threshold(5) == 5


def test_listen_target_defaults_to_the_database_and_none_means_nowhere() -> None:
    assert listen_target("host=db", None) == "host=db"
    assert listen_target("host=db", "host=direct") == "host=direct"
    assert listen_target("host=db", "none") is None
    assert listen_target("host=db", "Off") is None


def test_python_refusals_name_the_field() -> None:
    with pytest.raises(ConfigError, match="prepare_threshold"):
        App("host=db", prepare_threshold="often")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--prepare-threshold"):
        WorkerConfig(prepare_threshold=-2)
    with pytest.raises(ConfigError, match="--listen-dsn"):
        WorkerConfig(listen_dsn="")
    with pytest.raises(ConfigError, match="--leader-lease"):
        LeaderLease("x", lease_seconds=0.1)
    assert App("host=db", prepare_threshold=None).prepare_threshold is None
    assert WorkerConfig(prepare_threshold=None, listen_dsn="none").listen_target("d") is None
