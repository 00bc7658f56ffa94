"""The chaos suite's own Postgres cluster (scenarios restart and reconfigure it) and a
scenario per test: its own database, run log and workers, closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.chaos_harness import Cluster, Scenario


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(scope="session")
def chaos_cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def scenario(
    chaos_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], Scenario]]:
    made: list[Scenario] = []

    def _make() -> Scenario:
        s = Scenario(chaos_cluster, request.node.name.removeprefix("test_"), tmp_path)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.close()
