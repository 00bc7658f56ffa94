"""`pgsched` processes a test starts as a user would, each logging to its own file, and the
CLI run once: shared by the sweep, metrics and log tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import wait_until

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
RECURRING_APP = "tests.apps.recurring_app:app"


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`pgsched ARGS` as a user runs it (not checked)."""
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


class Processes:
    """`pgsched` processes of one test, each logging to a file; killed at teardown (their
    logs are printed then, so a failed test shows them)."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *args: str) -> int:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [PGSCHED, *args],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append((name, proc, log_path))
        return len(self.procs) - 1

    def proc(self, index: int) -> subprocess.Popen[bytes]:
        return self.procs[index][1]

    def log(self, index: int) -> str:
        return self.procs[index][2].read_text(errors="replace")

    def logged(self, text: str) -> list[int]:
        """The processes whose log contains `text`."""
        return [i for i in range(len(self.procs)) if text in self.log(i)]

    def wait_log(self, index: int, text: str, timeout: float) -> None:
        def seen() -> bool:
            if text in self.log(index):
                return True
            assert self.proc(index).poll() is None, f"exited before logging {text!r}\n{self.logs()}"
            return False

        wait_until(seen, timeout, what=f"{self.procs[index][0]} to log {text!r}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{path.read_text(errors='replace')}" for name, _, path in self.procs
        )

    def close(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        if self.procs:
            print(self.logs())
