"""Where the SQL lives: `sql/` in a checkout, `pgsched/sql` inside an installed wheel.

Two kinds of file:

* numbered migrations, `sql/NNNN_name.sql`: tables, types, indexes, partitions, grants on
  tables and data moves; forward-only, each applied once. They start at the baseline,
  `0033_baseline.sql`, the tables as the 33 migrations of earlier releases left them.
* code files, `sql/code/<concept>.sql`: every function, view and trigger, each defined once,
  in its concept's file, written to be applied again. `sql/code/order.txt` lists them in
  the order they are applied.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# The first numbered migration shipped: the baseline squashes 0001..0033 of earlier releases.
BASELINE_VERSION = 33

# The checksums of migrations 0001..0033 as earlier releases shipped them (kept verbatim in
# tests/fixtures/sql_v33/). A database with exactly these recorded is at the baseline.
LEGACY_CHECKSUMS: dict[int, str] = {
    1: "1012c4eafc7676f5f245297af2e62ae0355428b94fdd4de9bf8e38e808590965",
    2: "bf7f8cf71f59ab65451b75f86abc5b8022c17afb79f3f7fec0420e83c4894e33",
    3: "34051151eb0e4f326c48e2c633193273f2e023b27a57f67db22731b56d7a11ad",
    4: "e90cc736c0f0baf3818ba1efebef473b674e46315f5a959d92925e0aee88b616",
    5: "dd90814b320688e9cfb82e5d2a0fbccf510ba21c8531a27e5553a64148f3c74f",
    6: "940ee6862fdb9938d5e3d7f1bbc3a380b28451be19a6667f7aaef82a1504d386",
    7: "2474462ef9c07379e597cb13ecc0fdfdf4153f69f02b1cb073fcc9f6df3568c9",
    8: "f6dd223cc60670e90a926c819d1480fec8fe08e69b5b5383dd60b750f5b6b261",
    9: "bbce9c654093d819f13dd72536e598fbbf24631976f304df8ff70b6214d91736",
    10: "f9e9ff00bf83113dd32c0e52fc6c2bcb079220d044d3c3b391f460086b1bf3c2",
    11: "f4abc3c7c1838c73bfc4552bdfed400642f1f968c0d061927c8927a54472cdf9",
    12: "80a560308f0a3ce6fdf5bcf7c34205f2c8f2ae2fc7d4fbeb7635d30ca67f0317",
    13: "953efc663ccf71d4ef3f8299f103c4a25e15e90f296f34132db97785bda1fdcc",
    14: "305acc1a12eb57a33c7eb99fa69258d9504882acd1acc0f36cc1f0f53d608937",
    15: "ad4d3ba609c03210bf32abe1adabf4523a12a646b65354bbeea1da149c7a621b",
    16: "0752ab41f98ef6c112cce3cfb899c378348f348c83fdf177a19251aa03787ff2",
    17: "fcd1b644fd5b3d76d0be2e04aa29aba85eb413e881e9450d76872d53e535bad0",
    18: "49508dd55f1c1287b70ca01d0c1363104e0263e5074a52aa7d6670f9fee9d65f",
    19: "f85eb8d2d233b37c20f57be3dc3bd49ac9081a809bf311d4e7caa222b525a1fe",
    20: "4a45b6801e889de591066b07992264e492b4ddf9aba816add9bd2766e9702080",
    21: "6c3ce63e2a9f1eba45b0ecd51b77208ad2240e8325ae6f9b43f82c5fe77c8151",
    22: "bd941d22a4a039cb6389a451528eaf36ffcd7921453ad6405fbc17e62f8ef114",
    23: "713b28a6d265aa8f6e203d529712e9fb78bbaba4f08871018e47edc989e09114",
    24: "110ed18c5aedd727a0e18cd2b985bb426339c26001435a04c98ff78f18c5a930",
    25: "d9945bee10155e22169399854e759e30150e50d7edcc6b8ef9c50fabbd55b123",
    26: "a82e626312d128a2ab8aafaf76589e69ed5382a20c3a346285829025ce1bb5d5",
    27: "a5f8a4d7a186ec4651e0686251586ebb2a859539ea1526e3ab666c1bf98e3539",
    28: "c3779b65db856bd8c4f91007da6f380838df30bf45c9734e0ab07f4471f3c430",
    29: "d2ead574e2abecac7c56399d1b17f38781f56b25d44851153a185b05957df58b",
    30: "acd0f84a6a12ec1d2c682471577d2696362b20771ff9170977114c4984a40be3",
    31: "bca2bae8fbb84f54a207cde853b71859c71b4e54eafe6c021beeec5582eecf69",
    32: "541feacc2fd3ed4a8fa31ebeca22ba6d7569208784aece2c1df3a1fa395e5935",
    33: "b6a22614832527dcde2fae30eabd45600f08437c08aaae95800b3b31ee6e0d8e",
}


def sql_dir() -> Path:
    """The directory holding the numbered migrations (and code/, the code files)."""
    packaged = Path(__file__).with_name("sql")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "sql"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("pgsched's SQL files are missing: expected pgsched/sql or ../sql")


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


@dataclass(frozen=True)
class CodeFile:
    """One concept's functions, views and triggers (`sql/code/<name>.sql`)."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


def migrations() -> list[Migration]:
    """Every numbered migration, in order, from the baseline on. Gaps or duplicate numbers
    are a packaging bug."""
    found: list[Migration] = []
    for path in sorted(sql_dir().glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(BASELINE_VERSION, BASELINE_VERSION + len(found))):
        raise RuntimeError(
            f"pgsched migrations must be numbered {BASELINE_VERSION}..n without gaps,"
            f" got {versions}"
        )
    return found


def code_order_file() -> Path:
    return sql_dir() / "code" / "order.txt"


def code_files() -> list[CodeFile]:
    """The code files in the order `sql/code/order.txt` gives. A file missing from the
    list, or listed and missing, is a packaging bug."""
    code = sql_dir() / "code"
    names = [
        line.strip()
        for line in code_order_file().read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    present = sorted(p.stem for p in code.glob("*.sql"))
    if sorted(names) != present or len(set(names)) != len(names):
        raise RuntimeError(
            f"sql/code/order.txt must list each file of sql/code/ once: lists {names},"
            f" found {present}"
        )
    return [CodeFile(name, (code / f"{name}.sql").read_text()) for name in names]
