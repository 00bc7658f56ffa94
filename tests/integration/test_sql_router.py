"""The scheduling API from plain SQL, as a client in any language would call it.

Routing at every boundary, the per-lane wake-up NOTIFY, tenant-scoped idempotency, and every
refused input (which must write nothing at all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors

AS_OF = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
LANES = ("high", "normal", "low", "batch")
SENTINEL = "pgsched_test_sentinel"


def counts(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks),"
        " (SELECT count(*) FROM pgsched.idempotency_keys),"
        " (SELECT count(*) FROM pgsched.task_events)"
    ).fetchone()
    assert row is not None
    return {"tasks": row[0], "idempotency_keys": row[1], "task_events": row[2]}


def task_row(conn: psycopg.Connection, task_id: int) -> tuple[str, str]:
    row = conn.execute(
        "SELECT status::text, tableoid::regclass::text FROM pgsched.tasks WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None, f"task {task_id} not found"
    return row[0], row[1]


@pytest.fixture
def listener(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """A separate session LISTENing on every lane's channel and on a test sentinel."""
    listening = connect(autocommit=True)
    for lane in LANES:
        listening.execute(f"LISTEN pgsched_{lane}")
    listening.execute(f"LISTEN {SENTINEL}")
    return listening


def drain(listener: psycopg.Connection, sender: psycopg.Connection) -> list[psycopg.Notify]:
    """Every notification committed before now, in order, without sleeping on a guess.

    Notifications reach a listener in commit order, so sending a sentinel after the work
    and reading up to it collects exactly what the work sent.
    """
    sender.execute("SELECT pg_notify(%s, 'end')", (SENTINEL,))
    received: list[psycopg.Notify] = []
    for notify in listener.notifies(timeout=10):
        if notify.channel == SENTINEL:
            return received
        received.append(notify)
    pytest.fail("the sentinel notification never arrived")


# --- routing -------------------------------------------------------------------------------

ROUTES = [
    pytest.param(-timedelta(days=1), "IMMEDIATE", "QUEUED", "tasks_hot", id="past-due"),
    pytest.param(timedelta(0), "IMMEDIATE", "QUEUED", "tasks_hot", id="due-now"),
    pytest.param(timedelta(minutes=15) - US, "IMMEDIATE", "QUEUED", "tasks_hot", id="15min-1us"),
    pytest.param(timedelta(minutes=15), "HOT", "QUEUED", "tasks_hot", id="15min"),
    pytest.param(timedelta(hours=24) - US, "HOT", "QUEUED", "tasks_hot", id="24h-1us"),
    pytest.param(timedelta(hours=24), "COLD", "PENDING", "tasks_cold", id="24h"),
    pytest.param(timedelta(days=365), "COLD", "PENDING", "tasks_cold", id="1year"),
]


@pytest.mark.parametrize(("offset", "route", "status", "partition"), ROUTES)
def test_route_boundaries(
    conn: psycopg.Connection,
    listener: psycopg.Connection,
    offset: timedelta,
    route: str,
    status: str,
    partition: str,
) -> None:
    run_at = AS_OF + offset
    assert conn.execute("SELECT pgsched.route(%s, %s)", (run_at, AS_OF)).fetchone() == (route,)

    task_id = conn.execute(
        "SELECT pgsched.schedule_task(task_type => 'probe', run_at => %s, as_of => %s)",
        (run_at, AS_OF),
    ).fetchone()[0]
    assert task_row(conn, task_id) == (status, f"pgsched.{partition}")
    stored = conn.execute(
        "SELECT next_run_at, created_at FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert stored == (run_at, AS_OF)

    # IMMEDIATE and HOT are both QUEUED; only IMMEDIATE wakes the lane.
    woken = [n.channel for n in drain(listener, conn)]
    assert woken == (["pgsched_normal"] if route == "IMMEDIATE" else [])


def test_route_uses_now_without_as_of(conn: psycopg.Connection) -> None:
    assert conn.execute(
        "SELECT pgsched.route(now() + interval '15 minutes' - interval '1 microsecond'),"
        " pgsched.route(now() + interval '15 minutes'),"
        " pgsched.route(now() + interval '24 hours')"
    ).fetchone() == ("IMMEDIATE", "HOT", "COLD")
    # No run_at: due now.
    task_id = conn.execute("SELECT pgsched.schedule_task('probe')").fetchone()[0]
    assert task_row(conn, task_id) == ("QUEUED", "pgsched.tasks_hot")
    assert conn.execute(
        "SELECT next_run_at = created_at FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone() == (True,)


def test_settings_move_the_boundaries(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    conn.execute("UPDATE pgsched.settings SET immediate_window = '1 hour', hot_window = '2 hours'")
    cases = [
        (timedelta(minutes=30), "IMMEDIATE", "QUEUED"),  # was HOT with the defaults
        (timedelta(hours=1) - US, "IMMEDIATE", "QUEUED"),
        (timedelta(hours=1), "HOT", "QUEUED"),
        (timedelta(hours=2) - US, "HOT", "QUEUED"),
        (timedelta(hours=2), "COLD", "PENDING"),
        (timedelta(hours=3), "COLD", "PENDING"),  # was HOT with the defaults
    ]
    for offset, route, status in cases:
        run_at = AS_OF + offset
        assert conn.execute("SELECT pgsched.route(%s, %s)", (run_at, AS_OF)).fetchone() == (
            route,
        ), offset
        task_id = conn.execute(
            "SELECT pgsched.schedule_task('probe', run_at => %s, as_of => %s)", (run_at, AS_OF)
        ).fetchone()[0]
        assert task_row(conn, task_id)[0] == status, offset
        woken = [n.channel for n in drain(listener, conn)]
        assert woken == (["pgsched_normal"] if route == "IMMEDIATE" else []), offset


def test_settings_refuse_disordered_windows(conn: psycopg.Connection) -> None:
    with pytest.raises(errors.CheckViolation, match="settings_windows_ordered"):
        conn.execute(
            "UPDATE pgsched.settings SET immediate_window = '2 hours', hot_window = '1 hour'"
        )
    assert conn.execute("SELECT immediate_window, hot_window FROM pgsched.settings").fetchone() == (
        timedelta(minutes=15),
        timedelta(hours=24),
    )


# --- wake-ups ------------------------------------------------------------------------------


def test_notify_once_per_lane_per_transaction(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    secret = "do-not-broadcast-me"
    with conn.transaction():
        for _ in range(5):
            conn.execute(
                "SELECT pgsched.schedule_task('send_email', payload => %s::jsonb, as_of => %s)",
                (f'{{"secret": "{secret}"}}', AS_OF),
            )
        # Three immediate LOW tasks in one bulk call, HOT and COLD ones that wake nobody.
        conn.execute(
            "SELECT count(*) FROM pgsched.schedule_tasks("
            " task_types => ARRAY['a', 'b', 'c'], priorities => ARRAY[1, 2, 3],"
            " as_of => %s)",
            (AS_OF,),
        )
        conn.execute(
            "SELECT pgsched.schedule_task('later', run_at => %s, priority => 9, as_of => %s)",
            (AS_OF + timedelta(hours=1), AS_OF),
        )
        conn.execute(
            "SELECT pgsched.schedule_task('much_later', run_at => %s, lane => 'BATCH',"
            " as_of => %s)",
            (AS_OF + timedelta(days=3), AS_OF),
        )
    received = drain(listener, conn)
    assert sorted(n.channel for n in received) == ["pgsched_low", "pgsched_normal"]
    for notify in received:
        assert len(notify.payload) <= 64
        assert secret not in notify.payload

    # A second transaction wakes the lane again: folding is per transaction, not global.
    conn.execute("SELECT pgsched.schedule_task('send_email', priority => 8, as_of => %s)", (AS_OF,))
    conn.execute("SELECT pgsched.schedule_task('send_email', priority => 8, as_of => %s)", (AS_OF,))
    assert [n.channel for n in drain(listener, conn)] == ["pgsched_high", "pgsched_high"]


def test_no_notify_for_hot_cold_or_rolled_back(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    with conn.transaction():
        conn.execute(
            "SELECT pgsched.schedule_task('later', run_at => %s, as_of => %s)",
            (AS_OF + timedelta(minutes=15), AS_OF),
        )
        conn.execute(
            "SELECT pgsched.schedule_task('much_later', run_at => %s, as_of => %s)",
            (AS_OF + timedelta(days=2), AS_OF),
        )
    assert drain(listener, conn) == []

    with pytest.raises(RuntimeError), conn.transaction():
        conn.execute("SELECT pgsched.schedule_task('now', as_of => %s)", (AS_OF,))
        raise RuntimeError("roll back")
    assert drain(listener, conn) == []
    assert counts(conn)["tasks"] == 2


def test_batch_lane_channel(conn: psycopg.Connection, listener: psycopg.Connection) -> None:
    task_id = conn.execute(
        "SELECT pgsched.schedule_task('bulk_export', lane => 'batch', priority => 9, as_of => %s)",
        (AS_OF,),
    ).fetchone()[0]
    assert conn.execute(
        "SELECT lane::text, priority FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone() == ("BATCH", 9)
    assert [n.channel for n in drain(listener, conn)] == ["pgsched_batch"]


# --- idempotency ---------------------------------------------------------------------------


def test_idempotency_key_per_tenant(conn: psycopg.Connection) -> None:
    schedule = (
        "SELECT pgsched.schedule_task('charge', payload => %s::jsonb, tenant_id => %s,"
        " idempotency_key => 'order-42', as_of => %s)"
    )
    first = conn.execute(schedule, ('{"amount": 10}', "acme", AS_OF)).fetchone()[0]
    before = counts(conn)
    assert before == {"tasks": 1, "idempotency_keys": 1, "task_events": 0}

    again = conn.execute(schedule, ('{"amount": 99}', "acme", AS_OF)).fetchone()[0]
    assert again == first
    assert counts(conn) == before
    # The first call's task is untouched by the repeat.
    assert conn.execute(
        "SELECT payload, idempotency_key, tenant_id FROM pgsched.tasks WHERE id = %s", (first,)
    ).fetchone() == ({"amount": 10}, "order-42", "acme")

    other = conn.execute(schedule, ('{"amount": 10}', "globex", AS_OF)).fetchone()[0]
    assert other != first
    assert counts(conn) == {"tasks": 2, "idempotency_keys": 2, "task_events": 0}
    assert conn.execute(
        "SELECT tenant_id, idempotency_key, task_id FROM pgsched.idempotency_keys"
        " ORDER BY tenant_id"
    ).fetchall() == [("acme", "order-42", first), ("globex", "order-42", other)]


def test_idempotency_survives_the_task_moving_on(conn: psycopg.Connection) -> None:
    task_id = conn.execute(
        "SELECT pgsched.schedule_task('charge', idempotency_key => 'k', as_of => %s)", (AS_OF,)
    ).fetchone()[0]
    conn.execute("SELECT pgsched.cancel_task(%s, 'changed my mind')", (task_id,))
    before = counts(conn)
    assert conn.execute(
        "SELECT pgsched.schedule_task('charge', idempotency_key => 'k', as_of => %s)", (AS_OF,)
    ).fetchone() == (task_id,)
    assert counts(conn) == before


def test_bulk_idempotency_within_and_across_batches(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
        " task_types => ARRAY['t', 't', 't', 't', 't', 't'],"
        " tenant_ids => ARRAY['acme', 'acme', 'acme', 'globex', NULL, NULL],"
        " idempotency_keys => ARRAY['a', 'b', 'a', 'a', NULL, NULL],"
        " as_of => %s)",
        (AS_OF,),
    ).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
    ids = [r[1] for r in rows]
    assert [r[2] for r in rows] == [True, True, False, True, True, True]
    assert ids[2] == ids[0]
    assert len({ids[0], ids[1], ids[3], ids[4], ids[5]}) == 5
    assert counts(conn) == {"tasks": 5, "idempotency_keys": 3, "task_events": 0}

    rows = conn.execute(
        "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
        " task_types => ARRAY['t', 't', 't'],"
        " tenant_ids => ARRAY['acme', 'acme', 'globex'],"
        " idempotency_keys => ARRAY['b', 'c', 'a'],"
        " as_of => %s)",
        (AS_OF,),
    ).fetchall()
    assert [(r[0], r[2]) for r in rows] == [(1, False), (2, True), (3, False)]
    assert rows[0][1] == ids[1]
    assert rows[2][1] == ids[3]
    assert rows[1][1] not in ids
    assert counts(conn) == {"tasks": 6, "idempotency_keys": 4, "task_events": 0}
    # Every task with a key is pointed at by exactly that key.
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks t JOIN pgsched.idempotency_keys k"
        " ON k.task_id = t.id AND k.tenant_id = t.tenant_id"
        " AND k.idempotency_key = t.idempotency_key"
    ).fetchone() == (4,)


def _backend_waits_on_lock(conn: psycopg.Connection, pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.02)
    pytest.fail(f"backend {pid} never waited on a lock")


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_concurrent_duplicate_key_waits_for_the_first(
    conn: psycopg.Connection,
    connect: Callable[..., psycopg.Connection],
    first_commits: bool,
) -> None:
    first = connect(autocommit=False)
    second = connect(autocommit=True)
    second_pid = second.info.backend_pid
    call = (
        "SELECT task_id, created FROM pgsched.schedule_tasks(task_types => ARRAY['charge'],"
        " tenant_ids => ARRAY['acme'], idempotency_keys => ARRAY['order-7'])"
    )
    row = first.execute(call).fetchone()  # transaction left open
    assert row is not None
    first_id, first_created = row
    assert first_created is True

    result: list[tuple[int, bool]] = []
    failure: list[BaseException] = []

    def run_second() -> None:
        try:
            second_row = second.execute(call).fetchone()
            assert second_row is not None
            result.append((second_row[0], second_row[1]))
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    thread = threading.Thread(target=run_second)
    thread.start()
    _backend_waits_on_lock(conn, second_pid)
    if first_commits:
        first.commit()
    else:
        first.rollback()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert failure == []
    second_id, second_created = result[0]
    if first_commits:
        assert (second_id, second_created) == (first_id, False)
    else:
        assert second_created is True
        assert second_id != first_id
    assert counts(conn) == {"tasks": 1, "idempotency_keys": 1, "task_events": 0}
    assert conn.execute("SELECT task_id FROM pgsched.idempotency_keys").fetchone() == (second_id,)


# --- refused input -------------------------------------------------------------------------

BAD_SINGLE = [
    pytest.param("task_type => 'ok', lane => 'EXPRESS'", "unknown lane 'EXPRESS'", id="lane"),
    pytest.param("task_type => 'ok', lane => 'DEAD'", "lane DEAD cannot be scheduled", id="dead"),
    pytest.param("task_type => 'ok', lane => 'dead'", "lane DEAD cannot be scheduled", id="dead2"),
    pytest.param("task_type => 'ok', priority => -1", "priority -1 is out of range", id="prio-1"),
    pytest.param("task_type => 'ok', priority => 11", "priority 11 is out of range", id="prio11"),
    pytest.param("task_type => 'bad type'", "task_type 'bad type' is not a plain", id="space"),
    pytest.param("task_type => 'x;drop'", "task_type 'x;drop' is not a plain", id="semicolon"),
    pytest.param("task_type => ''", "task_type '' is not a plain identifier", id="empty"),
    pytest.param("task_type => '9lives'", "task_type '9lives' is not a plain", id="digit"),
    pytest.param("task_type => repeat('a', 101)", "at most 100 characters", id="long"),
    pytest.param("task_type => NULL", "task_type is required", id="null-type"),
    pytest.param("task_type => 'ok', tenant_id => 'acme corp'", "tenant_id 'acme corp'", id="ten"),
    pytest.param("task_type => 'ok', tenant_id => ''", "tenant_id '' is not a plain", id="ten2"),
    pytest.param("task_type => 'ok', tenant_id => 'a/b'", "tenant_id 'a/b' is not a", id="ten3"),
    pytest.param("task_type => 'ok', max_attempts => 0", "max_attempts 0 must be at least 1"),
    pytest.param("task_type => 'ok', max_attempts => -3", "max_attempts -3 must be at least 1"),
    pytest.param("task_type => 'ok', metadata => '[]'", "metadata must be a JSON object"),
    pytest.param("task_type => 'ok', metadata => '\"x\"'", "metadata must be a JSON object"),
    pytest.param("task_type => 'ok', metadata => 'null'", "metadata must be a JSON object"),
    pytest.param("task_type => 'ok', priority => 5, lane => 'HIGH'", "lane HIGH needs priority 8"),
    pytest.param("task_type => 'ok', priority => 8, lane => 'LOW'", "lane LOW needs priority 3"),
    pytest.param("task_type => 'ok', priority => 9, lane => 'NORMAL'", "lane NORMAL needs"),
    pytest.param("task_type => 'ok', idempotency_key => ''", "idempotency_key must be 1 to 200"),
    pytest.param(
        "task_type => 'ok', idempotency_key => repeat('k', 201)",
        "idempotency_key must be 1 to 200",
    ),
]


@pytest.fixture
def populated(conn: psycopg.Connection) -> dict[str, int]:
    """A few existing rows, so 'nothing written' is checked against a non-empty database."""
    conn.execute(
        "SELECT pgsched.schedule_task('existing', tenant_id => 'acme', idempotency_key => 'k1')"
    )
    task_id = conn.execute(
        "SELECT pgsched.schedule_task('existing', run_at => now() + interval '2 days')"
    ).fetchone()[0]
    conn.execute("SELECT pgsched.cancel_task(%s)", (task_id,))
    before = counts(conn)
    assert before == {"tasks": 2, "idempotency_keys": 1, "task_events": 1}
    return before


@pytest.mark.parametrize(("args", "message"), BAD_SINGLE)
def test_bad_input_refused_and_nothing_written(
    conn: psycopg.Connection, populated: dict[str, int], args: str, message: str
) -> None:
    with pytest.raises(errors.InvalidParameterValue) as caught:
        conn.execute(f"SELECT pgsched.schedule_task({args})")
    assert str(caught.value).startswith("pgsched: ")
    assert message in str(caught.value)
    assert counts(conn) == populated


def test_payload_cap(conn: psycopg.Connection, populated: dict[str, int]) -> None:
    conn.execute("UPDATE pgsched.settings SET max_payload_bytes = 64")
    big = '{"blob": "' + "x" * 100 + '"}'
    with pytest.raises(errors.InvalidParameterValue, match=r"over the cap of 64 bytes"):
        conn.execute("SELECT pgsched.schedule_task('ok', payload => %s::jsonb)", (big,))
    assert counts(conn) == populated
    # The same cap applies row by row in the bulk path.
    with pytest.raises(errors.InvalidParameterValue, match=r"row 2 of the batch: payload is"):
        conn.execute(
            "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'b'],"
            " payloads => ARRAY['{}'::jsonb, %s::jsonb])",
            (big,),
        )
    assert counts(conn) == populated
    # Just under the cap is fine.
    fits = '{"blob": "' + "x" * 40 + '"}'
    conn.execute("SELECT pgsched.schedule_task('ok', payload => %s::jsonb)", (fits,))
    assert counts(conn)["tasks"] == populated["tasks"] + 1


def test_non_json_payload_refused(conn: psycopg.Connection, populated: dict[str, int]) -> None:
    with pytest.raises(errors.InvalidTextRepresentation, match="invalid input syntax for type"):
        conn.execute("SELECT pgsched.schedule_task('ok', payload => '{bad'::jsonb)")
    assert counts(conn) == populated


def test_bulk_one_bad_row_refuses_the_batch(
    conn: psycopg.Connection, populated: dict[str, int]
) -> None:
    with pytest.raises(errors.InvalidParameterValue) as caught:
        conn.execute(
            "SELECT * FROM pgsched.schedule_tasks("
            " task_types => ARRAY['fine', 'also_fine', 'bad type', 'fine_too'],"
            " tenant_ids => ARRAY['acme', 'acme', 'acme', 'acme'],"
            " idempotency_keys => ARRAY['k1', 'new1', 'new2', 'new3'])"
        )
    assert str(caught.value).startswith("pgsched: row 3 of the batch: task_type 'bad type'")
    assert counts(conn) == populated

    with pytest.raises(errors.InvalidParameterValue, match="row 2 of the batch: priority 42"):
        conn.execute(
            "SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY['a', 'b', 'c'],"
            " priorities => ARRAY[1, 42, 3])"
        )
    assert counts(conn) == populated


MISMATCHED = [
    "priorities => ARRAY[5]",
    "payloads => ARRAY['{}'::jsonb, '{}', '{}']",
    "run_ats => ARRAY[now()]",
    "tenant_ids => ARRAY['a']",
    "idempotency_keys => ARRAY['x']",
    "max_attempts => ARRAY[1::bigint]",
    "lanes => ARRAY['LOW']",
    "metadatas => ARRAY['{}'::jsonb]",
]


def test_bulk_mismatched_array_lengths(conn: psycopg.Connection, populated: dict[str, int]) -> None:
    accepted = []
    for arrays in MISMATCHED:
        try:
            conn.execute(f"SELECT * FROM pgsched.schedule_tasks(ARRAY['a', 'b'], {arrays})")
        except errors.InvalidParameterValue as exc:
            assert "must have 2 elements, like task_types" in str(exc), arrays
        else:
            accepted.append(arrays)
    assert accepted == [], "mismatched arrays were accepted"
    assert counts(conn) == populated


def test_bulk_empty_is_a_no_op(conn: psycopg.Connection, populated: dict[str, int]) -> None:
    assert conn.execute("SELECT * FROM pgsched.schedule_tasks(ARRAY[]::text[])").fetchall() == []
    assert conn.execute("SELECT * FROM pgsched.schedule_tasks(NULL)").fetchall() == []
    assert counts(conn) == populated


TIMEZONES_REFUSED = [
    "PST",
    "EST",
    "Asia/Beijing",
    "",
    "   ",
    None,
    "Mars/Olympus",
    "posix/Europe/Berlin",
    "Etc/GMT+5",
    "europe/berlin",
]
TIMEZONES_ACCEPTED = [
    "Europe/Berlin",
    "America/New_York",
    "America/Argentina/Buenos_Aires",
    "Asia/Shanghai",
    "UTC",
    "Etc/UTC",
]


def test_timezone_problem(conn: psycopg.Connection) -> None:
    def problem(name: str | None) -> str | None:
        return conn.execute("SELECT pgsched.timezone_problem(%s::text)", (name,)).fetchone()[0]

    wrongly_accepted = [name for name in TIMEZONES_REFUSED if problem(name) is None]
    wrongly_refused = {name: problem(name) for name in TIMEZONES_ACCEPTED if problem(name)}
    assert wrongly_accepted == []
    assert wrongly_refused == {}
    for name in TIMEZONES_REFUSED:
        message = problem(name)
        assert message is not None
        assert "time zone" in message, message
        assert "IANA" in message or "Area/Location" in message, message
