"""Cron expressions in IANA time zones, DST-correct, computed in the zone and returned in UTC.

croniter parses and expands the five fields; the walk over days and wall-clock times is
ours, because the DST policy is ours and must hold in every zone (tested in
America/New_York, Europe/Berlin, Australia/Lord_Howe and America/Santiago):

* A schedule that names wall-clock hours (`30 2 * * *`, `0 9 * * 1-5`) runs **once** on
  each matching day. A time in a repeated (fall-back) hour runs at its first occurrence
  only. A time in a skipped (spring-forward) gap runs at the first valid instant after
  the gap (02:30 on a New York spring-forward day runs at 03:00 EDT); several skipped
  times collapse into that one run.
* A frequent schedule, one whose hour field is `*` (`*/15 * * * *`, `0 * * * *`), keeps
  firing every N real minutes through both transitions: it follows the zone's standard
  time (its UTC offset without DST), so a skipped hour is not run and a repeated hour
  runs once per offset. In a zone whose DST shift is 30 minutes (Lord Howe), an hourly
  schedule therefore fires at :30 on the wall clock while DST is on.

The search for the next fire time is bounded (`SEARCH_YEARS`), so an expression that can
never fire (`0 0 31 2 *`) is refused instead of spinning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
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
    frequent: bool  # hour field is '*': fire every matching real minute

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
        if self.frequent:
            yield from self._frequent_fires_after(after_utc)
            return
        local_day = after_utc.astimezone(self.zone).date() - timedelta(days=1)
        last_day = local_day + timedelta(days=366 * SEARCH_YEARS)
        previous: datetime | None = None
        while local_day <= last_day:
            if self.day_matches(local_day):
                for instant in self._fires_on(local_day):
                    if instant > after_utc and instant != previous:
                        previous = instant
                        yield instant
            local_day += timedelta(days=1)

    def _standard_offset(self, day: date) -> timedelta:
        noon = datetime.combine(day, time(12), tzinfo=self.zone)
        return (noon.utcoffset() or timedelta(0)) - (noon.dst() or timedelta(0))

    def _frequent_fires_after(self, after_utc: datetime) -> Iterator[datetime]:
        """Frequent schedules walk the zone's standard-time grid (every N real minutes
        whatever the clocks do); the day fields are matched against each instant's
        wall-clock date, which DST can put on the neighbouring day."""
        standard = self._standard_offset(after_utc.astimezone(self.zone).date())
        start = (after_utc + standard).replace(tzinfo=None)
        day = start.date()
        last_day = day + timedelta(days=366 * SEARCH_YEARS)
        one = timedelta(days=1)
        while day <= last_day:
            # A wall date is at most a day away from the standard-time date.
            if any(self.day_matches(d) for d in (day - one, day, day + one)):
                standard = self._standard_offset(day)
                for hour in self.hours:
                    if day == start.date() and hour < start.hour:
                        continue
                    for minute in self.minutes:
                        instant = (datetime.combine(day, time(hour, minute)) - standard).replace(
                            tzinfo=UTC
                        )
                        if instant <= after_utc:
                            continue
                        if self.day_matches(instant.astimezone(self.zone).date()):
                            yield instant
            day += one

    def next_fire(self, after: datetime) -> datetime:
        for instant in self.fires_after(after):
            return instant
        raise CronError(
            f"cron expression {self.expression!r} never fires "
            f"(no match within {SEARCH_YEARS} years)"
        )

    def _fires_on(self, day: date) -> Iterator[datetime]:
        """The UTC instants this schedule fires at on one local day, ascending."""
        instants: list[datetime] = []
        for hour in self.hours:
            for minute in self.minutes:
                wall = datetime.combine(day, time(hour, minute))
                instants.extend(self._resolve(wall))
        return iter(sorted(set(instants)))

    def _resolve(self, wall: datetime) -> list[datetime]:
        first = wall.replace(tzinfo=self.zone, fold=0)
        second = wall.replace(tzinfo=self.zone, fold=1)
        first_utc, second_utc = first.astimezone(UTC), second.astimezone(UTC)
        exists = first_utc.astimezone(self.zone).replace(tzinfo=None) == wall
        if not exists:
            # In a spring-forward gap: run at the first valid instant after it.
            return [_transition_between(self.zone, second_utc, first_utc)]
        # In a repeated (fall-back) hour fold=0 is the first occurrence: run that one only.
        return [first_utc]


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
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise CronError(
            f"cron expression {expression!r} must have five fields: minute hour day month weekday"
        )
    try:
        fields, _ = croniter.expand(expression)
    except (ValueError, KeyError, TypeError) as exc:
        raise CronError(f"invalid cron expression {expression!r}: {exc}") from None
    minute_f, hour_f, dom_f, month_f, dow_f = fields[:5]
    raw = expression.split()
    # croniter reads these, but drops or misreads some of them: refuse rather than guess.
    if (
        "#" in expression
        or re.search(r"[LW]", raw[2].upper())
        or re.search(r"\dL|^L$", raw[4].upper())
    ):
        raise CronError(
            f"cron expression {expression!r} uses L, W or # (last / nearest weekday / nth "
            "weekday), which pgsched does not support"
        )

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
        frequent=raw[1] in ("*", "*/1"),
    )
    # Refuse what can never fire now, not at arming time.
    schedule.next_fire(datetime(2000, 1, 1, tzinfo=UTC))
    return schedule


def next_fire(expression: str, timezone: str, after: datetime) -> datetime:
    return parse(expression, timezone).next_fire(after)
