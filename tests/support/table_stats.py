"""What a session's statements did to a table, from pg_stat_user_tables: lets a test say
"this read only the rows it needed" without timing anything."""

from __future__ import annotations

import psycopg


def table_stats(conn: psycopg.Connection, relation: str) -> dict[str, int]:
    """seq_scan, seq_tup_read, idx_scan and idx_tup_fetch of `relation`, including what
    this session did so far. Stats reach the shared views only when a backend flushes
    them: force the flush, let it happen, drop the cached snapshot, then read."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0),"
        " coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relid = %s::regclass",
        (relation,),
    ).fetchone()
    assert row is not None, f"no statistics for {relation}"
    return dict(zip(("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch"), row, strict=True))
