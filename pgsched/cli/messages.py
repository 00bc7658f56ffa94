"""What the command line says when it refuses something: one style, `error: <message>` on
one line of stderr, whatever refused it (click's parser, the task model, the database).

Click's own usage errors print a usage block and `Error: Invalid value for '--x': ...`; the
task model's pydantic errors read `priority: Input should be greater than or equal to 0`.
Both are rewritten here in the words of the option the user typed.
"""

from __future__ import annotations

from typing import Any

import click
from pydantic import BaseModel, ValidationError

from pgsched.tasks import PLAIN_TASK_TYPE

# What a pattern of the task model allows, in words (a regular expression is not an answer).
PATTERN_WORDS = {
    PLAIN_TASK_TYPE: "letters, digits, _ and ., starting with a letter or _, at most 100"
    " characters",
}

# The database's refusals start with the engine's name; on the command line it is noise.
ENGINE_PREFIX = "pgsched: "


class StyledError(click.ClickException):
    """A refusal already in the command line's words: a runtime failure (exit 1)."""

    def show(self, file: Any = None) -> None:
        click.secho(f"error: {self.message}", fg="red", err=True)


class StyledBadInput(StyledError):
    """A refusal of what the user gave (exit 2)."""

    exit_code = 2


def styled(message: str, exit_code: int) -> StyledError:
    """The refusal to raise for a message and its exit code (2 bad input, else 1)."""
    return StyledBadInput(message) if exit_code == 2 else StyledError(message)


def param_hint(param: click.Parameter | None) -> str | None:
    """How the user wrote a parameter: `--lane` for an option, `TASK_TYPE` for an argument."""
    if param is None:
        return None
    if isinstance(param, click.Option):
        longest = max(param.opts, key=len) if param.opts else param.name
        return longest
    return (param.name or "").upper()


def click_message(exc: click.ClickException) -> str:
    """Click's refusal as one line: `--limit: 0 is not in the range x>=1`; when click could
    not parse the command line at all, where its help is."""
    if isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        if exc.param_hint is not None:
            hints = exc.param_hint
            hint: str | None = hints if isinstance(hints, str) else " / ".join(hints)
        else:
            hint = param_hint(exc.param)
        text = f"{hint}: {exc.message}" if hint else exc.message
        return text.rstrip(".")
    text = _lower_first(exc.format_message()).rstrip(".")
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        text += f"; see `{exc.ctx.command_path} --help`"
    return text


def _lower_first(text: str) -> str:
    """`No such option` as the rest of the command line words it; `TASK_TYPE` stays."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def validation_message(exc: ValidationError, model: type[BaseModel], hints: dict[str, str]) -> str:
    """The first problem pydantic found, naming the field as the user gave it (`hints` maps
    a model field to its option) and what is allowed."""
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    where = hints.get(field, field) or "input"
    info = model.model_fields.get(field)
    kind = error["type"]
    given = error.get("input")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"{where}: {given!r} is out of range ({_allowed_range(info)})"
    if kind in ("string_too_short", "string_too_long"):
        return f"{where}: {given!r} must be {_allowed_length(info)}"
    if kind == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        allowed = PATTERN_WORDS.get(pattern, f"text matching {pattern}")
        return f"{where}: {given!r} is not allowed: use {allowed}"
    if kind == "value_error":
        reason = str((error.get("ctx") or {}).get("error", error["msg"]))
        # The model's own messages start with the field's name ("tenant_id 'a b' is ...").
        return f"{where}: {reason.removeprefix(field + ' ')}"
    return f"{where}: {error['msg']}"


def _bounds(info: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for constraint in getattr(info, "metadata", []):
        for name in ("ge", "le", "gt", "lt", "min_length", "max_length"):
            value = getattr(constraint, name, None)
            if value is not None:
                found[name] = value
    return found


def _allowed_range(info: Any) -> str:
    bounds = _bounds(info)
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if low is not None and high is not None:
        return f"{low} to {high}"
    if low is not None:
        return f"at least {low}" if "ge" in bounds else f"more than {low}"
    return f"at most {high}" if "le" in bounds else f"less than {high}"


def _allowed_length(info: Any) -> str:
    bounds = _bounds(info)
    shortest, longest = bounds.get("min_length"), bounds.get("max_length")
    if shortest is not None and longest is not None:
        return f"{shortest} to {longest} characters"
    if shortest is not None:
        return f"at least {shortest} character(s)"
    return f"at most {longest} characters"


def engine_words(text: str) -> str:
    """A database refusal without the engine's name in front."""
    return text.removeprefix(ENGINE_PREFIX)
