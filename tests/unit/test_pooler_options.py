"""The transaction-pooler settings refused when wrong, before anything connects: the
prepare threshold, the LISTEN DSN, the leader lease (Python: a ConfigError naming the
field). Their effect through a real PgBouncer is in tests/integration/test_pgbouncer.py."""

from __future__ import annotations

import pytest

from pgsched import App
from pgsched.errors import ConfigError
from pgsched.leadership import LeaderLease
from pgsched.pooler import listen_target, parse_prepare_threshold
from pgsched.worker import WorkerConfig


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
