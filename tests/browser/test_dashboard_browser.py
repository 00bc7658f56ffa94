"""The dashboard in a real headless browser: Debian's chromium, driven by Playwright.

The browser is the system's (/usr/bin/chromium, installed by scripts/setup.sh when root);
Playwright downloads nothing. Without chromium these tests skip and say so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.dashboard_server import (
    env_without_auth,
    make_dead_task,
    make_dead_tasks,
    running_dashboard,
    status_of,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it as root)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def env(db_env: dict[str, str]) -> dict[str, str]:
    return env_without_auth(db_env)


def test_the_overview_loads(browser: object, conn: psycopg.Connection, env: dict[str, str]) -> None:
    make_dead_task(conn)
    with running_dashboard(env) as dash:
        page = browser.new_page()  # type: ignore[attr-defined]
        response = page.goto(dash.url + "/")
        assert response.status == 200
        assert page.title() == "Overview · pgsched"
        assert page.locator("#lanes tbody tr").count() == 4
        assert page.locator("#dead-count").inner_text() == "1"
        assert page.locator("svg#throughput rect").count() == 60
        page.close()


def test_a_dead_task_is_retried_through_the_ui_and_its_event_appears(
    browser: object, conn: psycopg.Connection, env: dict[str, str]
) -> None:
    task_id = make_dead_task(conn, error="smtp refused")
    with running_dashboard(env) as dash:
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(dash.url + "/")
        page.click("text=DEAD lane")
        page.check(f'input[name="task_id"][value="{task_id}"]')
        page.click("#retry-selected")
        assert "Retry 1 DEAD task(s)?" in page.locator("h1").inner_text()
        assert status_of(conn, task_id) == "FAILED"  # not before the confirmation
        page.click("#confirm")
        assert f"retry: {task_id}" in page.locator("#done").inner_text()
        # The task left the DEAD list; find it through the search form.
        page.click("text=Tasks")
        page.fill('input[name="id"]', str(task_id))
        page.click("text=Search")
        page.click(f'#results a[href="/tasks/{task_id}"]')
        page.wait_for_url(f"**/tasks/{task_id}")
        assert page.locator("#task-status").inner_text() == "QUEUED"
        last = page.locator("#timeline tr.event").last
        cells = last.locator("td").all_inner_texts()
        assert cells[2:4] == ["FAILED", "QUEUED"]
        assert "retried from the DEAD lane by" in cells[7] and "via dashboard" in cells[7]
        page.close()
    assert status_of(conn, task_id) == "QUEUED"


def test_a_post_without_the_csrf_token_is_refused(
    browser: object, conn: psycopg.Connection, env: dict[str, str]
) -> None:
    task_id = make_dead_task(conn)
    with running_dashboard(env) as dash:
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(dash.url + "/dead")  # the browser now holds the CSRF cookie
        # The page's own forms, with their hidden token removed before submitting.
        page.evaluate(
            "document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())"
        )
        page.check(f'input[name="task_id"][value="{task_id}"]')
        with page.expect_navigation() as nav:
            page.click("#retry-selected")
        assert nav.value.status == 403
        assert "CSRF" in page.locator("#error").inner_text()
        # The same from script, as a forged cross-site form would send it.
        status = page.evaluate(
            """async (id) => (await fetch('/dead/apply', {method: 'POST',
                 headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                 body: 'action=retry&task_id=' + id})).status""",
            task_id,
        )
        assert status == 403
        page.close()
    assert status_of(conn, task_id) == "FAILED"


def test_a_remote_bind_without_auth_is_refused(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pgsched", "dashboard", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "PGSCHED_DASHBOARD_TOKEN_HASH" in result.stderr


PAGES = ["/", "/tasks?type=send_mail", "/dead", "/schedules", "/tenants", "/workers"]


def test_no_page_asks_for_anything_missing_not_even_a_favicon(
    browser: object, conn: psycopg.Connection, env: dict[str, str]
) -> None:
    task_id = make_dead_task(conn)
    with running_dashboard(env) as dash:
        context = browser.new_context()  # type: ignore[attr-defined]
        missing: list[str] = []
        context.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
        page = context.new_page()
        for path in [*PAGES, f"/tasks/{task_id}"]:
            assert page.goto(dash.url + path).status == 200, path
        page.wait_for_load_state("networkidle")
        icon = page.request.get(dash.url + "/favicon.ico")
        context.close()
    assert icon.status == 200
    assert missing == []


def test_the_overview_charts_keep_their_labels_inside_and_off_the_bars(
    browser: object, conn: psycopg.Connection, env: dict[str, str]
) -> None:
    # Completions in the current minute only: the tallest bar stands at the right edge,
    # under where a chart's peak label goes.
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill('x'::text, ARRAY[40]), run_ats => array_fill(now(), ARRAY[40]))"
    )
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 40, 'w', '1 minute')"
    ).fetchall()
    conn.execute(
        "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s)",
        ([r[0] for r in claimed], [r[1] for r in claimed], ["COMPLETED"] * len(claimed)),
    )
    with running_dashboard(env) as dash:
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(dash.url + "/?refresh=off")
        problems = page.evaluate(
            """() => {
              const out = [];
              for (const svg of document.querySelectorAll('main svg')) {
                const w = svg.width.baseVal.value, h = svg.height.baseVal.value;
                const bars = [...svg.querySelectorAll('rect')].map(r => r.getBBox())
                  .filter(b => b.height > 0);
                for (const t of svg.querySelectorAll('text')) {
                  const b = t.getBBox();
                  if (b.x < 0 || b.y < 0 || b.x + b.width > w || b.y + b.height > h)
                    out.push(svg.id + ': "' + t.textContent + '" runs outside '
                             + JSON.stringify([b.x, b.y, b.width, b.height, w, h]));
                  for (const r of bars)
                    if (b.x < r.x + r.width && r.x < b.x + b.width
                        && b.y < r.y + r.height && r.y < b.y + b.height) {
                      out.push(svg.id + ': "' + t.textContent + '" lies on a bar');
                      break;
                    }
                }
              }
              return out;
            }"""
        )
        charts = page.locator("main svg").count()
        page.close()
    assert charts >= 1
    assert problems == []


def test_select_all_ticks_the_page_and_the_confirmation_counts_them(
    browser: object, conn: psycopg.Connection, env: dict[str, str]
) -> None:
    ids = make_dead_tasks(conn, 7)
    with running_dashboard(env) as dash:
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(dash.url + "/dead")
        page.check("#select-page")
        page.click("#retry-selected")
        assert "Retry 7 DEAD task(s)?" in page.locator("h1").inner_text()
        page.click("#confirm")
        assert "retry:" in page.locator("#done").inner_text()
        page.close()
    assert [status_of(conn, i) for i in ids] == ["QUEUED"] * 7
