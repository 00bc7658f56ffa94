"""The dashboard's web application: pages, the forms that change state, and their guards.

Reads run on the read pool (a read-only role via --read-dsn, and read-only transactions in
any case); writes run on the write pool, one transaction per form, through the same SQL
functions as the CLI (`dead_retry`, `dead_discard`, `cancel_task`, `schedule_pause`,
`schedule_resume`, `schedule_delete`). Who did it is written into the reason those functions
record on the event (see `actor_of`).

Every query-string and form value is checked before it reaches Postgres (`BadInput`, 400
with the field named): ids are positive bigints in ASCII digits, text holds no NUL and at
most MAX_TEXT characters, times are ISO dates whose UTC is a real time.
"""

from __future__ import annotations

import asyncio
import getpass
import math
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from pgsched.cron import CronError, parse
from pgsched.dashboard.security import CSRF_COOKIE, CSRF_FIELD, CsrfTokens, TokenAuth
from pgsched.pools import PromptAsyncPool
from pgsched.queries import query

HERE = Path(__file__).resolve().parent
LANES = ("HIGH", "NORMAL", "LOW", "BATCH")
STATUSES = ("PENDING", "QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED")
SEARCH_ROWS = 50
LIST_ROWS = 200
DEAD_ROWS = 100
EVENT_ROWS = 100
# Counts stop here: counting a type's two million cold tasks to print one number would
# cost more than the page. "more than 10,000" is all a reader needs past that.
COUNT_CAP = 10_000
# One confirmation retries or discards at most this many (one transaction).
BULK_MAX = 10_000
COMING_DUE_CAP = 100_000
# The missed deadlines the overview names (the newest; the total is counted).
DEADLINE_MISSES_SHOWN = 10
BIGINT_MAX = 2**63 - 1
MAX_TEXT = 1_000
REFRESH_S = 30
REFRESH_COOKIE = "pgsched_refresh"
SCHEDULE_DONE = {"pause": "paused", "resume": "resumed", "delete": "deleted"}
FAVICON = (HERE / "static" / "favicon.svg").read_bytes()
STATIC_CACHE = {"Cache-Control": "public, max-age=86400"}


@dataclass(frozen=True)
class DashboardConfig:
    dsn: str
    read_dsn: str | None = None
    read_only: bool = False
    auth: TokenAuth | None = None
    secret: str | None = None
    pool_size: int = 4


class BadInput(ValueError):
    """A search or form field the dashboard cannot use; the page names the field."""


def actor_of(request: Request) -> str:
    """Who is acting: the authenticated user, else the local account running the server."""
    user = getattr(request.state, "user", None)
    return f"{user} via dashboard" if user else f"{getpass.getuser()} (local) via dashboard"


def _fmt_time(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def _fmt_seconds(value: Any) -> str:
    if value is None:
        return "-"
    seconds = float(value)
    if abs(seconds) < 1:
        return f"{seconds * 1000:.0f} ms"
    if abs(seconds) < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def bar_chart(
    rows: list[dict[str, Any]],
    keys: tuple[str, ...],
    label: str,
    fmt: Callable[[Any], str] = str,
    width: int = 600,
    height: int = 120,
) -> dict[str, Any]:
    """Bar geometry of one of the overview's inline SVG charts: one bar a minute, the
    values of `keys` stacked in it. The drawing area leaves room above for the peak label
    and below for the time axis, and the right-hand labels end inside the right edge, so
    no label runs past the SVG or over a bar."""
    top, axis = 18, 18
    area = height - top
    totals = [
        None if all(r[k] is None for k in keys) else sum(float(r[k] or 0) for k in keys)
        for r in rows
    ]
    peak = max((v for v in totals if v is not None), default=0.0)
    step = width / max(len(rows), 1)
    bars = []
    for i, (r, total) in enumerate(zip(rows, totals, strict=True)):
        base = float(top + area)
        segments = []
        for k in keys:
            v = float(r[k] or 0)
            h = 0.0 if v <= 0 or peak <= 0 else max(math.ceil(v / peak * area), 1)
            base -= h
            segments.append({"y": round(base, 1), "h": h, "cls": k, "value": fmt(v)})
        shown = fmt(total) if total is not None else "-"
        bars.append(
            {
                "x": round(i * step, 1),
                "w": round(max(step - 1, 1), 1),
                "segments": segments,
                "title": f"{_fmt_time(r['minute'])}: {shown}",
            }
        )
    return {
        "width": width,
        "height": height,
        "full_height": height + axis,
        "peak": fmt(peak),
        "label": label,
        "bars": bars,
        "stacked": len(keys) > 1,
    }


def _plain(value: Any) -> str:
    return f"{int(value):,}"


class Database:
    """The two pools: reads (read-only transactions) and writes."""

    def __init__(self, config: DashboardConfig) -> None:
        reader_options = "-c default_transaction_read_only=on -c plan_cache_mode=force_custom_plan"
        self.reads = PromptAsyncPool(
            config.read_dsn or config.dsn,
            min_size=1,
            max_size=config.pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, "options": reader_options},
            open=False,
        )
        self.writes: AsyncConnectionPool | None = None
        if not config.read_only:
            self.writes = PromptAsyncPool(
                config.dsn,
                min_size=0,
                max_size=2,
                kwargs={"row_factory": dict_row},
                open=False,
            )

    async def open(self) -> None:
        await self.reads.open()
        if self.writes is not None:
            await self.writes.open()

    async def close(self) -> None:
        await self.reads.close()
        if self.writes is not None:
            await self.writes.close()

    async def rows(
        self, name: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        async with self.reads.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query(name), params or {})
            return await cur.fetchall()

    async def row(
        self, name: str, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        found = await self.rows(name, params)
        return found[0] if found else None


def clean_text(field: str, value: str | None) -> str | None:
    """A free-text field, stripped; None when empty. Postgres text holds no NUL."""
    value = (value or "").strip()
    if not value:
        return None
    if "\x00" in value:
        raise BadInput(f"{field}: contains a NUL character")
    if len(value) > MAX_TEXT:
        raise BadInput(f"{field}: longer than {MAX_TEXT:,} characters")
    return value


def parse_id(field: str, text: str | None, what: str = "a task id") -> int:
    """A positive bigint written in ASCII digits (int() would take '1_000' and '١٢٣')."""
    value = (text or "").strip()
    if not re.fullmatch(r"[0-9]{1,19}", value) or not 1 <= int(value) <= BIGINT_MAX:
        raise BadInput(f"{field}: not {what} ({value[:40]!r})")
    return int(value)


def parse_page(field: str, text: str | None) -> int:
    value = (text or "").strip()
    if not value:
        return 1
    if not re.fullmatch(r"[0-9]{1,7}", value) or int(value) < 1:
        raise BadInput(f"{field}: not a page number ({value[:40]!r})")
    return int(value)


def _parse_time(field: str, text: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        value.astimezone(UTC)  # a time whose UTC falls outside years 1-9999
    except (ValueError, OverflowError):
        raise BadInput(
            f"{field}: not a date and time ({text[:40]!r}); use e.g. 2026-12-24T09:00"
        ) from None
    return value


def search_filters(params: Mapping[str, str]) -> dict[str, Any]:
    """The task search's filters from the query string; BadInput names a bad field."""

    def text(name: str) -> str | None:
        return clean_text(name, params.get(name))

    task_id = parse_id("id", text("id")) if text("id") else None
    status = text("status")
    if status is not None and status.upper() not in STATUSES:
        raise BadInput(f"status: {status[:40]!r} is not one of {', '.join(STATUSES)}")
    filters: dict[str, Any] = {
        "task_id": task_id,
        "task_type": text("type"),
        "tenant_id": text("tenant"),
        "status": status.upper() if status else None,
        "idempotency_key": text("key"),
        "due_from": _parse_time("due_from", text("due_from") or ""),
        "due_until": _parse_time("due_until", text("due_until") or ""),
    }
    filters.update(search_cursor(text("after"), filters))
    return filters


def search_cursor(after: str | None, filters: Mapping[str, Any]) -> dict[str, Any]:
    """Where the next page starts: after the last row shown. Newest first (by id), the
    cursor is that row's id; with a due range (earliest due first) its due time and id."""
    cursor: dict[str, Any] = {"before_id": None, "after_due": None, "after_id": None}
    if after is None:
        return cursor
    if filters["due_from"] is None and filters["due_until"] is None:
        cursor["before_id"] = parse_id("after", after)
        return cursor
    due, _, last_id = after.rpartition(",")
    cursor["after_due"] = _parse_time("after", due) if due else None
    cursor["after_id"] = parse_id("after", last_id)
    if cursor["after_due"] is None:
        raise BadInput("after: a due-range page starts after a due time and an id")
    return cursor


def _ids(form: FormData, field: str = "task_id") -> list[int]:
    values = [str(v) for v in form.getlist(field) if str(v).strip()]
    try:
        ids = sorted({parse_id(field, v) for v in values})
    except BadInput:
        raise BadInput(f"{field}: every value must be a task id") from None
    if not ids:
        raise BadInput(f"{field}: select at least one task")
    if len(ids) > BULK_MAX:
        raise BadInput(f"{field}: at most {BULK_MAX:,} tasks at a time")
    return ids


def dead_filters(params: Mapping[str, Any]) -> dict[str, Any]:
    """The DEAD lane's filters (a query string or a bulk form): type and error class."""
    return {
        "task_type": clean_text("type", _str(params.get("type"))),
        "error_class": clean_text("error", _str(params.get("error"))),
    }


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def first_line(text: str | None, limit: int = 160) -> str:
    """The first line of an error: its class and message, without the traceback."""
    if not text:
        return ""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


class AuthMiddleware(BaseHTTPMiddleware):
    """HTTP Basic on every request when a token is configured."""

    def __init__(self, app: Any, auth: TokenAuth | None) -> None:
        super().__init__(app)
        self.auth = auth

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        request.state.user = None
        if self.auth is not None:
            user = self.auth.user_for(request.headers.get("authorization"))
            if user is None:
                return PlainTextResponse(
                    "authentication required",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="pgsched", charset="UTF-8"'},
                )
            request.state.user = user
        return await call_next(request)


def create_app(config: DashboardConfig) -> Starlette:
    db = Database(config)
    csrf = CsrfTokens(config.secret)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["time"] = _fmt_time
    templates.env.filters["seconds"] = _fmt_seconds
    templates.env.globals["read_only"] = config.read_only
    templates.env.globals["CSRF_FIELD"] = CSRF_FIELD

    def render(
        request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        cookie = request.cookies.get(CSRF_COOKIE)
        token = csrf.token_in(cookie)
        new_cookie = None
        if token is None:
            token, new_cookie = csrf.new()
        context = {**context, "csrf_token": token, "user": actor_of(request)}
        response = templates.TemplateResponse(request, name, context, status_code=status_code)
        if new_cookie is not None:
            response.set_cookie(CSRF_COOKIE, new_cookie, httponly=True, samesite="strict", path="/")
        return response

    async def write_form(request: Request) -> FormData:
        """The form of a state-changing request, once it passed the guards."""
        if config.read_only or db.writes is None:
            raise HTTPException(403, "the dashboard runs read-only")
        form = await request.form()
        submitted = form.get(CSRF_FIELD)
        if not csrf.matches(
            request.cookies.get(CSRF_COOKIE), submitted if isinstance(submitted, str) else None
        ):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and retry")
        return form

    async def write(name: str, params_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run one named statement per params, all in one transaction."""
        assert db.writes is not None
        results: list[dict[str, Any]] = []
        async with db.writes.connection() as conn, conn.transaction():
            for params in params_list:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query(name), params)
                results.extend(await cur.fetchall())
        return results

    async def overview(request: Request) -> Response:
        # Reloading is on unless turned off, and stays off for this browser (a cookie)
        # until turned on again.
        refresh_text = request.query_params.get("refresh", "").strip()
        if refresh_text not in ("", "0", "off", "on"):
            raise BadInput(f"refresh: off (or 0) or on ({refresh_text[:40]!r})")
        if refresh_text == "":
            reloading = request.cookies.get(REFRESH_COOKIE) != "off"
        else:
            reloading = refresh_text == "on"
        refresh = REFRESH_S if reloading else 0
        # Independent reads: on the pool's connections at once.
        live_rows, recent_rows, dead, minutes, tiers, coming = await asyncio.gather(
            db.rows("dashboard_lanes_live"),
            db.rows("dashboard_lanes_recent"),
            db.row("dashboard_dead_count"),
            db.rows("dashboard_throughput"),
            db.row("dashboard_tiers"),
            db.row("dashboard_coming_due", {"cap": COMING_DUE_CAP + 1}),
        )
        # One read more than gather's typed six; few rows, off a partial index.
        misses = await db.rows("dashboard_deadline_misses", {"max_rows": DEADLINE_MISSES_SHOWN})
        live = {r["lane"]: r for r in live_rows}
        recent = {}
        for r in recent_rows:
            p50, p99 = r.pop("lateness_s") or (None, None)
            recent[r["lane"]] = {**r, "lateness_p50_s": p50, "lateness_p99_s": p99}
        empty = dict.fromkeys(("oldest_due_s", "lateness_p50_s", "lateness_p99_s"))
        lanes = [
            {"lane": lane, **empty, **live.get(lane, {}), **recent.get(lane, {})} for lane in LANES
        ]
        hot = sum(int(r["queued"]) + int(r["processing"]) for r in live_rows)
        charts = [
            ("throughput", bar_chart(minutes, ("completed",), "completed per minute", _plain)),
            (
                "lateness",
                bar_chart(minutes, ("lateness_p99_s",), "lateness p99 per minute", _fmt_seconds),
            ),
            (
                "waiting",
                bar_chart(
                    minutes,
                    tuple(f"waiting_{lane.lower()}" for lane in LANES),
                    "due and waiting at the end of each minute, per lane",
                    _plain,
                ),
            ),
        ]
        coming_n = int(coming["coming"]) if coming else 0
        response = render(
            request,
            "overview.html",
            {
                "lanes": lanes,
                "dead": dead["dead"] if dead else 0,
                "charts": charts,
                "tiers": {
                    "hot": hot,
                    "cold": tiers["cold_estimate"] if tiers else None,
                    "finished": tiers["finished_estimate"] if tiers else None,
                },
                "coming_due": coming_n,
                "coming_capped": coming_n > COMING_DUE_CAP,
                "coming_cap": COMING_DUE_CAP,
                "deadline_misses": misses,
                "deadline_misses_total": int(misses[0]["total"]) if misses else 0,
                "refresh": refresh,
            },
        )
        if refresh_text in ("0", "off"):
            response.set_cookie(REFRESH_COOKIE, "off", samesite="strict", path="/")
        elif refresh_text == "on":
            response.delete_cookie(REFRESH_COOKIE, path="/")
        return response

    async def favicon(request: Request) -> Response:
        return Response(FAVICON, media_type="image/svg+xml", headers=STATIC_CACHE)

    async def tasks(request: Request) -> Response:
        params = dict(request.query_params)
        try:
            filters = search_filters(params)
            page = parse_page("page", params.get("page"))
        except BadInput as exc:
            return render(
                request,
                "tasks.html",
                {"rows": [], "error": str(exc), "params": params, "statuses": STATUSES},
                status_code=400,
            )
        cursor_keys = ("before_id", "after_due", "after_id")
        searched = any(v is not None for k, v in filters.items() if k not in cursor_keys)
        rows: list[dict[str, Any]] = []
        total: int | None = None
        if searched:
            found, counted = await asyncio.gather(
                db.rows("dashboard_task_search", {**filters, "max_rows": SEARCH_ROWS + 1}),
                db.row(
                    "dashboard_task_count",
                    {**filters, **dict.fromkeys(cursor_keys), "cap": COUNT_CAP + 1},
                ),
            )
            rows = found[:SEARCH_ROWS]
            total = int(counted["n"]) if counted else 0
            next_after = None
            if len(found) > SEARCH_ROWS:
                last = rows[-1]
                ranged = filters["due_from"] is not None or filters["due_until"] is not None
                next_after = (
                    f"{last['next_run_at'].isoformat()},{last['id']}" if ranged else str(last["id"])
                )
        kept = {k: v for k, v in params.items() if k not in ("after", "page") and v}
        return render(
            request,
            "tasks.html",
            {
                "rows": rows,
                "params": params,
                "statuses": STATUSES,
                "searched": searched,
                "limit": SEARCH_ROWS,
                "page": page,
                "first": (page - 1) * SEARCH_ROWS + 1,
                "total": total,
                "capped": total is not None and total > COUNT_CAP,
                "cap": COUNT_CAP,
                "next_url": (
                    "/tasks?" + urlencode({**kept, "after": next_after, "page": page + 1})
                    if searched and next_after
                    else None
                ),
                "first_url": "/tasks?" + urlencode(kept) if page > 1 else None,
            },
        )

    def path_id(request: Request, name: str = "task_id", what: str = "a task id") -> int:
        return parse_id(name, str(request.path_params[name]), what)

    async def task(request: Request) -> Response:
        task_id = path_id(request)
        after = request.query_params.get("events_after", "").strip()
        events_after = parse_id("events_after", after, "an event id") if after else 0
        row, events, outcomes, counted, graph, batch = await asyncio.gather(
            db.row("dashboard_task", {"task_id": task_id}),
            db.rows(
                "dashboard_task_events",
                {"task_id": task_id, "after_id": events_after, "max_rows": EVENT_ROWS + 1},
            ),
            db.rows("dashboard_task_outcomes", {"task_id": task_id}),
            db.row("dashboard_task_event_count", {"task_id": task_id, "after_id": events_after}),
            db.rows("dashboard_task_graph", {"task_id": task_id}),
            db.row("dashboard_task_batch", {"task_id": task_id}),
        )
        if row is None:
            raise HTTPException(404, f"no task {task_id}")
        more = len(events) > EVENT_ROWS
        events = events[:EVENT_ROWS]
        attempts = _attempts(events)
        last_error = row["last_error"] or ""
        for item in [*events, *attempts]:
            detail = item["detail"] or ""
            item["summary"] = first_line(detail)
            # Each traceback once: the last error in full above, an earlier attempt's
            # different one in the timeline, folded.
            multiline = "\n" in detail.strip()
            item["full"] = detail if multiline and detail != last_error else None
        for a in attempts:
            a["full"] = None
        total = int(counted["before"]) + int(counted["rest"]) if counted else len(events)
        return render(
            request,
            "task.html",
            {
                "task": row,
                "status_reason_line": first_line(row["status_reason"]),
                "events": events,
                "attempts": attempts,
                "outcomes": outcomes,
                "parents": [g for g in graph if g["relation"] == "parent"],
                "children": [g for g in graph if g["relation"] == "child"],
                "batch": batch,
                "events_first": int(counted["before"]) + 1 if counted else 1,
                "events_total": total,
                "events_next": events[-1]["id"] if more else None,
                "events_paged": bool(events_after),
            },
        )

    async def task_cancel_confirm(request: Request) -> Response:
        """Asking is not doing: what a cancel would do, and the form that does it."""
        if config.read_only or db.writes is None:
            raise HTTPException(403, "the dashboard runs read-only")
        task_id = path_id(request)
        row = await db.row("dashboard_task", {"task_id": task_id})
        if row is None:
            raise HTTPException(404, f"no task {task_id}")
        return render(request, "cancel_confirm.html", {"task": row})

    async def task_cancel(request: Request) -> Response:
        form = await write_form(request)
        task_id = path_id(request)
        reason = clean_text("reason", _str(form.get("reason"))) or "cancelled"
        try:
            await write(
                "dashboard_task_cancel",
                [{"task_id": task_id, "reason": reason, "actor": actor_of(request)}],
            )
        except psycopg.Error as exc:
            return _refused(request, render, exc, f"/tasks/{task_id}")
        return RedirectResponse(f"/tasks/{task_id}", status_code=303)

    async def dead(request: Request) -> Response:
        params = request.query_params
        filters = dead_filters(params)
        page = parse_page("page", params.get("page"))
        done = clean_text("done", params.get("done")) or ""
        rows, counted, classes = await asyncio.gather(
            db.rows(
                "dashboard_dead_list",
                {**filters, "max_rows": DEAD_ROWS, "skip_rows": (page - 1) * DEAD_ROWS},
            ),
            db.row("dashboard_dead_matching", {**filters, "cap": COUNT_CAP + 1}),
            db.rows("dashboard_dead_classes", {"task_type": filters["task_type"], "max_rows": 50}),
        )
        total = int(counted["n"]) if counted else 0
        kept = {
            k: v
            for k, v in (("type", filters["task_type"]), ("error", filters["error_class"]))
            if v
        }
        shown_to = (page - 1) * DEAD_ROWS + len(rows)
        for r in rows:
            r["summary"] = first_line(r["last_error"], 100)
        return render(
            request,
            "dead.html",
            {
                "rows": rows,
                "total": total,
                "capped": total > COUNT_CAP,
                "cap": COUNT_CAP,
                "bulk_max": BULK_MAX,
                "classes": classes,
                "task_type": filters["task_type"] or "",
                "error_class": filters["error_class"] or "",
                "filtered": bool(kept),
                "done": done,
                "page": page,
                "first": (page - 1) * DEAD_ROWS + 1,
                "last": shown_to,
                "next_url": (
                    "/dead?" + urlencode({**kept, "page": page + 1}) if shown_to < total else None
                ),
                "prev_url": (
                    "/dead?" + urlencode({**kept, "page": page - 1}) if page > 1 else None
                ),
                "class_query": {"type": filters["task_type"]} if filters["task_type"] else {},
            },
        )

    async def dead_selection(request: Request) -> tuple[str, dict[str, Any]]:
        """What a DEAD-lane form posts, once past the write guards: the action and either
        the task ids ticked or a filter (every DEAD task of a type and an error class), so
        the confirmation page and the apply step read the same form."""
        form = await write_form(request)
        action = str(form.get("action") or "")
        if action not in ("retry", "discard"):
            raise BadInput("action: must be retry or discard")
        if form.get("match") is None:
            return action, {"ids": _ids(form)}
        if form.get("match") != "all":
            raise BadInput("match: must be all")
        selection: dict[str, Any] = dead_filters(form)
        until = clean_text("failed_until", _str(form.get("failed_until")))
        selection["failed_until"] = _parse_time("failed_until", until) if until else None
        expected = clean_text("expected", _str(form.get("expected")))
        selection["expected"] = parse_id("expected", expected, "a count") if expected else None
        return action, selection

    async def dead_confirm(request: Request) -> Response:
        action, selection = await dead_selection(request)
        if "ids" in selection:
            return render(
                request,
                "dead_confirm.html",
                {"action": action, "ids": selection["ids"], "count": len(selection["ids"])},
            )
        counted = await db.row(
            "dashboard_dead_matching",
            {
                "task_type": selection["task_type"],
                "error_class": selection["error_class"],
                "cap": BULK_MAX + 1,
            },
        )
        count = int(counted["n"]) if counted else 0
        if count == 0:
            raise BadInput("no DEAD task matches the filter")
        if count > BULK_MAX:
            raise BadInput(
                f"more than {BULK_MAX:,} DEAD tasks match: narrow the filter (by type or error"
                " class), or use `pgsched dead retry --type`"
            )
        return render(
            request,
            "dead_confirm.html",
            {
                "action": action,
                "ids": [],
                "count": count,
                "match": selection,
                "failed_until": counted["last_failed"].isoformat() if counted else "",
            },
        )

    async def dead_apply(request: Request) -> Response:
        action, selection = await dead_selection(request)
        actor = actor_of(request)
        name, verb = (
            ("dashboard_dead_retry", "retried from the DEAD lane")
            if action == "retry"
            else ("dashboard_dead_discard", "discarded from the DEAD lane")
        )
        assert db.writes is not None
        reason = f"{verb} by {actor}"
        try:
            async with db.writes.connection() as conn, conn.transaction():
                cur = conn.cursor(row_factory=dict_row)
                ids = selection.get("ids")
                if ids is None:
                    if selection["failed_until"] is None or selection["expected"] is None:
                        raise BadInput("failed_until and expected: confirm the filter first")
                    await cur.execute(
                        query("dashboard_dead_matching_ids"),
                        {
                            "task_type": selection["task_type"],
                            "error_class": selection["error_class"],
                            "failed_until": selection["failed_until"],
                            "cap": BULK_MAX + 1,
                        },
                    )
                    ids = [r["id"] for r in await cur.fetchall()]
                    if len(ids) != selection["expected"]:
                        return _conflict(
                            request,
                            render,
                            f"the DEAD lane changed since the confirmation: {len(ids):,} of"
                            f" these tasks are still DEAD, you confirmed {selection['expected']:,}."
                            " Nothing changed; review the list again.",
                            "/dead",
                        )
                await cur.execute(query(name), {"task_ids": ids, "reason": reason})
                changed = [r["task_id"] for r in await cur.fetchall()]
        except psycopg.Error as exc:
            return _refused(request, render, exc, "/dead")
        shown = " ".join(map(str, changed[:20]))
        more = f" … ({len(changed):,} in all)" if len(changed) > 20 else ""
        done = f"{action}: {shown}{more}"
        return RedirectResponse("/dead?" + urlencode({"done": done}), status_code=303)

    async def schedules(request: Request) -> Response:
        rows = await db.rows("dashboard_schedules", {"max_rows": LIST_ROWS})
        last = await db.rows(
            "dashboard_schedule_last_runs", {"schedule_ids": [r["id"] for r in rows]}
        )
        now = datetime.now(UTC)
        for r in rows:
            r["last_runs"] = [x for x in last if x["schedule_id"] == r["id"]]
            r["next_fires"] = _next_fires(r["cron_expression"], r["timezone"], now)
        return render(request, "schedules.html", {"rows": rows})

    def schedule_verb(request: Request, allowed: tuple[str, ...]) -> tuple[int, str]:
        verb = str(request.path_params["verb"])
        if verb not in allowed:
            raise HTTPException(404, f"no such action on a schedule: {verb[:40]!r}")
        return path_id(request, "schedule_id", "a schedule id"), verb

    async def schedule_confirm(request: Request) -> Response:
        """Pause and delete cancel the occurrence armed for the schedule: asked first."""
        if config.read_only or db.writes is None:
            raise HTTPException(403, "the dashboard runs read-only")
        schedule_id, verb = schedule_verb(request, ("pause", "delete"))
        row = await db.row("dashboard_schedule", {"schedule_id": schedule_id})
        if row is None:
            raise HTTPException(404, f"no schedule {schedule_id}")
        return render(request, "schedule_confirm.html", {"s": row, "verb": verb})

    async def schedule_change(request: Request) -> Response:
        schedule_id, verb = schedule_verb(request, ("pause", "resume", "delete"))
        await write_form(request)
        assert db.writes is not None
        # actor_of already ends in "via dashboard".
        detail = f"{SCHEDULE_DONE[verb]} by {actor_of(request)}"
        params = {"schedule_id": schedule_id, "reason": detail, "detail": detail}
        try:
            async with db.writes.connection() as conn, conn.transaction():
                await conn.execute(query(f"dashboard_schedule_{verb}"), params)
                if verb == "resume":
                    await conn.execute(query("dashboard_schedule_event_actor"), params)
        except psycopg.Error as exc:
            return _refused(request, render, exc, "/schedules")
        return RedirectResponse("/schedules", status_code=303)

    async def tenants(request: Request) -> Response:
        rows = await db.rows("dashboard_tenants", {"max_rows": LIST_ROWS})
        return render(request, "tenants.html", {"rows": rows})

    async def workers(request: Request) -> Response:
        rows = await db.rows("dashboard_workers")
        leases = await db.rows("dashboard_worker_leases", {"max_rows": LIST_ROWS})
        return render(request, "workers.html", {"rows": rows, "leases": leases})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return render(
            request,
            "error.html",
            {"message": exc.detail, "status": exc.status_code},
            status_code=exc.status_code,
        )

    async def bad_input(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", {"message": str(exc), "status": 400}, 400)

    async def data_error(request: Request, exc: Exception) -> Response:
        # Class 22 (data exception): a value Postgres cannot take, which the checks above
        # should have named. Said plainly, without the statement's internals.
        assert isinstance(exc, psycopg.errors.DataError)
        return render(
            request,
            "error.html",
            {
                "message": "a value in the request cannot be used (out of range or malformed)",
                "status": 400,
            },
            400,
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.open()
        try:
            yield
        finally:
            await db.close()

    routes = [
        Route("/", overview),
        Route("/favicon.ico", favicon),
        Route("/tasks", tasks),
        Route("/tasks/{task_id:int}", task),
        Route("/tasks/{task_id:int}/cancel", task_cancel_confirm, methods=["GET"]),
        Route("/tasks/{task_id:int}/cancel", task_cancel, methods=["POST"]),
        Route("/dead", dead),
        Route("/dead/confirm", dead_confirm, methods=["POST"]),
        Route("/dead/apply", dead_apply, methods=["POST"]),
        Route("/schedules", schedules),
        Route("/schedules/{schedule_id:int}/{verb:str}", schedule_confirm, methods=["GET"]),
        Route("/schedules/{schedule_id:int}/{verb:str}", schedule_change, methods=["POST"]),
        Route("/tenants", tenants),
        Route("/workers", workers),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(AuthMiddleware, auth=config.auth)],
        exception_handlers={
            HTTPException: http_error,
            BadInput: bad_input,
            psycopg.errors.DataError: data_error,
        },
        lifespan=lifespan,
    )


def _attempts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per attempt: its start (the claim) and how it ended (the next event out of
    PROCESSING). A cancel request or a stale report changes no status: neither starts
    nor ends an attempt."""
    attempts: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        if e["to_status"] != "PROCESSING" or e["from_status"] == "PROCESSING":
            continue
        end = next(
            (
                x
                for x in events[i + 1 :]
                if x["from_status"] == "PROCESSING" and x["to_status"] != "PROCESSING"
            ),
            None,
        )
        attempts.append(
            {
                "attempt": e["attempt"],
                "worker": e["worker"],
                "started_at": e["occurred_at"],
                "lateness_s": (e["occurred_at"] - e["scheduled_for"]).total_seconds(),
                "finished_at": end["occurred_at"] if end else None,
                "outcome": _outcome(end),
                "detail": end["detail"] if end else None,
            }
        )
    return attempts


def _outcome(end: dict[str, Any] | None) -> str:
    if end is None:
        return "RUNNING"
    # PROCESSING -> QUEUED/PENDING is a retry after a failure (or a release).
    to_status = str(end["to_status"])
    return "RETRIED" if to_status in ("QUEUED", "PENDING") else to_status


def _next_fires(expression: str, zone: str, now: datetime, count: int = 3) -> list[str]:
    try:
        schedule = parse(expression, zone)
    except CronError as exc:
        return [f"invalid: {exc}"]
    fires = []
    at = now
    tz = ZoneInfo(zone)
    for _ in range(count):
        at = schedule.next_fire(at)
        fires.append(at.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z"))
    return fires


def _refused(
    request: Request, render: Callable[..., Response], exc: psycopg.Error, back: str
) -> Response:
    message = exc.diag.message_primary or str(exc)
    return _conflict(request, render, f"refused, nothing changed: {message}", back)


def _conflict(
    request: Request, render: Callable[..., Response], message: str, back: str
) -> Response:
    return render(
        request,
        "error.html",
        {"message": message, "status": 409, "back": back},
        status_code=409,
    )


__all__ = ["DashboardConfig", "create_app"]
