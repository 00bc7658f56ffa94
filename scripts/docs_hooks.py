"""MkDocs hooks (mkdocs.yml `hooks:`): the parts of the site that live outside docs/.

benchmarks/RESULTS.md is written by the benchmark suite next to its plots; the site shows it
as benchmarks/results.md with the plots beside it, read from where they are, so the page is
the committed report and never a copy that could fall behind it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO_ROOT / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    files.append(
        File.generated(config, "benchmarks/results.md", abs_src_path=str(BENCHMARKS / "RESULTS.md"))
    )
    for plot in sorted((BENCHMARKS / "plots").glob("*.png")):
        files.append(
            File.generated(config, f"benchmarks/plots/{plot.name}", abs_src_path=str(plot))
        )
    return files
