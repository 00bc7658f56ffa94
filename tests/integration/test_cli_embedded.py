"""No silent embedded database: only `pgsched up` and `pgsched demo` start the embedded
Postgres, in one folder that does not depend on the current directory ($PGSCHED_HOME, else
$XDG_DATA_HOME/pgsched, else ~/.local/share/pgsched). Every other command, a worker and
`App()` given no database use it only while it runs, saying so on stderr; otherwise they fail
naming --dsn, PGSCHED_DSN and `pgsched up`, and start nothing. Each test uses its own
folder (a real server, started and stopped by the commands under test)."""

from __future__ import annotations

import os
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
APP_LANE_SUMMARY = "from pgsched import App; print(len(App().lane_summary()))"


def env_without_database(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PGSCHED_DSN", "PGSCHED_HOME", "XDG_DATA_HOME"} and not k.startswith("PG")
    }
    env.update(extra)
    return env


def run(
    env: dict[str, str], *args: str, cwd: Path = REPO_ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh embedded-Postgres folder; whatever the test started there is stopped after."""
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


NEEDS_A_DATABASE = [
    ["status"],
    ["migrate"],
    ["schedule", "report"],
    ["history"],
    ["dead", "list"],
    ["sweeper", "--once"],
    ["worker", "--app", "tests.apps.dispatch:app", "--lanes", "normal"],
]


def assert_refused_for_lack_of_a_database(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for named in ("--dsn", "PGSCHED_DSN", "pgsched up"):
        assert named in done.stderr, done.stderr


def test_without_a_database_every_command_fails_and_starts_nothing(home: Path) -> None:
    env = env_without_database(PGSCHED_HOME=str(home))
    for argv in NEEDS_A_DATABASE:
        assert_refused_for_lack_of_a_database(run(env, *argv))
    app = run_python(env, APP_LANE_SUMMARY)
    assert app.returncode == 1 and "NoDatabaseError" in app.stderr, app.stderr
    assert "pgsched up" in app.stderr
    assert list(home.iterdir()) == []  # no initdb, no server, no file


def test_the_embedded_folder_does_not_depend_on_the_current_directory(tmp_path: Path) -> None:
    user_home, elsewhere = tmp_path / "user", tmp_path / "elsewhere"
    user_home.mkdir()
    elsewhere.mkdir()
    done = run(env_without_database(HOME=str(user_home)), "status", cwd=elsewhere)
    assert_refused_for_lack_of_a_database(done)
    assert str(user_home / ".local" / "share" / "pgsched") in done.stderr
    done = run(
        env_without_database(HOME=str(user_home), XDG_DATA_HOME=str(tmp_path / "xdg")),
        "status",
        cwd=elsewhere,
    )
    assert_refused_for_lack_of_a_database(done)
    assert str(tmp_path / "xdg" / "pgsched") in done.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (user_home / ".local").exists()


def test_only_up_and_demo_start_it_others_use_it_while_it_runs_and_down_keeps_it_down(
    home: Path,
) -> None:
    env = env_without_database(PGSCHED_HOME=str(home))
    cluster = EmbeddedCluster(home)

    demo = run(env, "demo", timeout=240)  # the main job starts it
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "database: postgresql://" in demo.stdout
    assert cluster.is_running()

    status = run(env, "status")  # used while it runs, and said in one line
    assert status.returncode == 0, status.stderr
    assert status.stderr.strip().splitlines() == [
        f"pgsched: no --dsn or PGSCHED_DSN: using the embedded Postgres ({home})"
    ]
    app = run_python(env, APP_LANE_SUMMARY)
    assert app.returncode == 0, app.stderr
    assert "using the embedded Postgres" in app.stderr

    down = run(env, "down")
    assert (down.returncode, down.stdout.strip()) == (0, "stopped")
    for argv in NEEDS_A_DATABASE:
        assert_refused_for_lack_of_a_database(run(env, *argv))
    assert_refused_for_lack_of_a_database(run(env, "status"))
    assert not cluster.is_running()  # nothing brought it back

    up = run(env, "up")
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == cluster.dsn()
    assert run(env, "status").returncode == 0
    assert run(env, "down").stdout.strip() == "stopped"
    assert not cluster.is_running()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_as_root_a_folder_the_server_user_cannot_reach_works_through_var_tmp() -> None:
    """~/.local/share/pgsched under /root: the `postgres` user cannot reach it, so the data
    lives in /var/tmp and the folder points at it; `down` must still find the server."""
    private = Path(tempfile.mkdtemp(prefix="pgsched-private-"))  # mode 0700, like /root
    home = private / "pgsched"
    env = env_without_database(PGSCHED_HOME=str(home))
    cluster = EmbeddedCluster(home)
    try:
        up = run(env, "up")
        assert up.returncode == 0, up.stderr
        assert cluster.datadir.is_symlink()
        assert str(cluster.datadir.resolve()).startswith("/var/tmp/pgsched-")
        assert cluster.is_running()
        status = run(env, "status")
        assert status.returncode == 0, status.stderr
        assert "using the embedded Postgres" in status.stderr
        assert run(env, "down").stdout.strip() == "stopped"
        assert not cluster.is_running()
        assert_refused_for_lack_of_a_database(run(env, "status"))
    finally:
        outside = cluster.datadir.resolve().parent if cluster.datadir.is_symlink() else None
        if cluster.is_running():
            cluster.stop()
        shutil.rmtree(private, ignore_errors=True)
        if outside is not None:
            shutil.rmtree(outside, ignore_errors=True)
