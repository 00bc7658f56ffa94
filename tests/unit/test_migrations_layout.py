"""The SQL files' layout, read from disk: each function, view and trigger is defined in one
file of sql/code/, and order.txt lists each code file once."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from pgsched.sql_files import (
    code_files,
)
from tests.support.paths import REPO_ROOT

if TYPE_CHECKING:
    pass


SQL = REPO_ROOT / "sql"


_DEFINITION = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?(FUNCTION|VIEW|TRIGGER)\s+"
    r"((?:pgsched\.)?\w+)",
    re.IGNORECASE | re.MULTILINE,
)


def test_each_function_view_and_trigger_is_defined_in_one_file() -> None:
    where: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SQL.rglob("*.sql")):
        for kind, name in _DEFINITION.findall(path.read_text()):
            key = (kind.upper(), name.lower().removeprefix("pgsched."))
            where.setdefault(key, []).append(str(path.relative_to(REPO_ROOT)))
    assert where, "no definitions found under sql/"
    repeated = {f"{k} {n}": files for (k, n), files in where.items() if len(files) > 1}
    assert repeated == {}, f"defined more than once: {repeated}"
    # ... and none in a numbered migration: those hold tables, types, indexes and grants.
    numbered = {k: f for k, f in where.items() if not f[0].startswith("sql/code/")}
    assert numbered == {}, f"functions, views or triggers outside sql/code/: {numbered}"


def test_code_files_are_listed_once_in_order() -> None:
    names = [f.name for f in code_files()]
    assert Counter(names).most_common(1)[0][1] == 1
    assert sorted(names) == sorted(p.stem for p in (SQL / "code").glob("*.sql"))
