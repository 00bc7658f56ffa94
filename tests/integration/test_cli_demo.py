"""The end of `pgsched demo` (the main job) as a user runs it: on the embedded Postgres, which
it starts and leaves running, it says so and gives the command that stops it, and that
command works; on a database given with --dsn it says nothing of the embedded one."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgsched.embedded import EmbeddedCluster
from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def run(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh embedded-Postgres folder; whatever was started there is stopped after."""
    folder = Path(tempfile.mkdtemp(prefix="pgsched-home-"))
    folder.chmod(0o755)  # the server's user (postgres, when we are root) must reach it
    yield folder
    cluster = EmbeddedCluster(folder)
    if cluster.is_running():
        cluster.stop()
    outside = cluster.datadir.resolve().parent if cluster.datadir.is_symlink() else None
    shutil.rmtree(folder, ignore_errors=True)
    if outside is not None:
        shutil.rmtree(outside, ignore_errors=True)


def without_a_database(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PGSCHED_DSN", "PGSCHED_HOME", "XDG_DATA_HOME"} and not k.startswith("PG")
    }
    return {**env, **extra}


def test_the_demo_on_the_embedded_postgres_ends_saying_it_runs_and_how_to_stop_it(
    home: Path,
) -> None:
    env = without_a_database(PGSCHED_HOME=str(home))
    demo = run(env, "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    ending = demo.stdout.strip().splitlines()[-2:]
    assert ending[0] == f"The embedded Postgres is still running (its folder: {home})."
    stop = re.fullmatch(r"Stop it with: (.+ down)", ending[1])
    assert stop is not None, ending
    assert EmbeddedCluster(home).is_running()

    stopped = subprocess.run(
        shlex.split(stop[1]), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped"), stopped.stderr
    assert not EmbeddedCluster(home).is_running()


def test_the_demo_on_a_given_database_says_nothing_of_the_embedded_one(
    db_env: dict[str, str], home: Path
) -> None:
    demo = run({**db_env, "PGSCHED_HOME": str(home)}, "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "embedded" not in demo.stdout.lower()
    assert not EmbeddedCluster(home).is_running()
