"""The named statements: every name the package runs exists, each is defined once, and the
product's file holds only the product's statements (the demo keeps its own)."""

from __future__ import annotations

import re
from pathlib import Path

from pgsched.queries import load_queries, query
from tests.support.paths import REPO_ROOT

NAME_LINE = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


def names_in(path: Path) -> list[str]:
    return NAME_LINE.findall(path.read_text())


def test_every_statement_the_package_runs_is_defined() -> None:
    used = set()
    for source in (REPO_ROOT / "pgsched").rglob("*.py"):
        used |= set(re.findall(r"""query\(\s*["']([a-z0-9_]+)["']""", source.read_text()))
    assert used, "no query(...) calls found: the scan is broken"
    missing = sorted(used - set(load_queries()))
    assert missing == []
    for name in used:
        assert str(query(name).as_string(None)).strip()


def test_demo_statements_live_beside_the_product_not_in_it() -> None:
    product = names_in(REPO_ROOT / "sql" / "queries.sql")
    demo = names_in(REPO_ROOT / "sql" / "demo_queries.sql")
    assert [n for n in product if n.startswith("demo_")] == []
    assert sorted(demo) == ["demo_lateness", "demo_per_lane", "demo_unfinished"]
    loaded = load_queries()
    assert set(product) | set(demo) <= set(loaded)
    assert len(product) == len(set(product)) and not set(product) & set(demo)
