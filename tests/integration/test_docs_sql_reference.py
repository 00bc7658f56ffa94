"""docs/reference/sql.md is what the database says about itself, and says something.

The page is generated from a migrated database's catalog and `COMMENT ON` text
(scripts/docs_sql_reference.py) and committed; these tests render this test's freshly
migrated clone and compare, and check that nothing a user, a worker or an operator can
reach is left without a comment (next to each object: sql/code/ for functions and views,
the numbered migrations for tables).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import psycopg

from tests.support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "docs_sql_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_sql_reference", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_sql_reference_is_what_a_fresh_migrate_renders(db_dsn: str) -> None:
    gen = _generator()
    fresh = gen.render(db_dsn)
    committed = gen.PAGE.read_text()
    assert committed == fresh, (
        f"docs/reference/sql.md differs from a fresh migrate; regenerate with "
        f"`{gen.REGENERATE}`\n" + gen.diff(committed, fresh)
    )


def test_every_reachable_function_table_and_view_has_a_comment(conn: psycopg.Connection) -> None:
    """A function any pgsched role may call, and every table, view and fixed partition."""
    functions = conn.execute(
        """
        SELECT p.oid::regprocedure::text
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'pgsched'
           AND obj_description(p.oid, 'pg_proc') IS NULL
           AND EXISTS (SELECT 1 FROM unnest(ARRAY['pgsched_producer', 'pgsched_worker',
                                                  'pgsched_admin']) AS r
                        WHERE has_function_privilege(r, p.oid, 'EXECUTE'))
        """
    ).fetchall()
    assert functions == [], f"functions without COMMENT ON: {functions}"
    relations = conn.execute(
        r"""
        SELECT c.relname
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p', 'v', 'm')
           AND c.relname !~ '_p\d{8}(\d{2})?$'
           AND obj_description(c.oid, 'pg_class') IS NULL
        """
    ).fetchall()
    assert relations == [], f"tables and views without COMMENT ON: {relations}"


def test_the_page_lists_the_functions_an_application_calls() -> None:
    page = (REPO_ROOT / "docs" / "reference" / "sql.md").read_text()
    for name in ("schedule_task", "schedule_tasks", "schedule_recurring", "cancel_task_ex"):
        assert f"### {name}\n" in page
    assert "*No comment in the database.*" not in page
