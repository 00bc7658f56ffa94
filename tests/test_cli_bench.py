"""`pgsched bench` is the benchmark suite's command: its options pass straight through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def test_bench_passes_its_options_to_the_suite() -> None:
    shown = subprocess.run([PGSCHED, "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "usage: python -m benchmarks" in shown.stdout
    assert "--quick" in shown.stdout

    refused = subprocess.run(
        [PGSCHED, "bench", "--no-such-option"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "unrecognized arguments: --no-such-option" in refused.stderr
