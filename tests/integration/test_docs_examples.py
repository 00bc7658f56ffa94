"""The documentation's examples run: the docs cannot rot.

A fenced block in docs/ preceded by an HTML comment (invisible on the site) is part of a
page's example, run in page order in one working directory against this test's throwaway
database (``db_env``: ``PGSCHED_DSN`` and the ``PG*`` variables):

    <!-- docs-test: run -->              run the block; it must exit 0
    <!-- docs-test: run until-ok 60 -->  run it again every half second until it exits 0,
                                         for at most 60 s (a check that waits for a worker)
    <!-- docs-test: file tasks.py -->    write the block to tasks.py (importable: the working
                                         directory is on PYTHONPATH; a path such as
                                         shop/tasks.py makes its folders)
    <!-- docs-test: background -->       start the block and leave it running (a worker, a
                                         sweeper); stopped with SIGTERM when the page ends
    <!-- docs-test: shown REASON -->      not run, and why (a placeholder client, a server
                                         that runs until stopped, a sketch of a file)

Every fenced block of the getting-started pages and the guides carries one of these: a
block nobody decided about fails `test_every_example_is_run_or_says_why_not`.

Languages: ``python`` (this interpreter), ``sql`` (psql, stopping at the first error),
``sh`` (bash -euo pipefail, with this virtualenv's ``pgsched`` first on PATH) and
``javascript`` (Node.js, with the ``pg`` package that scripts/setup.sh installs into
.venv/docs-node, or this test installs into a temporary folder).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.paths import REPO_ROOT

if TYPE_CHECKING:
    from tests.conftest import PgServer

DOCS = REPO_ROOT / "docs"
# The version scripts/setup.sh installs; the examples use only its Client.
NODE_PG = "pg@8.23.1"
NODE_MODULES = REPO_ROOT / ".venv" / "docs-node" / "node_modules"

MARKER = re.compile(r"^<!-- docs-test: (?P<spec>.+?) -->\s*$")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)")
LANGUAGES = {"python", "sql", "sh", "javascript"}
RUN_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the marker, for messages
    action: str  # run, file, background
    arg: str | None  # the file name, or until-ok's seconds
    lang: str
    code: str

    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def parse(page: Path) -> list[Block]:
    """The marked blocks of a page, in order. A marker must be followed by a fence in a
    language this test runs: a typo fails here instead of silently testing nothing."""
    lines = page.read_text().splitlines()
    rel = page.relative_to(DOCS).as_posix()
    blocks = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        spec = m["spec"].split()
        action, args = spec[0], spec[1:]
        where = f"docs/{rel}:{i + 1}"
        if action == "run" and args[:1] == ["until-ok"] and len(args) == 2:
            arg: str | None = args[1]
        elif action == "file" and len(args) == 1:
            arg = args[0]
        elif action in ("run", "background") and not args:
            arg = None
        elif action == "shown" and args:
            arg = " ".join(args)
        else:
            raise AssertionError(f"{where}: unknown docs-test marker {m['spec']!r}")
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if action == "shown":
            assert fence, f"{where}: a docs-test marker must precede a fenced block"
            continue
        assert fence and fence["lang"] in LANGUAGES, (
            f"{where}: a docs-test marker must precede a ```python, ```sql, ```sh or "
            f"```javascript block"
        )
        end = lines.index("```", j + 1)
        code = "\n".join(lines[j + 1 : end]) + "\n"
        blocks.append(Block(rel, i + 1, action, arg, fence["lang"], code))
    return blocks


PAGES = sorted(p for p in DOCS.rglob("*.md") if parse(p))


def unmarked_blocks(page: Path) -> list[int]:
    """Lines of the fenced blocks of `page` with no docs-test marker before them."""
    lines = page.read_text().splitlines()
    found, inside = [], False
    for i, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if inside:  # the closing fence
            inside = False
            continue
        inside = True
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k < 0 or not MARKER.match(lines[k]):
            found.append(i + 1)
    return found


def test_every_example_is_run_or_says_why_not() -> None:
    pages = [*(DOCS / "getting-started").glob("*.md"), *(DOCS / "guides").glob("*.md")]
    unmarked = {
        page.relative_to(DOCS).as_posix(): lines
        for page in sorted(pages)
        if (lines := unmarked_blocks(page))
    }
    assert not unmarked, (
        "fenced blocks neither run nor marked <!-- docs-test: shown REASON --> "
        f"(page: lines): {unmarked}"
    )


def test_the_getting_started_and_scheduling_pages_carry_runnable_examples() -> None:
    """What the examples test covers cannot shrink unnoticed: the first-task page runs
    Python, SQL and the shell, and the scheduling guide runs all four languages."""
    first = {b.lang for b in parse(DOCS / "getting-started" / "first-task.md")}
    assert {"python", "sql", "sh"} <= first
    scheduling = {b.lang for b in parse(DOCS / "guides" / "scheduling.md")}
    assert {"python", "sql", "javascript"} <= scheduling
    assert DOCS / "guides" / "handlers.md" in PAGES


@pytest.fixture(scope="session")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where `require("pg")` is found. Without Node.js the JavaScript examples are skipped
    (saying so); with it, a failing install is a failure, not a skip."""
    if shutil.which("node") is None:
        pytest.skip(
            "Node.js is not installed, so the JavaScript examples in docs/ were not run "
            "(scripts/setup.sh installs nodejs and npm when run as root)"
        )
    if (NODE_MODULES / "pg").is_dir():
        return NODE_MODULES
    npm = shutil.which("npm")
    assert npm, "Node.js is installed but npm is not: install npm to fetch the pg package"
    prefix = tmp_path_factory.mktemp("docs-node")
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), NODE_PG],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return prefix / "node_modules"


def _command(block: Block, path: Path, pg_server: PgServer) -> list[str]:
    if block.lang == "python":
        return [sys.executable, str(path)]
    if block.lang == "sql":
        return [
            str(pg_server.bindir / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
            str(path),
        ]
    if block.lang == "sh":
        return ["bash", "-euo", "pipefail", str(path)]
    return ["node", str(path)]


def _logs(background: list[tuple[Block, subprocess.Popen[bytes], Path]]) -> str:
    return "".join(
        f"\n--- {b.where()} (background) ---\n{log.read_text(errors='replace')[-4000:]}"
        for b, _, log in background
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_the_examples_of_a_page_run(
    page: Path,
    db_env: dict[str, str],
    pg_server: PgServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    blocks = parse(page)
    env = dict(db_env)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT)])
    # `pgsched` in the shell examples is this checkout's, whatever PATH says.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if any(b.lang == "javascript" for b in blocks):
        env["NODE_PATH"] = str(request.getfixturevalue("node_modules"))
    suffix = {"python": ".py", "sql": ".sql", "sh": ".sh", "javascript": ".js"}
    background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
    try:
        for n, block in enumerate(blocks):
            if block.action == "file":
                assert block.arg is not None
                target = tmp_path / block.arg
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code)
                continue
            path = tmp_path / f"block{n}{suffix[block.lang]}"
            code = block.code
            if block.action == "background" and block.lang == "sh":
                # The process itself gets the SIGTERM and reports its exit, not a shell.
                assert len(code.strip().splitlines()) == 1, f"{block.where()}: one command"
                code = "exec " + code
            path.write_text(code)
            argv = _command(block, path, pg_server)
            if block.action == "background":
                log = tmp_path / f"block{n}.log"
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        argv,
                        cwd=tmp_path,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                background.append((block, proc, log))
                continue
            deadline = time.monotonic() + (float(block.arg) if block.arg else 0)
            while True:
                result = subprocess.run(
                    argv, cwd=tmp_path, env=env, capture_output=True, timeout=RUN_TIMEOUT_S
                )
                if result.returncode == 0 or time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
            assert result.returncode == 0, (
                f"{block.where()}: the {block.lang} example exited {result.returncode}\n"
                f"--- stdout ---\n{result.stdout.decode(errors='replace')}"
                f"--- stderr ---\n{result.stderr.decode(errors='replace')}" + _logs(background)
            )
    finally:
        for _, proc, _ in background:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc, _ in background:
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    for block, proc, _ in background:
        # A worker or sweeper stopped by SIGTERM exits 0: anything else is a fault to show.
        assert proc.returncode == 0, (
            f"{block.where()}: the background example exited {proc.returncode}" + _logs(background)
        )
