"""A peer's drain starts from a queue its planner knows: each peer's queue table is
analyzed after the jobs are enqueued, as pgsched's drain analyzes tasks_hot. Before, the
statistics were those of the emptied queue, and PGQueuer's best setting drained anywhere
from 9,700 to 20,100 jobs/s depending on when autoanalyze got to it mid-run."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from benchmarks import peers

JOBS = 300


@pytest.mark.parametrize("peer", [peers.PgQueuer(), peers.Procrastinate()], ids=lambda p: p.name)
def test_the_peers_queue_is_analyzed_after_its_jobs_are_enqueued(
    peer: peers.PgQueuer | peers.Procrastinate, new_database: Callable[..., str]
) -> None:
    dsn = new_database()
    peer.setup(dsn)
    # A previous drain's jobs, then the clear that empties the queue and analyzes it empty.
    peer.enqueue_now(dsn, 50)

    peers.prepare_drain(peer, dsn, JOBS)

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT c.reltuples, s.n_live_tup, s.n_mod_since_analyze"
            "  FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid"
            " WHERE c.relname = %s",
            (peer.queue_table,),
        ).fetchone()
    assert row is not None
    reltuples, live, changed_since_analyze = row
    # The planner's row estimate is the queue as the workers will find it.
    assert reltuples == JOBS, (reltuples, live)
    assert changed_since_analyze == 0
