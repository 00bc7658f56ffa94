"""Cron expressions in IANA time zones, DST-correct, computed in the zone and returned in UTC.

croniter expands the five fields; the grammar check (`cron_problem`, the same rules and
messages as SQL's `pgsched.cron_problem`) and the walk over days and wall-clock times are
ours, because the DST policy is ours and must hold in every zone. The policy is classic
cron's (Vixie cron; cronsim does the same):

* A *frequent* expression, one whose minute or hour field starts with `*` (`0 * * * *`,
  `0 */2 * * *`, `*/15 * * * *`), fires at every real instant whose local wall-clock time
  matches: a repeated (fall-back) time fires twice, a skipped (spring-forward) time never.
  In a zone whose DST shift is 30 minutes (Lord Howe) `0 * * * *` fires at the wall
  clock's :00 in both seasons.
* Every other expression walks the wall clock and fires once per matching wall time: a
  repeated time at its first occurrence only; a time inside a spring-forward gap once, at
  the first instant after the gap (02:30 on a New York spring-forward day runs at 03:00
  EDT); several skipped times collapse into that one run.

Refused by both arms alike: R and H (random, hashed: each process would pick a different
time), L, W and #, steps larger than their field, ranges that run backwards, and a day of
month none of the listed months has (`0 0 31 APR *`). The search for the next fire time is
bounded (`SEARCH_YEARS`) as a backstop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache, lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

SEARCH_YEARS = 8  # covers leap-day schedules (29 Feb repeats within 8 years)

_ZONE_NAME = re.compile(r"^[A-Z][A-Za-z_+-]+(/[A-Za-z0-9_+-]+)+$")


class CronError(ValueError):
    """An unusable cron expression or time zone."""


def check_timezone(name: str | None) -> ZoneInfo:
    """An IANA Area/Location zone (or UTC); abbreviations and unknown names are refused."""
    if name is None or not name.strip():
        raise CronError("time zone is required (an IANA name such as Europe/Berlin)")
    if name in ("UTC", "Etc/UTC"):
        return ZoneInfo("UTC")
    if not _ZONE_NAME.match(name) or name.split("/")[0] in ("posix", "right", "Etc", "SystemV"):
        raise CronError(
            f"unknown time zone {name!r} (use an IANA Area/Location name such as America/New_York)"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(
            f"unknown time zone {name!r} (use an IANA Area/Location name such as America/New_York)"
        ) from None


_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_FIELD_LOW = (0, 0, 1, 1, 0)
_FIELD_HIGH = (59, 23, 31, 12, 7)
_FIELD_SPAN = (60, 24, 31, 12, 7)  # distinct values (7 and 0 both name Sunday)
_NAMES: dict[int, tuple[str, ...]] = {
    3: ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
    4: ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"),
}
_RANDOM_OR_HASHED = re.compile(r"(^|[^A-Z])[RH]([^A-Z]|$)")
_LAST_OR_WEEKDAY = re.compile(r"(^|[^A-Z])(L|W|LW)([^A-Z]|$)|[0-9](L|W)")
_ITEM = re.compile(r"^([^/]+)(/([0-9]+))?$")
_BOUNDS = re.compile(r"^([0-9A-Za-z]+)(-([0-9A-Za-z]+))?$")
_MONTH_DAYS = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}


def _sql_literal(text: str) -> str:
    # The quoting of SQL's format('%L'), so both arms word a refusal identically.
    return "'" + text.replace("'", "''") + "'"


def _field_values(expression: str, field: str, index: int) -> tuple[str | None, list[int]]:
    """(problem, values) of one field; the same rules as SQL's pgsched.cron_field_values."""
    name = _FIELD_NAMES[index]
    low, high, span = _FIELD_LOW[index], _FIELD_HIGH[index], _FIELD_SPAN[index]
    names = _NAMES.get(index, ())
    name_base = 1 if index == 3 else 0
    prefix = f"invalid cron expression {_sql_literal(expression)}: "
    upper = field.upper()
    if _RANDOM_OR_HASHED.search(upper):
        return (
            prefix + f"the {name} field uses R or H (random / hashed), which pgsched refuses: "
            "each process would pick a different time",
            [],
        )
    if "#" in field or _LAST_OR_WEEKDAY.search(upper):
        return (
            f"cron expression {_sql_literal(expression)}: the {name} field uses L, W or # "
            "(last / nearest weekday / nth weekday), which pgsched does not support",
            [],
        )
    if field == "?" and index in (2, 4):
        field = "*"
    values: list[int] = []
    top = 6 if index == 4 else high
    for item in field.split(","):
        not_a_value = (
            prefix + f"{_sql_literal(item)} in the {name} field is not a value, range or step"
        )
        parts = _ITEM.match(item)
        if parts is None:
            return not_a_value, []
        base, step_text = parts.group(1), parts.group(3)
        if base == "*":
            first, last = low, top
        else:
            bounds = _BOUNDS.match(base)
            if bounds is None:
                return not_a_value, []
            numbers: list[int] = []
            for token in (bounds.group(1), bounds.group(3)):
                if token is None:
                    continue
                if re.fullmatch(r"[0-9]{1,6}", token):
                    numbers.append(int(token))
                elif token.upper() in names:
                    numbers.append(names.index(token.upper()) + name_base)
                else:
                    return not_a_value, []
                if not low <= numbers[-1] <= high:
                    return (
                        prefix + f"{token} in the {name} field is out of range ({low} to {high})",
                        [],
                    )
            first = numbers[0]
            if len(numbers) == 2:
                last = numbers[1]
            elif step_text is not None:
                last = top  # 'a/step' runs from a to the end of the field
            else:
                last = numbers[0]
            if last < first:
                return prefix + f"the range {base} in the {name} field runs backwards", []
        step = 1
        if step_text is not None:
            if len(step_text) > 6 or not 1 <= int(step_text) <= span:
                return (
                    prefix + f"step {step_text} in the {name} field is out of range (1 to {span})",
                    [],
                )
            step = int(step_text)
        values.extend(v % 7 if index == 4 else v for v in range(first, last + 1, step))
    return None, values


def cron_problem(expression: str | None) -> str | None:
    """Why a cron expression is refused, or None: SQL's pgsched.cron_problem, in Python."""
    if expression is None or not expression.strip():
        return "cron_expression is required (five fields: minute hour day month weekday)"
    fields = re.split(r"\s+", expression.strip())
    if len(fields) != 5:
        return (
            f"cron expression {_sql_literal(expression)} must have five fields: "
            "minute hour day month weekday"
        )
    listed: dict[int, list[int]] = {}
    for index, field in enumerate(fields):
        problem, values = _field_values(expression, field, index)
        if problem is not None:
            return problem
        listed[index] = values
    if (
        fields[2] not in ("*", "?")
        and fields[4] in ("*", "?")
        and not any(d <= _MONTH_DAYS.get(m, 31) for d in listed[2] for m in listed[3])
    ):
        return (
            f"cron expression {_sql_literal(expression)} never fires "
            "(none of its months has that day of month)"
        )
    return None


def is_frequent(expression: str) -> bool:
    """Classic cron's rule: a minute or hour field starting with `*` makes it frequent."""
    fields = expression.split()
    return fields[0].startswith("*") or fields[1].startswith("*")


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    zone: ZoneInfo
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday
    dom_restricted: bool
    dow_restricted: bool
    frequent: bool  # minute or hour field starts with '*' (classic cron's rule)

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        # Cron's rule: when both day fields are restricted, either may match.
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow

    def fires_after(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after `after` (aware), ascending, in UTC."""
        if after.utcoffset() is None:
            raise CronError("`after` must be an aware datetime")
        after_utc = after.astimezone(UTC)
        local_day = after_utc.astimezone(self.zone).date() - timedelta(days=1)
        last_day = local_day + timedelta(days=366 * SEARCH_YEARS)
        previous: datetime | None = None
        while local_day <= last_day:
            if self.day_matches(local_day):
                for instant in self._fires_on(local_day):
                    if instant > after_utc and (previous is None or instant > previous):
                        previous = instant
                        yield instant
            local_day += timedelta(days=1)

    def next_fire(self, after: datetime) -> datetime:
        for instant in self.fires_after(after):
            return instant
        raise CronError(
            f"cron expression {self.expression!r} never fires "
            f"(no match within {SEARCH_YEARS} years)"
        )

    @lru_cache(maxsize=64)  # noqa: B019 (schedules are parsed once and kept: parse is cached)
    def _fires_on(self, day: date) -> list[datetime]:
        """The UTC instants this schedule fires at on one local day, ascending. Kept for
        the days last asked: schedules of one expression and zone are armed together (every
        every-minute schedule at each minute), and a day of `* * * * *` is 1,440 times."""
        if self.zone.key == "UTC":
            # No DST: each wall time is one instant, and the fields are sorted, so the
            # instants are too. Resolving each through the zone cost 20 us a time.
            return [
                datetime.combine(day, time(hour, minute), tzinfo=UTC)
                for hour in self.hours
                for minute in self.minutes
            ]
        instants: set[datetime] = set()
        for hour in self.hours:
            for minute in self.minutes:
                instants.update(self._resolve(datetime.combine(day, time(hour, minute))))
        return sorted(instants)

    def _resolve(self, wall: datetime) -> list[datetime]:
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        exists = first.astimezone(self.zone).replace(tzinfo=None) == wall
        if not exists:
            # In a spring-forward gap: a frequent schedule skips it; any other runs once at
            # the first valid instant after it.
            if self.frequent:
                return []
            return [_transition_between(self.zone, min(first, second), max(first, second))]
        if self.frequent and second != first:
            # A repeated (fall-back) time: every real instant showing it fires.
            return [first, second]
        # Otherwise fold=0 is the first occurrence: run that one only.
        return [first]


def _transition_between(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first instant in (low, high] whose UTC offset equals high's: the gap's end."""
    target = high.astimezone(zone).utcoffset()
    lo, hi = low, high
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(zone).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


@cache
def parse(expression: str, timezone: str = "UTC") -> CronSchedule:
    """Parse and check a five-field cron expression in an IANA zone; raises CronError."""
    zone = check_timezone(timezone)
    if not isinstance(expression, str):
        raise CronError(
            "cron_expression must be a string (five fields: minute hour day month weekday)"
        )
    problem = cron_problem(expression)
    if problem is not None:
        raise CronError(problem)
    try:
        fields, _ = croniter.expand(expression)
    except (ValueError, KeyError, TypeError) as exc:
        raise CronError(f"invalid cron expression {expression!r}: {exc}") from None
    minute_f, hour_f, dom_f, month_f, dow_f = fields[:5]
    raw = expression.split()

    def values(field: Sequence[Any], low: int, high: int) -> list[int]:
        if list(field) == ["*"]:
            return list(range(low, high + 1))
        if not all(isinstance(v, int) for v in field):
            raise CronError(
                f"cron expression {expression!r} uses a feature pgsched does not support"
            )
        return sorted({v % 7 if high == 6 else v for v in field})

    schedule = CronSchedule(
        expression=expression,
        zone=zone,
        minutes=tuple(values(minute_f, 0, 59)),
        hours=tuple(values(hour_f, 0, 23)),
        days_of_month=frozenset(values(dom_f, 1, 31)),
        months=frozenset(values(month_f, 1, 12)),
        days_of_week=frozenset(values(dow_f, 0, 6)),
        dom_restricted=raw[2] not in ("*", "?"),
        dow_restricted=raw[4] not in ("*", "?"),
        frequent=is_frequent(expression),
    )
    # Refuse what can never fire now, not at arming time.
    schedule.next_fire(datetime(2000, 1, 1, tzinfo=UTC))
    return schedule


def next_fire(expression: str, timezone: str, after: datetime) -> datetime:
    return parse(expression, timezone).next_fire(after)
