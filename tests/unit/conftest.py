"""The unit tier: no database, no network, no subprocess, so `scripts/test.sh --fast` runs it
anywhere in seconds. Each test runs with those doors shut: one that reaches for them fails
naming the tier it belongs in (tests/integration)."""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import psycopg
import pytest


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(
            f"a unit test may not {what}: move it to tests/integration (tests/unit/conftest.py)"
        )

    return refused


@pytest.fixture(autouse=True)
def _no_database_network_or_subprocess(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    connect_db: Any = classmethod(_refuse("connect to a database"))
    monkeypatch.setattr(psycopg.Connection, "connect", connect_db)
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect_db)
    monkeypatch.setattr(psycopg, "connect", _refuse("connect to a database"))
    inet_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"open a network connection ({address!r})")()
        inet_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    start_process = _refuse("start a process")
    # subprocess binds fork_exec at import; multiprocessing looks it up on each start.
    monkeypatch.setattr(subprocess, "_fork_exec", start_process)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", start_process)
    monkeypatch.setattr(os, "fork", start_process)
    monkeypatch.setattr(os, "posix_spawn", start_process)
    yield
