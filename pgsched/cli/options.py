"""Option types and output shared by the commands: JSON values, zones, log levels, tables."""

from __future__ import annotations

import json
import logging
from typing import Any

import click

LOG_LEVEL = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


class JsonValue(click.ParamType[Any]):
    """Any JSON text; with `object_only`, a JSON object."""

    name = "json"

    def __init__(self, object_only: bool = False) -> None:
        self.object_only = object_only

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not JSON: {exc}", param, ctx)
        if self.object_only and not isinstance(parsed, dict):
            self.fail(f"must be a JSON object ({{...}}), not {type(parsed).__name__}", param, ctx)
        return parsed


JSON_VALUE = JsonValue()
JSON_OBJECT = JsonValue(object_only=True)


def check_zone(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--tz: absent, or a non-empty name (the database judges the name itself)."""
    if value is not None and not value.strip():
        raise click.BadParameter("empty: name an IANA zone such as Europe/Paris", ctx, param)
    return value


def start_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def first_line(text: str | None, width: int) -> str:
    return text.splitlines()[0][:width] if text else "-"
