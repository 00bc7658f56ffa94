"""The dashboard's web application: pages, the forms that change state, and their guards.

Reads run on the read pool (a read-only role via --read-dsn, and read-only transactions in
any case); writes run on the write pool, one transaction per form, through the same SQL
functions as the CLI (`dead_retry`, `dead_discard`, `cancel_task`, `schedule_pause`,
`schedule_resume`). Who did it is written into the reason those functions record on the
event (see `actor_of`).
"""

from __future__ import annotations

import getpass
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
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
from pgsched.queries import query

HERE = Path(__file__).resolve().parent
LANES = ("HIGH", "NORMAL", "LOW", "BATCH")
STATUSES = ("PENDING", "QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED")
SEARCH_ROWS = 50
LIST_ROWS = 200


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


def throughput_bars(
    rows: list[dict[str, Any]], width: int = 600, height: int = 120
) -> dict[str, Any]:
    """Bar geometry for the overview's inline SVG chart (completions per minute)."""
    peak = max((int(r["completed"]) for r in rows), default=0)
    bar = width / max(len(rows), 1)
    bars = []
    for i, r in enumerate(rows):
        count = int(r["completed"])
        h = 0.0 if peak == 0 else math.ceil(count / peak * (height - 4))
        bars.append(
            {
                "x": round(i * bar, 1),
                "y": round(height - h, 1),
                "w": round(max(bar - 1, 1), 1),
                "h": h,
                "title": f"{_fmt_time(r['minute'])}: {count}",
            }
        )
    return {"width": width, "height": height, "peak": peak, "bars": bars}


class Database:
    """The two pools: reads (read-only transactions) and writes."""

    def __init__(self, config: DashboardConfig) -> None:
        reader_options = "-c default_transaction_read_only=on -c plan_cache_mode=force_custom_plan"
        self.reads = AsyncConnectionPool(
            config.read_dsn or config.dsn,
            min_size=1,
            max_size=config.pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, "options": reader_options},
            open=False,
        )
        self.writes: AsyncConnectionPool | None = None
        if not config.read_only:
            self.writes = AsyncConnectionPool(
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


def _parse_time(field: str, text: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(
            f"{field}: not a date and time ({text!r}); use e.g. 2026-12-24T09:00"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def search_filters(params: Mapping[str, str]) -> dict[str, Any]:
    """The task search's filters from the query string; BadInput names a bad field."""

    def text(name: str) -> str | None:
        value = params.get(name, "").strip()
        return value or None

    task_id: int | None = None
    if text("id"):
        try:
            task_id = int(text("id") or "")
        except ValueError:
            raise BadInput(f"id: not a task id ({text('id')!r})") from None
    status = text("status")
    if status is not None and status.upper() not in STATUSES:
        raise BadInput(f"status: {status!r} is not one of {', '.join(STATUSES)}")
    return {
        "task_id": task_id,
        "task_type": text("type"),
        "tenant_id": text("tenant"),
        "status": status.upper() if status else None,
        "idempotency_key": text("key"),
        "due_from": _parse_time("due_from", text("due_from") or ""),
        "due_until": _parse_time("due_until", text("due_until") or ""),
        "max_rows": SEARCH_ROWS,
    }


def _ids(form: FormData, field: str = "task_id") -> list[int]:
    try:
        ids = sorted({int(str(v)) for v in form.getlist(field) if str(v).strip()})
    except ValueError:
        raise BadInput(f"{field}: every value must be a task id") from None
    if not ids:
        raise BadInput(f"{field}: select at least one task")
    return ids


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
        live = {r["lane"]: r for r in await db.rows("dashboard_lanes_live")}
        recent = {r["lane"]: r for r in await db.rows("dashboard_lanes_recent")}
        empty = dict.fromkeys(("oldest_due_s", "lateness_p50_s", "lateness_p99_s"))
        lanes = [
            {"lane": lane, **empty, **live.get(lane, {}), **recent.get(lane, {})} for lane in LANES
        ]
        dead = await db.row("dashboard_dead_count")
        chart = throughput_bars(await db.rows("dashboard_throughput"))
        return render(
            request,
            "overview.html",
            {"lanes": lanes, "dead": dead["dead"] if dead else 0, "chart": chart},
        )

    async def tasks(request: Request) -> Response:
        params = dict(request.query_params)
        try:
            filters = search_filters(params)
        except BadInput as exc:
            return render(
                request,
                "tasks.html",
                {"rows": [], "error": str(exc), "params": params, "statuses": STATUSES},
                status_code=400,
            )
        searched = any(v is not None for k, v in filters.items() if k != "max_rows")
        rows = await db.rows("dashboard_task_search", filters) if searched else []
        return render(
            request,
            "tasks.html",
            {
                "rows": rows,
                "params": params,
                "statuses": STATUSES,
                "searched": searched,
                "limit": SEARCH_ROWS,
            },
        )

    async def task(request: Request) -> Response:
        task_id = int(request.path_params["task_id"])
        row = await db.row("dashboard_task", {"task_id": task_id})
        if row is None:
            raise HTTPException(404, f"no task {task_id}")
        events = await db.rows("dashboard_task_events", {"task_id": task_id})
        outcomes = await db.rows("dashboard_task_outcomes", {"task_id": task_id})
        attempts = _attempts(events)
        return render(
            request,
            "task.html",
            {"task": row, "events": events, "attempts": attempts, "outcomes": outcomes},
        )

    async def task_cancel_confirm(request: Request) -> Response:
        """Asking is not doing: what a cancel would do, and the form that does it."""
        if config.read_only or db.writes is None:
            raise HTTPException(403, "the dashboard runs read-only")
        task_id = int(request.path_params["task_id"])
        row = await db.row("dashboard_task", {"task_id": task_id})
        if row is None:
            raise HTTPException(404, f"no task {task_id}")
        return render(request, "cancel_confirm.html", {"task": row})

    async def task_cancel(request: Request) -> Response:
        form = await write_form(request)
        task_id = int(request.path_params["task_id"])
        reason = str(form.get("reason") or "cancelled").strip() or "cancelled"
        try:
            await write(
                "dashboard_task_cancel",
                [{"task_id": task_id, "reason": reason, "actor": actor_of(request)}],
            )
        except psycopg.Error as exc:
            return _refused(request, render, exc, f"/tasks/{task_id}")
        return RedirectResponse(f"/tasks/{task_id}", status_code=303)

    async def dead(request: Request) -> Response:
        task_type = request.query_params.get("type", "").strip() or None
        rows = await db.rows("dashboard_dead_list", {"task_type": task_type, "max_rows": LIST_ROWS})
        total = await db.row("dashboard_dead_count")
        return render(
            request,
            "dead.html",
            {
                "rows": rows,
                "total": total["dead"] if total else 0,
                "task_type": task_type or "",
                "done": request.query_params.get("done", ""),
            },
        )

    async def dead_selection(request: Request) -> tuple[str, list[int]]:
        """What a DEAD-lane form posts, once past the write guards: the action and the
        task ids (the confirmation page and the apply step read the same form)."""
        form = await write_form(request)
        action = str(form.get("action") or "")
        if action not in ("retry", "discard"):
            raise BadInput("action: must be retry or discard")
        return action, _ids(form)

    async def dead_confirm(request: Request) -> Response:
        try:
            action, ids = await dead_selection(request)
        except BadInput as exc:
            return _bad(request, render, exc)
        return render(request, "dead_confirm.html", {"action": action, "ids": ids})

    async def dead_apply(request: Request) -> Response:
        try:
            action, ids = await dead_selection(request)
        except BadInput as exc:
            return _bad(request, render, exc)
        actor = actor_of(request)
        name, verb = (
            ("dashboard_dead_retry", "retried from the DEAD lane")
            if action == "retry"
            else ("dashboard_dead_discard", "discarded from the DEAD lane")
        )
        try:
            await write(name, [{"task_id": i, "reason": f"{verb} by {actor}"} for i in ids])
        except psycopg.Error as exc:
            return _refused(request, render, exc, "/dead")
        done = f"{action}: {' '.join(map(str, ids))}"
        return RedirectResponse(f"/dead?done={done}", status_code=303)

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

    async def schedule_toggle(request: Request) -> Response:
        await write_form(request)
        schedule_id = int(request.path_params["schedule_id"])
        enabled = request.path_params["verb"] == "resume"
        assert db.writes is not None
        what = "resumed" if enabled else "paused"
        detail = f"{what} by {actor_of(request)} via dashboard"
        async with db.writes.connection() as conn, conn.transaction():
            if enabled:
                await conn.execute(query("dashboard_schedule_resume"), {"schedule_id": schedule_id})
                await conn.execute(
                    query("dashboard_schedule_event_actor"),
                    {"schedule_id": schedule_id, "detail": detail},
                )
            else:
                await conn.execute(
                    query("dashboard_schedule_pause"),
                    {"schedule_id": schedule_id, "reason": detail},
                )
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

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.open()
        try:
            yield
        finally:
            await db.close()

    routes = [
        Route("/", overview),
        Route("/tasks", tasks),
        Route("/tasks/{task_id:int}", task),
        Route("/tasks/{task_id:int}/cancel", task_cancel_confirm, methods=["GET"]),
        Route("/tasks/{task_id:int}/cancel", task_cancel, methods=["POST"]),
        Route("/dead", dead),
        Route("/dead/confirm", dead_confirm, methods=["POST"]),
        Route("/dead/apply", dead_apply, methods=["POST"]),
        Route("/schedules", schedules),
        Route("/schedules/{schedule_id:int}/{verb:str}", schedule_toggle, methods=["POST"]),
        Route("/tenants", tenants),
        Route("/workers", workers),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(AuthMiddleware, auth=config.auth)],
        exception_handlers={HTTPException: http_error},
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


def _bad(request: Request, render: Callable[..., Response], exc: BadInput) -> Response:
    return render(request, "error.html", {"message": str(exc), "status": 400}, status_code=400)


def _refused(
    request: Request, render: Callable[..., Response], exc: psycopg.Error, back: str
) -> Response:
    message = exc.diag.message_primary or str(exc)
    return render(
        request,
        "error.html",
        {"message": f"refused, nothing changed: {message}", "status": 409, "back": back},
        status_code=409,
    )


__all__ = ["DashboardConfig", "create_app"]
