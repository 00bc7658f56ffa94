"""The unit tier keeps its promise (no database, no network, no subprocess): a test that
reaches for one fails, naming where it belongs."""

from __future__ import annotations

import socket
import subprocess

import psycopg
import pytest


def test_a_subprocess_is_refused() -> None:
    with pytest.raises(RuntimeError, match="tests/integration"):
        subprocess.run(["true"], check=False)


def test_a_database_connection_is_refused() -> None:
    with pytest.raises(RuntimeError, match="tests/integration"):
        psycopg.connect("host=127.0.0.1 port=1 connect_timeout=1")


def test_a_network_connection_is_refused() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(RuntimeError, match="tests/integration"),
    ):
        sock.connect(("127.0.0.1", 1))
