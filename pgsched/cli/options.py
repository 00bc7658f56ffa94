"""Option types and output shared by the commands: JSON values, zones, log levels, tables."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar, cast

import click

Command = TypeVar("Command", bound=Callable[..., Any])

LOG_LEVEL = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


class JsonValue(click.ParamType[Any]):
    """Any JSON text, or `@FILE` to read it from a file (`@-`: stdin): a document can be
    larger than an argument list may be (Linux refuses one argument over 128 KiB). With
    `object_only`, a JSON object."""

    name = "json"

    def __init__(self, object_only: bool = False) -> None:
        self.object_only = object_only

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        source = None
        if value.startswith("@"):
            source = value[1:]
            value = self._read(source, param, ctx)
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"{source} is not JSON: {exc}" if source else f"not JSON: {exc}", param, ctx)
        if self.object_only and not isinstance(parsed, dict):
            kind = type(parsed).__name__
            if source:
                self.fail(f"{source} must hold a JSON object ({{...}}), not {kind}", param, ctx)
            self.fail(f"must be a JSON object ({{...}}), not {kind}", param, ctx)
        return parsed

    def _read(self, source: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not source:
            self.fail("name a file after @ (or @- for stdin)", param, ctx)
        if source == "-":
            return sys.stdin.read()
        try:
            with open(source, encoding="utf-8") as file:
                return file.read()
        except FileNotFoundError:
            self.fail(f"cannot read {source}: no such file", param, ctx)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.fail(f"cannot read {source}: {reason}", param, ctx)


JSON_VALUE = JsonValue()
JSON_OBJECT = JsonValue(object_only=True)


def check_zone(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--tz: absent, or a non-empty name (the database judges the name itself)."""
    if value is not None and not value.strip():
        raise click.BadParameter("empty: name an IANA zone such as Europe/Paris", ctx, param)
    return value


def json_output(document: str) -> Callable[[Command], Command]:
    """--json (passed as `as_json`) for a command that prints data: one JSON document on
    stdout (`document` says what it holds), printed with `print_json`, instead of text."""
    return click.option("--json", "as_json", is_flag=True, help=f"One JSON document: {document}.")


@dataclass(frozen=True)
class Page:
    """Which rows of a listing to print: at most `limit`, after skipping `offset`."""

    limit: int
    offset: int = 0


def paged(
    default_limit: int, *, offsets: bool = True, what: str = "rows"
) -> Callable[[Command], Command]:
    """--limit, and with `offsets` --offset and --page, for a command that lists rows; the
    command gets them as one `page: Page` argument."""

    def decorate(command: Command) -> Command:
        @functools.wraps(command)
        def with_page(
            *args: Any, max_rows: int, skip_rows: int = 0, page: int | None = None, **kwargs: Any
        ) -> Any:
            if page is not None:
                skip_rows = (page - 1) * max_rows
            return command(*args, page=Page(max_rows, skip_rows), **kwargs)

        options = [
            click.option(
                "--limit",
                "max_rows",
                type=click.IntRange(min=1),
                default=default_limit,
                show_default=True,
                help=f"Most {what} to show" + (" per page." if offsets else "."),
            )
        ]
        if offsets:
            options += [
                click.option(
                    "--offset",
                    "skip_rows",
                    type=click.IntRange(min=0),
                    default=0,
                    show_default=True,
                    help=f"{what.capitalize()} to skip (newest first).",
                ),
                click.option(
                    "--page",
                    type=click.IntRange(min=1),
                    default=None,
                    help="Page number, counted from 1 (sets --offset to (page - 1) x --limit).",
                ),
            ]
        decorated: Any = with_page
        for option in reversed(options):
            decorated = option(decorated)
        return cast(Command, decorated)

    return decorate


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Rows under upper-case headers: numbers right-aligned, and their headers with them;
    everything else (text, times, flags) left-aligned."""
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [_is_number_column([row[c] for row in rows]) for c in columns]

    def line(values: list[str]) -> str:
        placed = [
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(placed).rstrip()

    return "\n".join([line([c.upper() for c in columns]), *(line(r) for r in cells)])


def _is_number_column(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(
        isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in present
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def first_line(text: str | None, width: int) -> str:
    return text.splitlines()[0][:width] if text else "-"


def print_json(data: Any) -> None:
    """One JSON document on stdout; times as ISO 8601."""
    click.echo(json.dumps(data, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def fit_table(
    rows: list[dict[str, Any]], columns: list[str], width: int, shrinkable: dict[str, int]
) -> str:
    """`render_table` within `width` characters a line: the `shrinkable` columns are cut
    (ending in "…"), never below their given minimum, the one furthest above it first."""
    cells = [{c: _cell(row[c]) for c in columns} for row in rows]
    widths = {c: max([len(c)] + [len(r[c]) for r in cells]) for c in columns}
    floor = {c: max(len(c), minimum, 2) for c, minimum in shrinkable.items()}
    while sum(widths.values()) + 2 * (len(columns) - 1) > width:
        candidates = [c for c in shrinkable if widths[c] > floor[c]]
        if not candidates:
            break
        widest = max(candidates, key=lambda c: widths[c] - floor[c])
        widths[widest] -= 1
    numeric = {c: _is_number_column([row[c] for row in rows]) for c in columns}

    def place(text: str, column: str) -> str:
        width = widths[column]
        return text.rjust(width) if numeric[column] else _cut(text, width).ljust(width)

    lines = ["  ".join(place(c.upper(), c) for c in columns).rstrip()]
    lines += ["  ".join(place(row[c], c) for c in columns).rstrip() for row in cells]
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
