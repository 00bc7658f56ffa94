"""What a long-running process (worker, sweeper) checks before it starts.

The database must be reachable: a process started before its database (a reboot, a
failover) waits for it, retrying with exponential backoff and one log line per attempt,
instead of crash-looping under its supervisor. Its schema must be the one this pgsched
ships: otherwise the process stops at once with what to run (`SchemaMismatchError`), since
waiting cannot fix it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgsched.errors import SchemaMismatchError
from pgsched.migrations import require_current_schema
from pgsched.queries import query

log = logging.getLogger("pgsched.startup")

FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 30.0
# What distributed mode (`pgsched migrate --distributed`, docs/scaling.md) does not run yet.
DISTRIBUTED_NOT_YET = (
    "not supported on a distributed database yet: the Redis hot tier, task limits, tenant"
    " readers, workflows (depends_on, schedule_workflow, schedule_batch) and the lane_dead"
    " view (docs/scaling.md)"
)
HOT_TIER_NOT_DISTRIBUTED = (
    "the Redis hot tier is not supported on a distributed database yet: start it without"
    " --redis (docs/scaling.md)"
)

# Without a connect_timeout in the conninfo, an unreachable host blocks a connect for as
# long as the kernel retries TCP (minutes); each attempt is bounded instead.
CONNECT_TIMEOUT_SECONDS = 10


def retry_delay(attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, ...): doubling from
    FIRST_RETRY_SECONDS up to MAX_RETRY_SECONDS, jittered so restarted fleets spread out."""
    base: float = min(FIRST_RETRY_SECONDS * 2 ** min(attempt - 1, 16), MAX_RETRY_SECONDS)
    return base * random.uniform(0.8, 1.2)


def connect(
    conninfo: str, cls: type[psycopg.Connection[Any]] = psycopg.Connection, **kwargs: object
) -> psycopg.Connection[Any]:
    """`cls.connect` (psycopg.connect) with a bounded connect time unless the conninfo sets
    one."""
    if "connect_timeout" not in conninfo_to_dict(conninfo):
        kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT_SECONDS)
    return cls.connect(conninfo, **kwargs)  # type: ignore[arg-type]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class ReachedDatabase:
    """What start-up learnt from the database, on the one connection it waited for: a
    process asks nothing more before its own connections, whose refusals it survives (a
    second unguarded connect here ended a worker when the server's slots ran short)."""

    distributed: bool


def wait_for_current_schema(
    conninfo: str,
    process: str,
    stopped: Callable[[], bool] = lambda: False,
    *,
    distributed_refusal: str | None = None,
) -> ReachedDatabase | None:
    """Wait until the database answers, then require its schema to be current. Returns
    None if `stopped()` became true while waiting; raises SchemaMismatchError, also with
    `distributed_refusal` (what this process cannot do there) on a distributed database."""
    attempt = 0
    while not stopped():
        attempt += 1
        try:
            with connect(conninfo, autocommit=True) as conn:
                version = require_current_schema(conn)
                distributed = conn.execute(query("database_is_distributed")).fetchone()
        except psycopg.OperationalError as exc:
            delay = retry_delay(attempt)
            log.warning(
                "%s cannot reach the database (attempt %d: %s); retrying in %.1fs",
                process,
                attempt,
                first_line(exc),
                delay,
                extra={"event": "database_unreachable", "error": first_line(exc)},
            )
            deadline = time.monotonic() + delay
            while not stopped() and time.monotonic() < deadline:
                time.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))
            continue
        if attempt > 1:
            log.info(
                "%s reached the database after %d attempts",
                process,
                attempt,
                extra={"event": "database_back"},
            )
        is_distributed = bool(distributed and distributed[0])
        if is_distributed and distributed_refusal:
            raise SchemaMismatchError(
                f"{process} cannot run on this database: {distributed_refusal}"
            )
        log.debug("%s: schema version %d is current", process, version)
        return ReachedDatabase(distributed=is_distributed)
    return None
