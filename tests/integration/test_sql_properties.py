"""Property-based tests of the SQL API: random sequences of calls with random, hostile and
boundary arguments, each call checked against the invariants the API promises.

Calls, from three real logins as an application, a worker and an operator would make them:
schedule (one and bulk, with deadlines), cancel (one, with detail, and by filter), claim,
heartbeat and finish as a worker would (every outcome, stale and forged lease tokens), lease
rescue, promotion and the deadline sweep (moved in time with `as_of`), the DEAD lane's retry
and discard, recurring create / pause / resume / delete, and tenants (add, disable). The
application's login is bound to tenant `acme` only.

After every call:

- **only legal transitions**: each task's events since the call form one chain from its
  status before to its status after, every link allowed by `pgsched.transition_is_legal`
  (PROCESSING -> CANCELLED only after a cancel request); a new task starts PENDING or
  QUEUED; no task disappears;
- **one event per transition**: that chain is the whole story (a changed status without
  its event, or an event without its change, breaks it);
- **nothing partial after an error**: a refused call leaves every task, event, schedule,
  key, tenant and ledger row as it was;
- **only documented SQLSTATEs**: a refusal carries one the docs name (`DOCUMENTED`);
- **tenant isolation**: whatever the `acme` application does, it creates, changes or
  cancels no row of another tenant, and is refused (42501) when it asks to.

Short form (CI): `PGSCHED_PROPERTY_EXAMPLES` sequences (default 300) of up to
`PGSCHED_PROPERTY_STEPS` calls (default 40), the same ones every run. Long form, with a
new draw each run (`PGSCHED_PROPERTY_SEED` set), and `PGSCHED_PROPERTY_SURVEY=1` to go on
after a broken invariant and list every kind found, with the refusals met per function:

    PGSCHED_PROPERTY_EXAMPLES=2000 PGSCHED_PROPERTY_STEPS=40 PGSCHED_PROPERTY_SEED=1 \
        PGSCHED_PROPERTY_SURVEY=1 pytest -s tests/integration/test_sql_properties.py

A call the invariants broke becomes a plain test at the end of this file, with the example
Hypothesis found.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

EXAMPLES = int(os.environ.get("PGSCHED_PROPERTY_EXAMPLES", "300"))
STEPS = int(os.environ.get("PGSCHED_PROPERTY_STEPS", "40"))

# The SQLSTATEs the docs name for refusals (docs/guides/scheduling.md, cancelling.md,
# recurring.md, docs/concepts/identity-tenancy.md).
DOCUMENTED = {
    "22023": "bad input, the argument named",
    "42501": "another tenant's task, or a tenant the login is not bound to",
    "P0002": "no such task or schedule",
    "55000": "the task has finished and cannot be cancelled",
}

LEGAL = {
    ("PENDING", "QUEUED"),
    ("PENDING", "CANCELLED"),
    ("QUEUED", "PROCESSING"),
    ("QUEUED", "CANCELLED"),
    ("PROCESSING", "COMPLETED"),
    ("PROCESSING", "FAILED"),
    ("PROCESSING", "QUEUED"),
    ("PROCESSING", "PENDING"),
    ("FAILED", "QUEUED"),
    ("FAILED", "PENDING"),
    ("FAILED", "CANCELLED"),
}

settings.register_profile(
    "pgsched",
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
    derandomize=os.environ.get("PGSCHED_PROPERTY_SEED") is None,
    database=None,
)
PROFILE = settings.get_profile("pgsched")

# --- Arguments: plain, hostile and at the edges -------------------------------------------

# Times are drawn as offsets from the start of the run, so due, hot and cold all occur.
NOW = datetime.now(UTC).replace(microsecond=0)

text_hostile = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    max_size=40,
)


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """A valid value seven times in eight, else a hostile or boundary one: a call with a dozen
    arguments still gets through often enough to reach every state."""
    return st.integers(min_value=0, max_value=7).flatmap(lambda i: hostile if i == 7 else valid)


def offsets(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=low, max_value=high).map(
        lambda s: (NOW + timedelta(seconds=s)).isoformat()
    )


identifiers = st.sampled_from(["report", "send_invoice", "a", "x.y", "_private", "T9"])
task_types = mostly(
    identifiers,
    st.one_of(
        st.sampled_from(["", " ", "a b", "x'; DROP TABLE pgsched.tasks; --", "é", "a" * 101, "9x"]),
        st.none(),
        text_hostile,
    ),
)
tenants = mostly(
    st.sampled_from(["acme", "acme", "acme", "globex", "default"]),
    st.sampled_from(["_all", "*", "", "a'b", "ACME", None, "x" * 101]),
)
keys = mostly(
    st.sampled_from([None, None, "k1", "k2"]),
    st.one_of(st.sampled_from(["pgsched:fanout:1", "", "k" * 300]), text_hostile),
)
priorities = mostly(
    st.integers(min_value=0, max_value=10),
    st.sampled_from([None, -1, 11, 2**31 - 1, -(2**31)]),
)
attempts = mostly(st.integers(min_value=1, max_value=3), st.sampled_from([None, 0, -1, 2**63 - 1]))
# The lane follows the priority unless BATCH is asked for; a named lane must match it.
lanes = mostly(
    st.sampled_from([None, None, None, "BATCH"]),
    st.sampled_from(["HIGH", "NORMAL", "LOW", "DEAD", "high", "bogus", ""]),
)
# (scope, product): a tenant's task, or one for every tenant of a product, or of all.
shapes = mostly(
    st.sampled_from([("tenant", None)] * 6 + [("product", "crm"), ("global", None)]),
    st.tuples(
        st.sampled_from([None, "tenant", "product", "global", "bogus", ""]),
        st.sampled_from([None, "crm", "x'y", "", "nope"]),
    ),
)
# Due now (or late), soon (hot) or in days (cold); at the edges of time.
times = mostly(
    st.one_of(st.none(), offsets(-3600, 3600), offsets(2 * 86400, 3 * 86400)),
    st.sampled_from(
        [
            "infinity",
            "-infinity",
            "epoch",
            "9999-12-31 23:59:59+00",
            "0001-01-01 00:00:00+00",
            "1969-12-31 23:59:59+00",
            "9998-12-31 23:59:59+00",
        ]
    ),
)
# The clock a call judges by: now, minutes on (leases expire) or days on (cold comes due).
as_ofs = mostly(
    st.one_of(st.none(), st.none(), offsets(0, 600), offsets(2 * 86400, 4 * 86400)),
    st.sampled_from(["infinity", "-infinity", "epoch", "9999-12-31 23:59:59+00"]),
)
intervals = mostly(
    st.sampled_from([None, None, "1 second", "30 seconds", "1 day"]),
    st.sampled_from(["0", "-1 second", "100000 years", "-100000 years", "1 microsecond"]),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text_hostile,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text_hostile, inner, max_size=3),
    max_leaves=8,
)
payloads = mostly(
    st.dictionaries(identifiers, st.integers(), max_size=2),
    st.one_of(st.none(), st.dictionaries(text_hostile, json_values, max_size=3), json_values),
)
crons = mostly(
    st.sampled_from(["* * * * *", "0 9 * * 1-5", "*/15 * * * *", "30 2 * * *"]),
    st.sampled_from(["0 0 31 2 *", "61 * * * *", "", "* * *", None, "0 9 * * MON", "@daily"]),
)
zones = mostly(
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
    st.sampled_from(["PST", "Mars/Olympus", "", None, "+02:00"]),
)
misfires = mostly(
    st.sampled_from(["run_once", "skip", "catch_up"]), st.sampled_from(["bogus", None, ""])
)
reasons = mostly(
    st.sampled_from([None, "why"]), st.one_of(st.sampled_from(["", " "]), text_hostile)
)
traceparents = mostly(
    st.sampled_from([None, None, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]),
    st.one_of(
        st.sampled_from(
            ["", "00-0-0-0", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
        ),
        text_hostile,
    ),
)
delay_lists = mostly(
    st.one_of(st.none(), st.lists(st.sampled_from(["1 second", "1 minute"]), max_size=3)),
    st.lists(intervals, max_size=3),
)
# A sometimes-missed window: rarely set, so most keyed calls meet their first task.
windows = mostly(st.none(), intervals)
picks = st.integers(min_value=0, max_value=10_000)
outcomes = mostly(
    st.sampled_from(["COMPLETED", "RETRY", "FAILED", "FAILED", "RELEASED"]),
    st.sampled_from(["CANCELLED", "BOGUS", None, ""]),
)


@dataclass(frozen=True)
class Call:
    who: str  # app (bound to acme), worker, admin
    sql: str
    params: dict[str, Any] = field(hash=False, compare=False)
    picks: tuple[str, ...] = ()  # params to replace by a known id: task:NAME, schedule:NAME
    leased: bool = False  # task_ids / lease_tokens drawn from the leases held

    def __repr__(self) -> str:
        return f"Call({self.who}, {self.sql.split('(')[0]}, {self.params!r})"


def call(
    who: str, statement: str, picks: tuple[str, ...] = (), leased: bool = False, **params: Any
) -> Call:
    return Call(who, statement, params, picks, leased)


def jsonb(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


@st.composite
def schedule_one(draw: st.DrawFn) -> Call:
    who = draw(st.sampled_from(["app", "app", "worker", "admin"]))
    fn = draw(st.sampled_from(["schedule_task", "schedule_task_ex"]))
    return call(
        who,
        f"SELECT * FROM pgsched.{fn}(task_type => %(task_type)s::text,"
        f" payload => %(payload)s::jsonb,"
        " run_at => %(run_at)s::timestamptz, tenant_id => %(tenant_id)s::text,"
        " priority => %(priority)s::integer, idempotency_key => %(key)s::text,"
        " max_attempts => %(max_attempts)s::bigint, lane => %(lane)s::text,"
        " metadata => %(metadata)s::jsonb, as_of => %(as_of)s::timestamptz,"
        " scope => %(scope)s::text, product => %(product)s::text,"
        " unique_for => %(unique_for)s::interval, debounce => %(debounce)s::interval,"
        " traceparent => %(traceparent)s::text, retry_delays => %(retry_delays)s::interval[],"
        " complete_by => %(complete_by)s::timestamptz, deadline_callback => %(callback)s::text)",
        complete_by=draw(st.one_of(st.none(), st.none(), times)),
        callback=draw(mostly(st.none(), st.one_of(identifiers, text_hostile))),
        unique_for=draw(windows),
        debounce=draw(windows),
        traceparent=draw(traceparents),
        retry_delays=draw(delay_lists),
        task_type=draw(task_types),
        payload=jsonb(draw(payloads)),
        run_at=draw(times),
        tenant_id=draw(tenants),
        priority=draw(priorities),
        key=draw(keys),
        max_attempts=draw(attempts),
        lane=draw(lanes),
        metadata=jsonb(
            draw(st.one_of(st.none(), st.dictionaries(identifiers, json_values, max_size=2)))
        ),
        as_of=draw(as_ofs),
        scope=(shape := draw(shapes))[0],
        product=shape[1],
    )


@st.composite
def schedule_many(draw: st.DrawFn) -> Call:
    n = draw(st.integers(min_value=0, max_value=4))
    # Now and then one array of the wrong length.
    broken = draw(mostly(st.none(), st.integers(min_value=0, max_value=11)))
    columns = iter(range(12))

    def column(strategy: st.SearchStrategy[Any]) -> list[Any] | None:
        size = n + 1 if next(columns) == broken else n
        return draw(st.one_of(st.none(), st.lists(strategy, min_size=size, max_size=size)))

    shape_list = draw(st.lists(shapes, min_size=n, max_size=n))

    payload_list = column(payloads)
    metadata_list = column(st.dictionaries(identifiers, json_values, max_size=1))
    return call(
        draw(st.sampled_from(["app", "app", "admin"])),
        "SELECT * FROM pgsched.schedule_tasks(%(types)s::text[], %(payloads)s::text[]::jsonb[],"
        " %(run_ats)s::timestamptz[], %(tenants)s::text[], %(priorities)s::integer[],"
        " %(keys)s::text[], %(attempts)s::bigint[], %(lanes)s::text[],"
        " %(metadatas)s::text[]::jsonb[], %(as_of)s::timestamptz, %(scopes)s::text[],"
        " %(products)s::text[], %(unique_fors)s::interval[], %(debounces)s::interval[],"
        " %(traceparents)s::text[])",
        unique_fors=column(windows),
        debounces=column(windows),
        traceparents=column(traceparents),
        types=draw(st.lists(task_types, min_size=n, max_size=n)),
        payloads=None if payload_list is None else [jsonb(p) for p in payload_list],
        run_ats=column(times),
        tenants=column(tenants),
        priorities=column(priorities),
        keys=column(keys),
        attempts=column(attempts),
        lanes=column(lanes),
        metadatas=None if metadata_list is None else [jsonb(m) for m in metadata_list],
        as_of=draw(as_ofs),
        scopes=[sh[0] for sh in shape_list] if draw(st.booleans()) else None,
        products=[sh[1] for sh in shape_list] if draw(st.booleans()) else None,
    )


@st.composite
def cancel(draw: st.DrawFn) -> Call:
    who = draw(st.sampled_from(["app", "app", "admin"]))
    kind = draw(st.sampled_from(["one", "ex", "many"]))
    if kind == "one":
        return call(
            who,
            "SELECT pgsched.cancel_task(%(task)s::bigint, %(reason)s::text,"
            " %(as_of)s::timestamptz)",
            picks=("task",),
            task=draw(picks),
            reason=draw(reasons),
            as_of=draw(as_ofs),
        )
    if kind == "ex":
        return call(
            who,
            "SELECT * FROM pgsched.cancel_task_ex(%(task)s::bigint, %(reason)s::text,"
            " %(actor)s::text, %(as_of)s::timestamptz)",
            picks=("task",),
            task=draw(picks),
            reason=draw(reasons),
            actor=draw(st.one_of(st.none(), text_hostile)),
            as_of=draw(as_ofs),
        )
    return call(
        who,
        "SELECT * FROM pgsched.cancel_tasks(task_type => %(task_type)s::text,"
        " tenant_id => %(tenant_id)s::text, idempotency_key => %(key)s::text,"
        " due_from => %(due_from)s::timestamptz, due_until => %(due_until)s::timestamptz,"
        " reason => %(reason)s::text, dry_run => %(dry_run)s::boolean,"
        " as_of => %(as_of)s::timestamptz)",
        task_type=draw(st.one_of(st.none(), identifiers, task_types)),
        tenant_id=draw(tenants),
        key=draw(keys),
        due_from=draw(times),
        due_until=draw(times),
        reason=draw(reasons),
        dry_run=draw(st.booleans()),
        as_of=draw(as_ofs),
    )


@st.composite
def worker_call(draw: st.DrawFn) -> Call:
    kind = draw(
        st.sampled_from(
            [
                "claim",
                "claim",
                "finish",
                "finish",
                "heartbeat",
                "rescue",
                "promote",
                "fan_out",
                "deadlines",
            ]
        )
    )
    if kind == "claim":
        return call(
            "worker",
            "SELECT id, lease_token FROM pgsched.task_claim_many(%(lane)s::pgsched.task_lane,"
            " %(n)s::integer, %(worker)s::text, %(lease)s::interval, %(as_of)s::timestamptz)",
            lane=draw(st.sampled_from(["HIGH", "NORMAL", "LOW", "BATCH"])),
            n=draw(
                mostly(st.integers(min_value=1, max_value=8), st.sampled_from([0, -1, 2**31 - 1]))
            ),
            worker=draw(st.one_of(st.sampled_from(["w1", "w2"]), text_hostile, st.none())),
            lease=draw(intervals),
            as_of=draw(as_ofs),
        )
    if kind == "finish":
        n = draw(st.integers(min_value=1, max_value=3))
        return call(
            "worker",
            "SELECT * FROM pgsched.task_finish_many(%(task_ids)s::bigint[],"
            " %(lease_tokens)s::uuid[],"
            " %(outcomes)s::text[], %(errors)s::text[], %(delays)s::interval[],"
            " %(as_of)s::timestamptz)",
            leased=True,
            task_ids=n,
            lease_tokens=draw(
                st.lists(
                    mostly(st.just("held"), st.sampled_from(["forged", "null"])),
                    min_size=n,
                    max_size=n,
                )
            ),
            outcomes=draw(st.lists(outcomes, min_size=n, max_size=n)),
            errors=draw(
                st.one_of(
                    st.none(), st.lists(st.one_of(st.none(), text_hostile), min_size=n, max_size=n)
                )
            ),
            delays=draw(st.one_of(st.none(), st.lists(intervals, min_size=n, max_size=n))),
            as_of=draw(as_ofs),
        )
    if kind == "heartbeat":
        n = draw(st.integers(min_value=1, max_value=3))
        return call(
            "worker",
            "SELECT * FROM pgsched.task_heartbeat_many(%(task_ids)s::bigint[],"
            " %(lease_tokens)s::uuid[], %(lease)s::interval, %(as_of)s::timestamptz)",
            leased=True,
            task_ids=n,
            lease_tokens=draw(
                st.lists(mostly(st.just("held"), st.just("forged")), min_size=n, max_size=n)
            ),
            lease=draw(intervals),
            as_of=draw(as_ofs),
        )
    if kind == "deadlines":
        return call(
            "worker",
            "SELECT * FROM pgsched.deadline_sweep(%(n)s::integer, %(as_of)s::timestamptz)",
            n=draw(mostly(st.integers(min_value=1, max_value=100), st.sampled_from([0, -1, None]))),
            as_of=draw(as_ofs),
        )
    if kind == "rescue":
        return call(
            "worker",
            "SELECT pgsched.lease_rescue_expired(%(lane)s::pgsched.task_lane, %(n)s::integer,"
            " %(as_of)s::timestamptz)",
            lane=draw(st.sampled_from([None, "HIGH", "NORMAL", "LOW", "BATCH"])),
            n=draw(st.integers(min_value=-1, max_value=100)),
            as_of=draw(as_ofs),
        )
    if kind == "fan_out":
        return call(
            "worker",
            "SELECT pgsched.task_fan_out((%(task_ids)s::bigint[])[1],"
            " (%(lease_tokens)s::uuid[])[1],"
            " %(as_of)s::timestamptz)",
            leased=True,
            task_ids=1,
            lease_tokens=[draw(st.sampled_from(["held", "held", "forged"]))],
            as_of=draw(as_ofs),
        )
    return call(
        "worker",
        "SELECT pgsched.task_promote_due(%(n)s::integer, %(as_of)s::timestamptz,"
        " %(within)s::interval)",
        n=draw(st.integers(min_value=-1, max_value=100)),
        as_of=draw(as_ofs),
        within=draw(intervals),
    )


@st.composite
def dead_lane(draw: st.DrawFn) -> Call:
    if draw(st.booleans()):
        by = draw(mostly(st.sampled_from(["id", "id", "type", "all"]), st.just("none")))
        return call(
            "admin",
            "SELECT * FROM pgsched.dead_retry(task_id => %(task)s::bigint,"
            " task_type => %(task_type)s::text,"
            " all_tasks => %(all)s::boolean, reason => %(reason)s::text,"
            " as_of => %(as_of)s::timestamptz)",
            picks=("task",) if by == "id" else (),
            task=draw(picks) if by == "id" else None,
            task_type=draw(task_types) if by == "type" else None,
            all=by == "all",
            reason=draw(reasons),
            as_of=draw(as_ofs),
        )
    return call(
        "admin",
        "SELECT pgsched.dead_discard(%(task)s::bigint, %(reason)s::text, %(as_of)s::timestamptz)",
        picks=("task",),
        task=draw(picks),
        reason=draw(reasons),
        as_of=draw(as_ofs),
    )


@st.composite
def recurring(draw: st.DrawFn) -> Call:
    kind = draw(st.sampled_from(["create", "create", "pause", "resume", "delete"]))
    if kind == "create":
        return call(
            draw(st.sampled_from(["app", "admin"])),
            "SELECT pgsched.schedule_recurring(task_type => %(task_type)s::text,"
            " cron_expression => %(cron)s::text, timezone => %(zone)s::text,"
            " payload => %(payload)s::jsonb, tenant_id => %(tenant_id)s::text,"
            " priority => %(priority)s::integer, idempotency_key => %(key)s::text,"
            " misfire_policy => %(misfire)s::text, max_attempts => %(max_attempts)s::bigint,"
            " lane => %(lane)s::text, catch_up_limit => %(catch_up)s::integer,"
            " first_fire_at => %(first)s::timestamptz, as_of => %(as_of)s::timestamptz,"
            " scope => %(scope)s::text, product => %(product)s::text)",
            task_type=draw(task_types),
            cron=draw(crons),
            zone=draw(zones),
            payload=jsonb(draw(payloads)),
            tenant_id=draw(tenants),
            priority=draw(priorities),
            key=draw(keys),
            misfire=draw(misfires),
            max_attempts=draw(attempts),
            lane=draw(lanes),
            catch_up=draw(
                mostly(st.integers(min_value=1, max_value=20), st.sampled_from([None, 0, -1]))
            ),
            first=draw(times),
            as_of=draw(as_ofs),
            scope=(shape := draw(shapes))[0],
            product=shape[1],
        )
    extra = ", %(reason)s::text" if kind != "resume" else ""
    return call(
        "admin",
        f"SELECT pgsched.schedule_{kind}(%(schedule)s::bigint{extra},"
        f" as_of => %(as_of)s::timestamptz)",
        picks=("schedule",),
        schedule=draw(picks),
        reason=draw(reasons),
        as_of=draw(as_ofs),
    )


@st.composite
def tenancy(draw: st.DrawFn) -> Call:
    if draw(st.booleans()):
        return call(
            "admin",
            "SELECT pgsched.tenant_add(%(tenant_id)s::text, %(product)s::text,"
            " %(metadata)s::jsonb)",
            tenant_id=draw(tenants),
            product=draw(st.sampled_from(["crm", "erp", None, "", "x y"])),
            metadata=jsonb(draw(st.one_of(st.just({}), payloads))),
        )
    return call(
        "admin",
        "SELECT pgsched.tenant_set_active(%(tenant_id)s::text, %(active)s::boolean)",
        tenant_id=draw(tenants),
        active=draw(st.one_of(st.booleans(), st.none())),
    )


calls = st.one_of(
    schedule_one(),
    schedule_one(),
    schedule_many(),
    cancel(),
    worker_call(),
    worker_call(),
    worker_call(),
    dead_lane(),
    recurring(),
    tenancy(),
)

# --- The world: logins, snapshots, invariants ---------------------------------------------

SNAPSHOT = """
SELECT
    (SELECT coalesce(jsonb_object_agg(
                t.id,
                jsonb_build_array(
                    t.status, t.tenant_id, md5(t::text), t.cancel_requested_at IS NOT NULL
                )
            ), '{}')
       FROM pgsched.tasks AS t),
    (SELECT coalesce(max(id), 0) FROM pgsched.task_events),
    (SELECT md5(coalesce(string_agg(s::text, ',' ORDER BY s.id), '')) FROM pgsched.schedules AS s),
    (SELECT coalesce(jsonb_object_agg(s.id, s.tenant_id), '{}') FROM pgsched.schedules AS s),
    (SELECT count(*) FROM pgsched.schedule_events),
    (SELECT md5(coalesce(string_agg(k::text, ',' ORDER BY k.tenant_id, k.idempotency_key), ''))
       FROM pgsched.idempotency_keys AS k),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.tenant_id), ''))
       FROM pgsched.tenants AS t),
    (SELECT count(*) FROM pgsched.completed_work),
    (SELECT count(*) FROM pgsched.schedule_occurrences)
"""


@dataclass
class Snapshot:
    tasks: dict[int, tuple[str, str, str, bool]]
    last_event: int
    schedules: str
    schedule_tenants: dict[int, str]
    rest: tuple[Any, ...]


class World:
    def __init__(self, conn: psycopg.Connection, db_dsn: str) -> None:
        self.admin = conn
        self.suffix = uuid.uuid4().hex[:8]
        self.roles: list[str] = []
        self.conns: dict[str, psycopg.Connection] = {"admin": conn}
        conn.execute(
            "SELECT pgsched.tenant_add('acme', 'crm'), pgsched.tenant_add('globex', 'crm')"
        )
        for who, group, tenant in (
            ("app", "pgsched_producer", "acme"),
            ("worker", "pgsched_worker", "*"),
        ):
            name = f"t_{self.suffix}_{who}"
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(name), sql.Identifier(group)
                )
            )
            conn.execute(
                "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, %s)",
                (name, tenant),
            )
            self.roles.append(name)
            self.conns[who] = psycopg.connect(make_conninfo(db_dsn, user=name), autocommit=True)
        self.leases: dict[int, str] = {}
        self.refusals: dict[str, int] = {}
        self.calls = 0
        self.found: dict[str, str] = {}
        self.function = ""
        self.outcomes: dict[str, dict[str, int]] = {}
        self.messages: dict[str, int] = {}

    def expect(self, holds: bool, kind: str, message: str) -> None:
        """An invariant. With PGSCHED_PROPERTY_SURVEY=1 every break is collected (the first
        of each kind, per function) and the run goes on; otherwise the first one fails."""
        if holds:
            return
        if os.environ.get("PGSCHED_PROPERTY_SURVEY") != "1":
            raise AssertionError(message)
        self.found.setdefault(f"{self.function} {kind}", message)

    def close(self) -> None:
        for who, c in self.conns.items():
            if who != "admin":
                c.close()
        for name in self.roles:
            self.admin.execute("DELETE FROM pgsched.producer_tenants WHERE role_name = %s", (name,))
            self.admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))

    def snapshot(self) -> Snapshot:
        row = self.admin.execute(SNAPSHOT).fetchone()
        assert row is not None
        tasks = {int(k): (v[0], v[1], v[2], v[3]) for k, v in row[0].items()}
        return Snapshot(
            tasks, row[1], row[2], {int(k): v for k, v in row[3].items()}, tuple(row[4:])
        )

    def known(self, kind: str, pick: int, snap: Snapshot) -> int:
        ids = sorted(snap.tasks) if kind == "task" else sorted(snap.schedule_tenants)
        # Now and then an id that is not there (or never was), as a caller may send.
        if not ids or pick % 7 == 0:
            return [0, -1, 2**63 - 1, max(ids, default=0) + 1][pick % 4]
        return ids[pick % len(ids)]

    def bind(self, c: Call, snap: Snapshot) -> dict[str, Any]:
        params = dict(c.params)
        for name in c.picks:
            kind = "schedule" if name == "schedule" else "task"
            params[name] = self.known(kind, params[name], snap)
        if c.leased:
            held = sorted(self.leases.items())
            n = params["task_ids"]
            ids, tokens = [], []
            for i in range(n):
                task_id, token = held[i % len(held)] if held else (i + 1, str(uuid.uuid4()))
                kind = params["lease_tokens"][i]
                ids.append(task_id)
                tokens.append(
                    token if kind == "held" else None if kind == "null" else str(uuid.uuid4())
                )
            params["task_ids"], params["lease_tokens"] = ids, tokens
        return params

    def run(self, c: Call) -> None:
        before = self.snapshot()
        params = self.bind(c, before)
        conn = self.conns[c.who]
        rows: list[tuple[Any, ...]] = []
        error: psycopg.Error | None = None
        try:
            rows = conn.execute(c.sql, params).fetchall()
        except psycopg.Error as e:
            error = e
        after = self.snapshot()
        self.calls += 1
        self.function = c.sql.split("(")[0].split(".")[-1]
        where = f"{c.who}: {self.function} {params!r}"
        outcome = "ok" if error is None else error.sqlstate or "?"
        self.outcomes.setdefault(self.function, {}).setdefault(outcome, 0)
        self.outcomes[self.function][outcome] += 1
        if error is not None and os.environ.get("PGSCHED_PROPERTY_SURVEY") == "1":
            msg = re.sub(r"\d+", "N", str(error).splitlines()[0])[:110]
            self.messages.setdefault(f"{self.function} {msg}", 0)
            self.messages[f"{self.function} {msg}"] += 1
        if error is not None:
            state = error.sqlstate or "?"
            self.refusals[state] = self.refusals.get(state, 0) + 1
            self.expect(
                state in DOCUMENTED,
                f"SQLSTATE {state}",
                f"{where}: undocumented SQLSTATE {state}: {error}",
            )
            self.expect(after == before, "partial", f"{where}: refused ({error}), yet changed")
            return
        self.check_transitions(before, after, where)
        if c.who == "app":
            self.check_isolation(before, after, where)
        if self.function == "task_claim_many":
            for task_id, token in rows:
                self.expect(after.tasks[task_id][0] == "PROCESSING", "claim", f"{where}: {task_id}")
                self.leases[task_id] = str(token)
        for task_id in list(self.leases):
            if after.tasks.get(task_id, ("",))[0] != "PROCESSING":
                del self.leases[task_id]
        if self.function == "schedule_task_ex":
            ((task_id, created),) = rows
            self.expect(
                (task_id in before.tasks) == (not created),
                "created",
                f"{where}: task {task_id} created={created}",
            )

    def check_transitions(self, before: Snapshot, after: Snapshot, where: str) -> None:
        gone = set(before.tasks) - set(after.tasks)
        self.expect(not gone, "disappeared", f"{where}: tasks disappeared: {gone}")
        events: dict[int, list[tuple[str, str]]] = {}
        for task_id, a, b in self.admin.execute(
            "SELECT task_id, from_status::text, to_status::text FROM pgsched.task_events"
            " WHERE id > %s AND from_status <> to_status ORDER BY id",
            (before.last_event,),
        ).fetchall():
            events.setdefault(task_id, []).append((a, b))
        for task_id, now in after.tasks.items():
            chain = events.pop(task_id, [])
            if task_id in before.tasks:
                start, cancel_asked = before.tasks[task_id][0], before.tasks[task_id][3]
            else:
                start, cancel_asked = (chain[0][0] if chain else now[0]), False
                self.expect(
                    start in ("PENDING", "QUEUED"), "born", f"{where}: {task_id} born {start}"
                )
            status = start
            for a, b in chain:
                self.expect(
                    a == status, "event chain", f"{where}: {task_id} event {a}->{b} at {status}"
                )
                legal = (a, b) in LEGAL or ((a, b) == ("PROCESSING", "CANCELLED") and cancel_asked)
                self.expect(legal, f"{a}->{b}", f"{where}: task {task_id} went {a} -> {b}")
                status = b
            self.expect(
                status == now[0],
                f"no event for ->{now[0]}",
                f"{where}: task {task_id} is {now[0]}, its events end at {status}",
            )
        self.expect(not events, "orphan events", f"{where}: events of no task: {events}")

    def check_isolation(self, before: Snapshot, after: Snapshot, where: str) -> None:
        for task_id, now in after.tasks.items():
            if before.tasks.get(task_id) != now:
                self.expect(
                    now[1] == "acme", "isolation", f"{where}: acme touched {task_id} of {now[1]}"
                )
        for schedule_id, tenant in after.schedule_tenants.items():
            if schedule_id not in before.schedule_tenants:
                self.expect(
                    tenant == "acme", "isolation", f"{where}: acme made a schedule of {tenant}"
                )


@pytest.fixture
def world(conn: psycopg.Connection, db_dsn: str) -> Iterator[World]:
    w = World(conn, db_dsn)
    try:
        yield w
    finally:
        print(f"\n{w.calls} calls; refusals by SQLSTATE: {dict(sorted(w.refusals.items()))}")
        seen = w.admin.execute(
            "SELECT from_status || '->' || to_status, count(*) FROM pgsched.task_events"
            " WHERE from_status <> to_status GROUP BY 1 ORDER BY 1"
        ).fetchall()
        print(f"transitions made: {dict(seen)}")
        print(
            w.admin.execute("SELECT status, count(*) FROM pgsched.tasks GROUP BY 1").fetchall(),
            w.admin.execute("SELECT count(*) FROM pgsched.task_events").fetchone(),
        )
        for m, n in sorted(w.messages.items(), key=lambda x: -x[1])[:40]:
            print(f"MSG {n} {m}")
        for function, counts in sorted(w.outcomes.items()):
            print(f"  {function}: {counts}")
        for kind, message in sorted(w.found.items()):
            print(f"BROKEN {kind}: {message[:600]}")
        w.close()


@settings(PROFILE, stateful_step_count=STEPS)
@given(st.lists(calls, min_size=1, max_size=STEPS))
def test_random_calls_keep_the_invariants(world: World, sequence: list[Call]) -> None:
    for c in sequence:
        world.run(c)


# --- What the properties found, kept as plain examples ------------------------------------


def test_tenant_set_active_refuses_null(conn: psycopg.Connection) -> None:
    """Found: tenant_set_active('acme', NULL) failed on the NOT NULL constraint (23502)."""
    conn.execute("SELECT pgsched.tenant_add('acme', 'crm')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="active must be true or false"):
        conn.execute("SELECT pgsched.tenant_set_active('acme', NULL)")
    active = conn.execute("SELECT active FROM pgsched.tenants WHERE tenant_id = 'acme'").fetchone()
    assert active == (True,)


def test_claim_refuses_a_negative_max_tasks(conn: psycopg.Connection) -> None:
    """Found: task_claim_many('HIGH', -1, ...) failed in its LIMIT (2201W) when the lane was
    fair; any lane now refuses it, naming the argument, and claims nothing."""
    conn.execute("SELECT pgsched.schedule_task('report', priority => 9)")
    for lane in ("HIGH", "NORMAL", "BATCH"):
        for bad in (-1, None):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_tasks"):
                conn.execute(
                    "SELECT * FROM pgsched.task_claim_many(%s::pgsched.task_lane, %s::integer,"
                    " 'w1')",
                    (lane, bad),
                )
    assert conn.execute("SELECT status::text FROM pgsched.tasks").fetchall() == [("QUEUED",)]
    none = conn.execute("SELECT count(*) FROM pgsched.task_claim_many('HIGH', 0, 'w1')").fetchone()
    assert none == (0,)


def test_a_negative_lease_window_delay_or_batch_is_refused(conn: psycopg.Connection) -> None:
    """Found: a lease of '-100000 years' (claim, heartbeat), a promotion window or a retry
    delay of it overflowed the timestamp (22008); now refused as bad input, with nothing
    changed."""
    task = conn.execute("SELECT pgsched.schedule_task('report')").fetchone()
    assert task is not None
    for statement, word in (
        ("SELECT * FROM pgsched.task_claim_many('NORMAL', 5, 'w1', %s::interval)", "lease"),
        (
            "SELECT * FROM pgsched.task_heartbeat_many(ARRAY[1]::bigint[],"
            " ARRAY[gen_random_uuid()], %s::interval)",
            "lease",
        ),
        ("SELECT pgsched.task_promote_due(10, NULL, %s::interval)", "within"),
        (
            "SELECT * FROM pgsched.task_finish_many(ARRAY[1]::bigint[], ARRAY[gen_random_uuid()],"
            " ARRAY['RETRY'], NULL, ARRAY[%s::interval])",
            "retry_delays",
        ),
    ):
        for bad in ("-100000 years", "-1 second"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=word):
                conn.execute(statement, (bad,))
    # Found too: a max_tasks of -1 failed in a LIMIT (2201W).
    for statement in (
        "SELECT pgsched.lease_rescue_expired('NORMAL', -1)",
        "SELECT pgsched.task_promote_due(-1)",
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_tasks"):
            conn.execute(statement)
    assert conn.execute("SELECT status::text FROM pgsched.tasks").fetchall() == [("QUEUED",)]
