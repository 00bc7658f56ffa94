"""The benchmark cluster's WAL warm-up (PgServer.recycle_wal): after it, WAL written goes
into recycled segments and no new segment file is made; before it, every 16 MB written
makes one, as on any new cluster."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from benchmarks.pgserver import PgServer, Setting

pytestmark = pytest.mark.slow

SETTINGS = (
    Setting("min_wal_size", "256MB", "segments kept for reuse"),
    Setting("max_wal_size", "1GB", "no checkpoint forced by the test's WAL"),
    Setting("shared_buffers", "32MB", "small"),
)


@pytest.fixture
def server() -> Iterator[PgServer]:
    with PgServer(settings=SETTINGS, verbose=False) as started:
        yield started


def segment_files(conn: psycopg.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM pg_ls_waldir()")}


def write_wal(conn: psycopg.Connection, mb: int) -> None:
    conn.execute(
        "SELECT count(pg_logical_emit_message(false, 'test', repeat('x', 1 << 20)))"
        " FROM generate_series(1, %s)",
        (mb,),
    )


def test_wal_written_after_recycling_makes_no_new_segment(server: PgServer) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        before = segment_files(conn)
        write_wal(conn, 48)
        # A new cluster: each segment the WAL reaches is a file made then.
        assert len(segment_files(conn) - before) >= 2

        ready = server.recycle_wal(128)
        assert ready >= 8
        recycled = segment_files(conn)
        write_wal(conn, 48)
        # The WAL went into segments renamed ahead of time: no file was made.
        assert segment_files(conn) == recycled
