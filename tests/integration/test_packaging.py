"""The wheel ships the SQL files byte for byte, where the installed package looks for them."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pgsched.sql_files import code_files, migrations
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(REPO_ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(out.glob("pgsched-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_sql_is_byte_identical(wheel: Path) -> None:
    sql = REPO_ROOT / "sql"
    shipped = {
        p.relative_to(sql).as_posix(): p.read_bytes() for p in sorted(sql.rglob("*")) if p.is_file()
    }
    assert "code/order.txt" in shipped and any(n.startswith("code/") for n in shipped)
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name.removeprefix("pgsched/sql/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("pgsched/sql/") and not name.endswith("/")
        }
    assert sorted(packaged) == sorted(shipped)
    for name, content in shipped.items():
        assert packaged[name] == content, f"pgsched/sql/{name} differs from sql/{name}"


def test_installed_wheel_finds_its_own_sql(wheel: Path, tmp_path: Path) -> None:
    """Unpacked away from the checkout, the package reads pgsched/sql with the same checksums."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    # -I: no PYTHONPATH, no current directory on sys.path; only the unpacked wheel is added.
    probe = (
        f"import json, sys; sys.path.insert(0, {str(site)!r});"
        " from pgsched.sql_files import sql_dir, migrations, code_files;"
        " print(json.dumps({'dir': str(sql_dir()),"
        " 'migrations': [[m.version, m.name, m.checksum] for m in migrations()],"
        " 'code': [[f.name, f.checksum] for f in code_files()]}))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["dir"] == str(site / "pgsched" / "sql")
    assert found["migrations"] == [[m.version, m.name, m.checksum] for m in migrations()]
    assert found["code"] == [[f.name, f.checksum] for f in code_files()]


def test_wheel_is_typed_and_carries_the_one_version(wheel: Path) -> None:
    """The version is written once (pgsched/__init__.py); the wheel's metadata agrees, and
    the wheel marks the package as typed (PEP 561) so mypy reads its annotations."""
    import pgsched

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
    assert "pgsched/py.typed" in names
    assert f"\nVersion: {pgsched.__version__}\n" in metadata
    assert wheel.name.startswith(f"pgsched-{pgsched.__version__}-")
