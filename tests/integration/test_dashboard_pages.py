"""The dashboard's pages for daily use: paging with totals, the DEAD lane by error class and
its bulk actions, the task page's traceback, the overview's tiers and charts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from tests.support.dashboard_server import (
    csrf_field,
    env_without_auth,
    make_dead_task,
    make_dead_tasks,
    running_dashboard,
    status_of,
)


@pytest.fixture
def env(db_env: dict[str, str]) -> dict[str, str]:
    return env_without_auth(db_env)


def linked_ids(html: str, table: str) -> list[int]:
    body = html.split(f'id="{table}"')[1].split("</table>")[0]
    return [int(i) for i in re.findall(r'<a href="/tasks/(\d+)">', body)]


def next_link(html: str) -> str | None:
    match = re.search(r'<a href="([^"]+)" id="next-page">', html)
    return match.group(1).replace("&amp;", "&") if match else None


def test_the_dead_lane_pages_through_every_task_with_its_total(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    ids = make_dead_tasks(conn, 232)
    seen: list[int] = []
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        url: str | None = "/dead"
        pages = []
        while url is not None:
            page = client.get(url)
            assert page.status_code == 200, page.text
            pages.append(page.text)
            seen += linked_ids(page.text, "dead")
            url = next_link(page.text)
    assert len(pages) == 3
    assert "232 task(s)" in pages[0] and "1-100 of 232" in pages[0]
    assert "201-232 of 232" in pages[2]
    assert sorted(seen) == ids and len(seen) == len(set(seen))


def test_the_dead_lane_by_error_class_and_a_bulk_retry_of_the_filtered_set(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    value_errors = make_dead_tasks(conn, 5, error="ValueError: bad row\n  at frame 1")
    timeouts = make_dead_tasks(conn, 3, error="TimeoutError(30)")
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        page = client.get("/dead")
        classes = page.text.split('id="classes"')[1].split("</table>")[0]
        assert re.search(r'href="/dead\?error=ValueError">ValueError</a></td><td>5<', classes)
        assert re.search(r'href="/dead\?error=TimeoutError">TimeoutError</a></td><td>3<', classes)
        filtered = client.get("/dead", params={"error": "ValueError"})
        assert sorted(linked_ids(filtered.text, "dead")) == value_errors
        assert "5 task(s) matching" in filtered.text and 'id="retry-all"' in filtered.text
        token = csrf_field(filtered.text)
        form = {"csrf_token": token, "action": "retry", "match": "all", "error": "ValueError"}
        confirm = client.post("/dead/confirm", data=form)
        assert confirm.status_code == 200 and "Retry 5 DEAD task(s)?" in confirm.text
        assert all(status_of(conn, i) == "FAILED" for i in value_errors), "asking is not doing"
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', confirm.text))
        assert fields["expected"] == "5" and fields["failed_until"]
        # A task failing after the confirmation is not part of what was confirmed.
        later = make_dead_task(conn, error="ValueError: later")
        done = client.post("/dead/apply", data=fields, follow_redirects=True)
        assert done.status_code == 200 and "Done: retry:" in done.text
        assert [status_of(conn, i) for i in value_errors] == ["QUEUED"] * 5
        assert status_of(conn, later) == "FAILED"
        assert [status_of(conn, i) for i in timeouts] == ["FAILED"] * 3
        # The set changed under a confirmation (one left the lane): nothing is done.
        confirm = client.post("/dead/confirm", data={**form, "action": "discard"})
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', confirm.text))
        assert fields["expected"] == "1"
        conn.execute("SELECT pgsched.dead_discard(%s, 'elsewhere')", (later,))
        conflict = client.post("/dead/apply", data=fields)
        assert conflict.status_code == 409 and "you confirmed 1" in conflict.text


def test_search_pages_with_a_total_newest_first_and_by_due_time(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    # Due in pairs at the same second, so a page can end between two tasks due together.
    first_due = datetime.now(UTC) + timedelta(days=3)
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT task_id FROM pgsched.schedule_tasks("
            " task_types => array_fill('paged'::text, ARRAY[120]),"
            " run_ats => ARRAY(SELECT %s::timestamptz + (g / 2) * interval '1 minute'"
            "                  FROM generate_series(0, 119) g))",
            (first_due,),
        ).fetchall()
    ]
    due_from = (first_due - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        for params, counts in [
            ({"type": "paged"}, ["1-50 of 120", "51-100 of 120", "101-120 of 120"]),
            ({"due_from": due_from}, ["1-50 of 120", "51-100 of 120", "101-120 of 120"]),
        ]:
            seen: list[int] = []
            page = client.get("/tasks", params=params)
            for count in counts:
                assert page.status_code == 200, page.text
                assert count in page.text, (params, count)
                seen += linked_ids(page.text, "results")
                url = next_link(page.text)
                if url is None:
                    break
                page = client.get(url)
            assert next_link(page.text) is None
            assert sorted(seen) == sorted(ids) and len(seen) == 120, params
        newest = linked_ids(client.get("/tasks", params={"type": "paged"}).text, "results")
        assert newest == sorted(ids, reverse=True)[:50]


def test_a_search_total_past_the_cap_says_more_than(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('many'::text, ARRAY[10050]),"
        " run_ats => array_fill(now() + interval '2 days', ARRAY[10050]))"
    )
    with running_dashboard(env) as dash:
        page = httpx.get(dash.url + "/tasks", params={"type": "many"})
    assert page.status_code == 200
    assert "1-50 of more than 10,000 task(s)" in page.text


def test_the_task_page_shows_the_traceback_once_formatted_and_escaped(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    error = (
        "ValueError: <b>bad</b> row\n"
        "  at frame_marker_one line 3, in handle\n"
        "    raise ValueError(row)\n"
    )
    task_id = make_dead_task(conn, error=error)
    with running_dashboard(env) as dash:
        page = httpx.get(f"{dash.url}/tasks/{task_id}")
    assert page.status_code == 200
    assert page.text.count("frame_marker_one") == 1, "the traceback is shown more than once"
    shown = page.text.split('id="last-error">')[1].split("</pre>")[0]
    assert shown.startswith("ValueError: &lt;b&gt;bad&lt;/b&gt; row\n  at frame_marker_one")
    assert "<b>bad</b>" not in page.text
    # The timeline and the attempts name the error by its first line.
    timeline = page.text.split('id="timeline"')[1]
    assert "ValueError: &lt;b&gt;bad&lt;/b&gt; row" in timeline


def test_a_long_task_history_pages_with_its_total(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    task_id = make_dead_task(conn)
    # A history longer than a page: events as the transition trigger writes them.
    conn.execute(
        "INSERT INTO pgsched.task_events (task_id, tenant_id, task_type, from_status, to_status,"
        " occurred_at, scheduled_for, attempt, worker, detail)"
        " SELECT %s, 'default', 'send_mail', 'FAILED', 'FAILED', now(), now(), 1, NULL,"
        " 'note ' || g FROM generate_series(1, 150) g",
        (task_id,),
    )
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        first = client.get(f"/tasks/{task_id}")
        assert "events 1-100 of 152" in first.text
        assert first.text.count('class="event"') == 100
        more = re.search(r'href="([^"]+)" id="events-next"', first.text)
        assert more is not None
        second = client.get(more.group(1))
    assert second.status_code == 200
    assert "events 101-152 of 152" in second.text
    assert second.text.count('class="event"') == 52
    assert 'id="events-next"' not in second.text


def test_the_overview_shows_every_tier_coming_due_three_charts_and_reloads(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('future'::text, ARRAY[300]),"
        " run_ats => ARRAY(SELECT now() + interval '30 days' + g * interval '1 minute'"
        "                  FROM generate_series(1, 300) g))"
    )
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('soon'::text, ARRAY[7]),"
        " run_ats => array_fill(now() + interval '20 minutes', ARRAY[7]))"
    )
    make_dead_task(conn)
    # Due three minutes ago and not started: waiting since then, in its lane.
    conn.execute(
        "SELECT pgsched.schedule_task('late', priority => 9,"
        " run_at => now() - interval '3 minutes')"
    )
    conn.execute("ANALYZE pgsched.tasks_cold")
    # The late task waits in each minute from its due minute to the page's: how many that
    # is depends on when the page is drawn (a loaded machine starts the dashboard slowly).
    minutes = (
        "SELECT (extract(epoch FROM date_trunc('minute', now())"
        " - date_trunc('minute', t.next_run_at)) / 60)::int + 1"
        " FROM pgsched.tasks AS t WHERE t.task_type = 'late'"
    )
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        [fewest] = conn.execute(minutes).fetchone() or [None]
        page = client.get("/")
        [most] = conn.execute(minutes).fetchone() or [None]
        still = client.get("/", params={"refresh": "off"})
        # Turned off, it stays off in this browser until turned on again.
        still_after = client.get("/")
        again = client.get("/", params={"refresh": "on"})
        again_after = client.get("/")
        icon = client.get("/favicon.ico")
    assert page.status_code == 200
    tiers = page.text.split('id="tiers"')[1].split("</table>")[0]
    cold = tiers.split('data-tier="cold"')[1].split("</tr>")[0]
    assert "≈ 300" in cold and "estimate" in cold
    for tier in ("hot", "finished", "dead"):
        assert f'data-tier="{tier}"' in tiers
    assert 'id="dead-count">1<' in tiers
    coming = page.text.split('id="coming-due"')[1].split("</p>")[0]
    assert "<strong>7</strong>" in coming
    for chart, bars in (("throughput", 60), ("lateness", 60), ("waiting", 4 * 60)):
        svg = page.text.split(f'<svg id="{chart}"')[1].split("</svg>")[0]
        assert svg.count("<rect") == bars, chart
    # The 7 due in 20 minutes are not waiting, the DEAD task's wait ended when it started:
    # the late one waits, in the HIGH lane, from its due minute to now.
    waiting = page.text.split('<svg id="waiting"')[1].split("</svg>")[0]
    assert "peak 1<" in waiting
    titles = re.findall(r"<title>([^<]*)</title>", waiting)
    assert titles[-4].endswith("(HIGH 1)") and titles[-3].endswith("(NORMAL 0)"), titles[-4:]
    assert fewest is not None and most is not None
    # Its due minute itself may count or not (it was due part of it).
    waited = sum(t.endswith("(HIGH 1)") for t in titles)
    assert fewest - 1 <= waited <= most, (fewest, most, titles)
    assert '<meta http-equiv="refresh" content="30">' in page.text
    assert "http-equiv" not in still.text and 'id="refresh-on"' in still.text
    assert "http-equiv" not in still_after.text
    assert 'http-equiv="refresh"' in again.text and 'http-equiv="refresh"' in again_after.text
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/")
