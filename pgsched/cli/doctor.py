"""`pgsched doctor`: is this database ready to run pgsched, and is anything wrong now?

Each check ends in pass, warn or fail with one line saying why; the command exits 1 when any
check fails, 0 otherwise (warnings included), so it can gate a deploy or page someone.

The checks, and where each line is drawn:
  database      the DSN connects (fail otherwise: nothing else can be checked)
  roles         the login is a member of a pgsched role (warn: a superuser; fail: none)
  schema        the database is migrated to exactly the version this pgsched ships
  sweeper       a sweeper holds the leader lease (warn: none; fail: none and cold work overdue)
  autovacuum    on for the hot partition and the event table (fail when off)
  dead tuples   dead rows of those tables under 20 % of live ones (warn above, from 1,000)
  partitions    task_events has a partition for the current period (fail otherwise: every
                event lands in the default partition) and for 2 or more periods ahead, and
                its default partition is empty (warn otherwise: the retention sweep makes
                them; a row in the default partition is moved, under a lock, when its
                period's partition is made)
  xmin          no transaction open longer than --max-xact-age (fail: it keeps vacuum from
                removing the rows every claim rewrites)
  leases        no PROCESSING task whose lease expired (warn; fail when no sweeper leads,
                as nothing will rescue it)
  clock         host and database clocks within --max-skew seconds (warn beyond): due-ness is
                the database's clock, but --at +15m and the logs are the host's
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.cli.findings import START_A_SWEEPER, describe_leader, read_findings
from pgsched.cli.options import json_output, print_json
from pgsched.cli.root import CliState, message_for
from pgsched.horizon import is_old, read_holders
from pgsched.migrations import schema_version, stale_code_files
from pgsched.queries import query
from pgsched.sql_files import migrations

DEAD_SHARE = 0.2
DEAD_FLOOR = 1000
MIN_PERIODS_AHEAD = 2
MARKS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # pass, warn or fail
    detail: str


@click.command()
@click.option(
    "--max-xact-age",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds a transaction may stay open before it fails the xmin check.",
)
@click.option(
    "--max-skew",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds host and database clocks may differ before a warning.",
)
@json_output("checks and verdict")
@click.pass_obj
def doctor(state: CliState, max_xact_age: float, max_skew: float, as_json: bool) -> None:
    """Check database, roles, schema, sweeper, vacuum, partitions, leases, clock, replication."""
    checks = run_checks(state.database(), max_xact_age, max_skew)
    failed = any(c.result == "fail" for c in checks)
    if as_json:
        print_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            click.echo(f"{MARKS[c.result]}  {c.name.ljust(width)}  {c.detail}")
    if failed:
        click.get_current_context().exit(1)


def run_checks(dsn: str, max_xact_age: float, max_skew: float) -> list[Check]:
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        return [Check("database", "fail", message_for(exc))]
    with conn:
        info = conn.info
        checks = [
            Check(
                "database",
                "pass",
                f"connected to {info.dbname} on {info.host}:{info.port}"
                f" (server {info.server_version})",
            )
        ]
        checks.append(_guarded("roles", lambda: _roles(conn)))
        if checks[-1].result == "fail":
            return checks  # the rest would only repeat "permission denied"
        schema = _guarded("schema", lambda: _schema(conn))
        checks.append(schema)
        if schema.result == "fail" and schema_version(conn) == 0:
            return checks  # nothing of pgsched's exists to check
        findings = read_findings(conn)
        checks.append(_sweeper(findings.leader, findings.overdue_pending))
        checks.extend(_vacuum(conn))
        checks.append(_guarded("partitions", lambda: _partitions(conn)))
        checks.append(_guarded("xmin", lambda: _xmin(conn, max_xact_age)))
        checks.append(_leases(findings.lease_expired, findings.leader is not None))
        checks.append(_clock(conn, max_skew))
        checks.append(_guarded("replication", lambda: _replication(conn)))
    return checks


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check the login may lack the rights to run fails, naming what was refused."""
    try:
        return check()
    except psycopg.Error as exc:
        return Check(name, "fail", message_for(exc))


def _roles(conn: psycopg.Connection[Any]) -> Check:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("doctor_roles")).fetchone()
    assert row is not None
    if len(row["roles_present"]) < 3:
        return Check("roles", "fail", "the pgsched roles do not exist: run `pgsched migrate`")
    if row["superuser"]:
        return Check(
            "roles",
            "warn",
            f"{row['login']} is a superuser: give processes a login"
            " in pgsched_worker / pgsched_producer / pgsched_admin",
        )
    if not row["member_of"]:
        return Check(
            "roles",
            "fail",
            f"{row['login']} is in no pgsched role: GRANT"
            " pgsched_worker (or _producer, _admin) TO it",
        )
    return Check("roles", "pass", f"{row['login']} is in {', '.join(row['member_of'])}")


def _schema(conn: psycopg.Connection[Any]) -> Check:
    have = schema_version(conn)
    known = migrations()
    want = known[-1].version if known else 0
    if have == 0:
        return Check("schema", "fail", f"not migrated: run `pgsched migrate` (to {want})")
    if have < want:
        return Check(
            "schema",
            "fail",
            f"at {have}, this pgsched needs {want}: run `pgsched"
            " migrate` before starting the new version",
        )
    if have > want:
        return Check(
            "schema", "fail", f"at {have}, newer than this pgsched knows ({want}): upgrade pgsched"
        )
    stale = stale_code_files(conn)
    if stale:
        return Check(
            "schema",
            "fail",
            f"at {have}, but sql/code/ {', '.join(stale)} not as this pgsched ships them:"
            " run `pgsched migrate`",
        )
    return Check("schema", "pass", f"at {have}")


def _sweeper(leader: dict[str, Any] | None, overdue: int) -> Check:
    if leader is not None:
        return Check("sweeper", "pass", f"leader is {describe_leader(leader)}")
    if overdue:
        return Check(
            "sweeper",
            "fail",
            f"no sweeper leads and {overdue} PENDING task(s) are"
            f" overdue: nothing promotes them; {START_A_SWEEPER}",
        )
    return Check(
        "sweeper",
        "warn",
        "no sweeper holds the leader lease: nothing promotes cold"
        " work, arms schedules or rescues leases",
    )


def _vacuum(conn: psycopg.Connection[Any]) -> list[Check]:
    with conn.cursor(row_factory=dict_row) as cur:
        tables = cur.execute(query("doctor_hot_tables")).fetchall()
    off = [
        t["relname"]
        for t in tables
        if not t["autovacuum_on"] or "autovacuum_enabled=false" in t["reloptions"]
    ]
    if off:
        vacuum = Check(
            "autovacuum", "fail", f"off for {', '.join(off)}: dead rows pile up under every claim"
        )
    else:
        tuned = [
            t["relname"] for t in tables if "autovacuum_vacuum_scale_factor" in t["reloptions"]
        ]
        vacuum = Check(
            "autovacuum", "pass", "on" + (f"; tuned for {', '.join(tuned)}" if tuned else "")
        )
    bloated = [
        f"{t['relname']} {t['dead']} dead / {t['live']} live"
        for t in tables
        if t["dead"] >= DEAD_FLOOR and t["dead"] > DEAD_SHARE * max(t["live"], 1)
    ]
    if bloated:
        dead = Check("dead tuples", "warn", "; ".join(bloated) + " (is vacuum held back?)")
    else:
        dead = Check(
            "dead tuples", "pass", ", ".join(f"{t['relname']} {t['dead']} dead" for t in tables)
        )
    return [vacuum, dead]


def period_name(period: timedelta) -> str:
    """A partition period as a sentence names it: week, day, hour, or its length."""
    names = {timedelta(days=7): "week", timedelta(days=1): "day", timedelta(hours=1): "hour"}
    return names.get(period, f"{period.total_seconds():g}-second period")


def _partitions(conn: psycopg.Connection[Any]) -> Check:
    """task_events' partitions and finished tasks' (tasks_finished), both made by
    sql/code/partitions_retention.sql: the worst of the two, with both findings."""
    results = [
        _table_partitions(conn, "doctor_event_partitions", "task_events", "task_events", "event"),
        _table_partitions(
            conn, "doctor_finished_partitions", "tasks_finished", "finished tasks", "task"
        ),
    ]
    rank = {"pass": 0, "warn": 1, "fail": 2}
    worst = max((r for r, _ in results), key=rank.__getitem__)
    return Check("partitions", worst, "; ".join(d for r, d in results if r == worst))


def _table_partitions(
    conn: psycopg.Connection[Any], statement: str, table: str, label: str, row_name: str
) -> tuple[str, str]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query(statement)).fetchone()
    assert row is not None
    period = period_name(row["period"])
    ahead, default_rows = row["periods_ahead"], row["default_rows"]
    if not row["current_covered"]:
        return (
            "fail",
            f"{table} has no partition for the current {period}: every {row_name} lands in"
            " the default partition; is the sweeper's retention sweep running?",
        )
    problems = []
    if ahead < MIN_PERIODS_AHEAD:
        problems.append(
            f"{label}: only {ahead} {period}(s) ahead have a partition (the retention sweep"
            " makes them)"
        )
    if default_rows:
        problems.append(
            f"{label}' default partition holds {default_rows} {row_name}(s): they move,"
            " under a lock, when their period's partition is made"
        )
    if problems:
        return "warn", "; ".join(problems)
    return "pass", f"{label} {ahead} {period}(s) ahead, default partition empty"


# A standby's feedback or a slot pinning an xmin this many transactions old fails the check.
WARN_XIDS = 1_000_000


def _xmin(conn: psycopg.Connection[Any], max_age: float) -> Check:
    holders = read_holders(conn)
    old = [h for h in holders if is_old(h, max_age, WARN_XIDS)]
    if old:
        return Check(
            "xmin",
            "fail",
            f"vacuum cannot remove dead rows: {old[0].describe()}"
            + (f" (and {len(old) - 1} more)" if len(old) > 1 else ""),
        )
    sessions = [h.age_s for h in holders if h.age_s is not None]
    oldest = f"{max(sessions):.0f} s" if sessions else "none"
    return Check("xmin", "pass", f"oldest open transaction: {oldest}")


def _leases(expired: list[dict[str, Any]], leader: bool) -> Check:
    if not expired:
        return Check("leases", "pass", "no PROCESSING task has an expired lease")
    ids = " ".join(str(t["id"]) for t in expired)
    if leader:
        return Check(
            "leases",
            "warn",
            f"lease expired on task(s) {ids}; the sweeper's rescue"
            " should requeue them within its interval",
        )
    return Check(
        "leases",
        "fail",
        f"lease expired on task(s) {ids} and no sweeper leads: nothing will requeue them",
    )


def _clock(conn: psycopg.Connection[Any], max_skew: float) -> Check:
    before = time.time()
    row = conn.execute(query("doctor_db_clock")).fetchone()
    after = time.time()
    assert row is not None
    db_now: datetime = row[0]
    host_now = datetime.fromtimestamp((before + after) / 2, UTC)
    skew = (db_now - host_now).total_seconds()
    margin = (after - before) / 2
    detail = (
        f"database {'ahead of' if skew > 0 else 'behind'} host by {abs(skew):.3f} s"
        f" (± {margin:.3f} s)"
    )
    if abs(skew) - margin > max_skew:
        return Check("clock", "warn", detail)
    return Check("clock", "pass", detail)


def _replication(conn: psycopg.Connection[Any]) -> Check:
    """What a failover to a standby would lose: nothing acknowledged when commits wait for
    a synchronous standby; the last commits not yet replayed there when they do not."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("doctor_replication")).fetchone()
    assert row is not None
    if row["in_recovery"]:
        return Check(
            "replication", "warn", "this server is a standby: point pgsched at the primary"
        )
    if not row["standbys"]:
        return Check(
            "replication",
            "pass",
            "no streaming standby: a failover needs one (docs: operations/failover)",
        )
    waits = row["synchronous_commit"] not in ("off", "local")
    if row["synchronous_standbys"] and waits:
        return Check(
            "replication",
            "pass",
            f"{row['standbys']} standby(s), {row['synchronous_standbys']} synchronous: a"
            " failover to a synchronous one loses no acknowledged commit",
        )
    why = (
        f"synchronous_commit = {row['synchronous_commit']}"
        if row["synchronous_standbys"]
        else "no synchronous standby (synchronous_standby_names is"
        f" {row['synchronous_standby_names'] or 'empty'})"
    )
    return Check(
        "replication",
        "warn",
        f"{row['standbys']} standby(s), replication asynchronous ({why}): a failover loses"
        " the last commits not yet replayed on the standby, tasks already acknowledged to"
        " producers among them; set synchronous_standby_names (and synchronous_commit = on)",
    )
