"""The one time parser of the command line (--at, --since, --until).

Accepted: `now`; a duration from now, `+90s`, `+15m`, `+2h`, `+3d` (or `-7d` for the past);
an ISO 8601 time with a UTC offset (`2026-12-24T09:00:00+01:00`); or a wall-clock time
without an offset together with --tz ZONE. Refused: a wall-clock time without --tz (it names
no instant), and an offset together with --tz (two answers to one question).

A wall-clock time that does not exist in its zone (inside a spring-forward gap) is shifted
forward by the length of the gap (02:30 on a day the clocks jump from 02:00 to 03:00 becomes
03:30), as Python's zoneinfo does with fold=0; a time that occurs twice (fall-back) is its
first occurrence. Either way `ParsedTime.note` says what was done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

_DURATION = re.compile(r"^([+-])(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
FORMS = "now, +15m, +2h, +3d, -7d, or ISO 8601 (2026-12-24T09:00:00+01:00, or wall-clock with --tz)"


@dataclass(frozen=True)
class ParsedTime:
    """An instant (None: now, by the database's clock) and what was done to get it."""

    moment: datetime | None
    note: str | None = None


def parse_time(
    text: str, zone: str | None, *, option: str, now: datetime | None = None
) -> ParsedTime:
    """Parse `text` given for `option` (named in every refusal)."""
    text = text.strip()
    if text == "now":
        return ParsedTime(None)
    duration = _DURATION.match(text)
    if duration:
        sign = -1 if duration[1] == "-" else 1
        try:
            delta = timedelta(**{_UNITS[duration[3]]: sign * float(duration[2])})
            return ParsedTime((now or datetime.now(UTC)) + delta)
        except OverflowError:
            raise click.BadParameter(
                f"{text!r} is out of range: it ends past the years 1 to 9999",
                param_hint=option,
            ) from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use {FORMS}", param_hint=option
        ) from None
    if moment.utcoffset() is not None:
        if zone is not None:
            raise click.BadParameter(
                f"{text!r} has a UTC offset and --tz {zone} names a zone: give one or the other",
                param_hint=option,
            )
        return ParsedTime(moment)
    if zone is None:
        raise click.BadParameter(
            f"{text!r} has no UTC offset: add one or give --tz ZONE", param_hint=option
        )
    return _wall_clock(moment, zone, text)


def _wall_clock(naive: datetime, zone: str, text: str) -> ParsedTime:
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"unknown time zone {zone!r}", param_hint="--tz") from None
    first = naive.replace(tzinfo=tz, fold=0)
    back = first.astimezone(UTC).astimezone(tz)
    if back.replace(tzinfo=None) != naive:
        return ParsedTime(
            back,
            f"{text} does not exist in {zone} (the clocks skip it); "
            f"scheduled at {back.isoformat()}, shifted forward by the gap",
        )
    second = naive.replace(tzinfo=tz, fold=1)
    if second.utcoffset() != first.utcoffset():
        return ParsedTime(
            first,
            f"{text} occurs twice in {zone} (the clocks go back); "
            f"scheduled at the first, {first.isoformat()}",
        )
    return ParsedTime(first)


_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?$")


def parse_duration(text: str, *, option: str) -> timedelta:
    """A length of time given for `option`: seconds (`90`) or with a unit (`90s`, `15m`,
    `2h`, `3d`)."""
    span = _SPAN.match(text.strip())
    if span is None:
        raise click.BadParameter(
            f"{text!r} is not a duration: use seconds (90) or 90s, 15m, 2h, 3d",
            param_hint=option,
        )
    try:
        return timedelta(**{_UNITS[span[2] or "s"]: float(span[1])})
    except OverflowError:
        raise click.BadParameter(f"{text!r} is out of range", param_hint=option) from None
