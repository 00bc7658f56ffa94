"""Where the SQL lives: `sql/` in a checkout, `pgsched/sql` inside an installed wheel."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def sql_dir() -> Path:
    """The directory holding the numbered migrations."""
    packaged = Path(__file__).with_name("sql")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "sql"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("pgsched's SQL files are missing: expected pgsched/sql or ../sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    """Every numbered migration, in order. Gaps or duplicate numbers are a packaging bug."""
    found: list[Migration] = []
    for path in sorted(sql_dir().glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"pgsched migrations must be numbered 1..n without gaps, got {versions}")
    return found
