"""Facts the docs state that the code can check: the pages cannot drift from it quietly.

The site's build (mkdocs build --strict) checks the links between pages; these check what
the pages say about the schema, the migrations and the dashboard, and that the README stays
a front page whose links lead somewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from pgsched import tracing
from tests.support.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
SQL = REPO_ROOT / "sql"
README = REPO_ROOT / "README.md"

# `pgsched.X` names that are neither schema objects nor Python modules: the entry-point
# group `pgsched bench` finds the suite through, and the session setting a transactional
# handler's connection carries.
# pgsched.claim, pgsched.task.id ...: OpenTelemetry span and attribute names.
TRACING_NAMES = {name.split(".")[1] for name in (*tracing.SPAN_NAMES, *tracing.ATTRIBUTE_NAMES)}
NOT_SCHEMA_OBJECTS = {"bench", "tenant_id", *TRACING_NAMES}


def _pages() -> list[Path]:
    # The generated SQL reference is checked against the database by its own test.
    return [p for p in DOCS.rglob("*.md") if p != DOCS / "reference" / "sql.md"]


def _schema_files() -> list[Path]:
    """The numbered migrations and the code files (functions, views, triggers by concept)."""
    return [*sorted(SQL.glob("0*.sql")), *sorted((SQL / "code").glob("*.sql"))]


def test_every_migration_and_code_file_has_a_row_on_the_source_page() -> None:
    page = (DOCS / "reference" / "source.md").read_text()
    missing = [
        str(p.relative_to(REPO_ROOT))
        for p in _schema_files()
        if f"| `{p.relative_to(REPO_ROOT)}` |" not in page
    ]
    assert missing == [], f"docs/reference/source.md has no row for {missing}"


def test_every_sql_object_the_docs_name_exists() -> None:
    """`pgsched.name` in a page is a function, table or view the SQL files define, or a
    module of the Python package: a renamed or dropped function shows up here."""
    schema_objects = {
        name for path in _schema_files() for name in re.findall(r"pgsched\.(\w+)", path.read_text())
    }
    package = REPO_ROOT / "pgsched"
    modules = {p.stem for p in package.glob("*.py")} | {p.name for p in package.iterdir()}
    exported = (package / "__init__.py").read_text()
    unknown = sorted(
        f"{page.relative_to(REPO_ROOT)}: pgsched.{name}"
        for page in [*_pages(), README]
        for name in set(re.findall(r"pgsched\.(\w+)", page.read_text()))
        if name not in schema_objects | modules | NOT_SCHEMA_OBJECTS and name not in exported
    )
    assert unknown == [], "names no schema object or module:\n" + "\n".join(unknown)


def test_the_dashboard_page_names_the_functions_its_writes_call() -> None:
    """The page once named schedule_enable, which the dashboard never called."""
    page = (DOCS / "guides" / "dashboard.md").read_text()
    said = re.search(r"\*\*Writes\*\* call the same SQL functions as the CLI \(([^)]*)\)", page)
    assert said, "the dashboard page no longer says which functions its writes call"
    named = re.findall(r"`(\w+)`", said.group(1))
    queries = (SQL / "dashboard_queries.sql").read_text()
    called = set(re.findall(r"pgsched\.(\w+)\(", queries))
    assert set(named) <= called, f"named but not called: {set(named) - called}"
    assert {"schedule_pause", "schedule_resume"} <= set(named)


def test_schedule_events_the_docs_name_are_the_ones_written() -> None:
    """Pause and resume write 'paused' and 'resumed' (sql/code/recurring.sql), not enabled /
    disabled."""
    written = set(re.findall(r"'(\w+)'", (SQL / "code" / "recurring.sql").read_text()))
    assert {"paused", "resumed", "deleted"} <= written
    for page in ("guides/dashboard.md", "guides/recurring.md"):
        text = (DOCS / page).read_text()
        assert "`paused`" in text and "`resumed`" in text, page


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for command in ("bash scripts/main.sh", "bash scripts/test.sh", "mkdocs serve"):
        assert command in text
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (REPO_ROOT / t).exists()]
    assert missing == [], f"README links to files that do not exist: {missing}"


def test_every_command_has_a_reference_page() -> None:
    """A command added to `pgsched` needs a mkdocs-click block on a reference page (the
    pages render whatever the commands say, but only the commands they name)."""
    from pgsched.cli import main

    pages = "".join(p.read_text() for p in (DOCS / "reference" / "cli").glob("*.md"))
    named = set(re.findall(r":prog_name: pgsched (\S+)", pages))
    # `scheduler` is the sweeper's deprecated old name, said on the sweeper's page.
    missing = sorted(set(main.commands) - named - {"scheduler"})
    assert missing == [], f"commands without a reference page: {missing}"
