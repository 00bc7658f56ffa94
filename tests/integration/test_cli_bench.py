"""`pgsched bench` runs the benchmark suite, which the package never imports: it is found
through the `pgsched.bench` entry point once the `bench` extra is known to be installed."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
EXTRA = ("matplotlib", "procrastinate", "pgqueuer")


def test_the_package_never_imports_the_benchmarks() -> None:
    importers = []
    for path in (REPO_ROOT / "pgsched").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name == "benchmarks" or name.startswith("benchmarks.") for name in names):
                importers.append(str(path.relative_to(REPO_ROOT)))
    assert importers == []


def test_bench_without_its_extra_says_which_to_install_before_running_anything(
    tmp_path: Path,
) -> None:
    # Whatever this environment has installed, the extra's modules are made unimportable.
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in EXTRA)
    argv = ["pgsched", "bench", "--quick", "--out", str(tmp_path)]
    code = f"import sys; {blocked}; sys.argv = {argv!r}; from pgsched.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'pgsched[bench]'" in done.stderr
    assert "missing: matplotlib, procrastinate, pgqueuer" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing ran: no results written


def test_bench_help_reaches_the_suite_through_the_entry_point() -> None:
    shown = subprocess.run([PGSCHED, "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "usage: python -m benchmarks" in shown.stdout
    assert "--quick" in shown.stdout


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in EXTRA),
    reason="the bench extra is not installed here (pip install -e '.[bench]')",
)
def test_bench_with_its_extra_passes_every_option_to_the_suite() -> None:
    refused = subprocess.run(
        [PGSCHED, "bench", "--no-such-option"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "unrecognized arguments: --no-such-option" in refused.stderr
