"""The DST policy of pgsched.cron, zone by zone (pure unit tests: no database).

The transitions are not written down here: they are found by scanning each zone's 2026
offsets with zoneinfo, then every expectation is derived from the transition instant and
the two offsets. Covered: America/New_York and Europe/Berlin (one-hour shifts at night),
Australia/Lord_Howe (a 30-minute shift) and America/Santiago (shifts at midnight).

The policy (pgsched/cron.py):
* a wall-clock schedule runs once per matching day: the first occurrence of a repeated
  time; the first valid instant after the gap (the transition itself) for a skipped one;
* a frequent schedule (minute or hour field starting with `*`) fires at every real instant
  whose wall clock matches: a repeated time twice, a skipped time never. Checked against a
  brute-force reference in more zones, with half-hour and 45-minute offsets and shifts.
"""

from __future__ import annotations

import re
import time as timer
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from pgsched.cron import CronError, check_timezone, next_fire, parse

ZONES = ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago"]
YEAR = 2026


@dataclass(frozen=True)
class Transition:
    zone: str
    at: datetime  # the UTC instant the offset changes
    before: timedelta  # the offset in force until `at`
    after: timedelta  # the offset from `at` on

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    @property
    def spring_forward(self) -> bool:
        return self.after > self.before

    @property
    def shift(self) -> timedelta:
        return abs(self.after - self.before)

    @property
    def frozen_now(self) -> datetime:
        """The clock, frozen just before the transition (and before any repeated wall time)."""
        return self.at - self.shift - timedelta(minutes=10)

    def wall(self, offset: timedelta) -> datetime:
        """The naive wall-clock reading at `at` under `offset`."""
        return (self.at + offset).replace(tzinfo=None)

    @property
    def odd_wall_times(self) -> tuple[datetime, datetime]:
        """[start, end) of the skipped (spring) or repeated (fall) wall-clock times."""
        low, high = sorted((self.wall(self.before), self.wall(self.after)))
        return low, high

    def __str__(self) -> str:
        kind = "spring-forward" if self.spring_forward else "fall-back"
        return f"{self.zone} {kind} at {self.at:%Y-%m-%d %H:%M}Z"


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def find_transitions(zone_name: str, year: int = YEAR) -> list[Transition]:
    """Every offset change of `year`, to the second, by scanning and bisecting."""
    zone = ZoneInfo(zone_name)
    step = timedelta(minutes=15)
    t = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    found: list[Transition] = []
    current = _offset(zone, t)
    while t < end:
        following = t + step
        offset = _offset(zone, following)
        if offset != current:
            low, high = t, following
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if _offset(zone, mid) == current:
                    low = mid
                else:
                    high = mid
            found.append(Transition(zone_name, high, current, offset))
            current = offset
        t = following
    return found


TRANSITIONS = [tr for zone in ZONES for tr in find_transitions(zone)]


def _id(tr: Transition) -> str:
    return f"{tr.zone.split('/')[-1]}-{'spring' if tr.spring_forward else 'fall'}"


SPRING = [pytest.param(tr, id=_id(tr)) for tr in TRANSITIONS if tr.spring_forward]
FALL = [pytest.param(tr, id=_id(tr)) for tr in TRANSITIONS if not tr.spring_forward]
ALL = SPRING + FALL


def fires_between(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire times in (start, end]."""
    out: list[datetime] = []
    for instant in parse(expression, zone).fires_after(start):
        if instant > end:
            break
        out.append(instant)
    return out


def local_day(instant: datetime, zone: ZoneInfo) -> date:
    return instant.astimezone(zone).date()


def test_the_scan_finds_one_spring_forward_and_one_fall_back_per_zone() -> None:
    for zone in ZONES:
        found = find_transitions(zone)
        assert len(found) == 2, (zone, found)
        assert sorted(tr.spring_forward for tr in found) == [False, True], zone
    shifts = {tr.zone: tr.shift for tr in TRANSITIONS}
    assert shifts["Australia/Lord_Howe"] == timedelta(minutes=30)
    assert shifts["America/New_York"] == timedelta(hours=1)
    # Santiago changes at local midnight: the skipped or repeated hour straddles 00:00.
    for tr in TRANSITIONS:
        if tr.zone == "America/Santiago":
            assert time(0, 0) in (tr.wall(tr.before).time(), tr.wall(tr.after).time()), tr
    # Every transition instant is what zoneinfo says it is.
    for tr in TRANSITIONS:
        assert _offset(tr.tz, tr.at - timedelta(seconds=1)) == tr.before, tr
        assert _offset(tr.tz, tr.at) == tr.after, tr


# -- (a) a wall-clock time inside the repeated hour: once, at its first occurrence ---------


@pytest.mark.parametrize("tr", FALL)
def test_daily_time_in_the_repeated_hour_runs_once_at_its_first_occurrence(
    tr: Transition,
) -> None:
    low, high = tr.odd_wall_times
    wall = low + (high - low) / 2  # in the middle of the repeated wall-clock times
    expression = f"{wall.minute} {wall.hour} * * *"
    first = (wall - tr.before).replace(tzinfo=UTC)  # the earlier offset: first occurrence
    second = (wall - tr.after).replace(tzinfo=UTC)
    assert second - first == tr.shift  # the wall time really happens twice
    assert first.astimezone(tr.tz).replace(tzinfo=None) == wall
    assert second.astimezone(tr.tz).replace(tzinfo=None) == wall

    assert next_fire(expression, tr.zone, tr.frozen_now) == first, tr
    fires = fires_between(expression, tr.zone, tr.frozen_now, tr.frozen_now + timedelta(hours=36))
    that_day = [f for f in fires if local_day(f, tr.tz) == wall.date()]
    assert that_day == [first], tr
    assert second not in fires, tr
    # The next run is the next day's, at the same wall-clock time.
    following = parse(expression, tr.zone).next_fire(first)
    assert following.astimezone(tr.tz).replace(tzinfo=None) == wall + timedelta(days=1), tr


# -- (b) a wall-clock time inside the gap: once, at the first valid instant after it ------


@pytest.mark.parametrize("tr", SPRING)
def test_daily_time_in_the_gap_runs_once_at_the_transition(tr: Transition) -> None:
    low, high = tr.odd_wall_times
    wall = low + (high - low) / 2
    assert (
        wall.replace(tzinfo=tr.tz).astimezone(UTC).astimezone(tr.tz).replace(tzinfo=None) != wall
    ), "the chosen wall time must not exist"
    expression = f"{wall.minute} {wall.hour} * * *"

    assert next_fire(expression, tr.zone, tr.frozen_now) == tr.at, tr
    fires = fires_between(expression, tr.zone, tr.frozen_now, tr.frozen_now + timedelta(hours=36))
    assert [f for f in fires if local_day(f, tr.tz) == wall.date()] == [tr.at], tr
    following = parse(expression, tr.zone).next_fire(tr.at)
    assert following.astimezone(tr.tz).replace(tzinfo=None) == wall + timedelta(days=1), tr


@pytest.mark.parametrize("tr", SPRING)
def test_several_skipped_times_collapse_into_one_run(tr: Transition) -> None:
    low, high = tr.odd_wall_times
    inside = [low, low + (high - low) / 2]
    assert inside[0].hour == inside[1].hour
    expression = f"{inside[0].minute},{inside[1].minute} {inside[0].hour} * * *"
    fires = fires_between(expression, tr.zone, tr.frozen_now, tr.frozen_now + timedelta(hours=20))
    on_the_day = [f for f in fires if local_day(f, tr.tz) == low.date()]
    assert on_the_day == [tr.at], tr


@pytest.mark.parametrize("tr", ALL)
def test_wall_clock_schedule_at_an_ordinary_time_is_untouched(tr: Transition) -> None:
    # 12:00 exists exactly once on every transition day of these zones.
    fires = fires_between(
        "0 12 * * *", tr.zone, tr.at - timedelta(days=1), tr.at + timedelta(days=1)
    )
    walls = [f.astimezone(tr.tz) for f in fires]
    assert [w.time() for w in walls] == [time(12, 0)] * len(walls)
    assert len({w.date() for w in walls}) == len(walls) == 2, tr


# -- (c) every expression against a brute-force reference ---------------------------------
#
# The reference walks every UTC minute of a window around a transition, reads the wall
# clock with zoneinfo and applies classic cron's rule directly: a frequent expression (its
# minute or hour field starts with '*') fires at every instant whose wall clock matches;
# any other fires at the first instant showing a matching wall time it has not shown
# before, and at the first instant after a gap that skipped a matching wall time. Field
# values come from croniter's expansion, the walk from nothing in pgsched.

ORACLE_ZONES = [
    # whole-hour shifts at night, and at midnight (Santiago)
    ("America/New_York", 2026),
    ("Europe/Berlin", 2026),
    ("America/Santiago", 2026),
    # a 30-minute shift (Lord Howe), a 45-minute offset with a one-hour shift (Chatham)
    ("Australia/Lord_Howe", 2026),
    ("Pacific/Chatham", 2026),
    # 45-minute offsets: Eucla's DST years, Kathmandu's 15-minute jump to +05:45 (1985-12-31)
    ("Australia/Eucla", 2008),
    ("Asia/Kathmandu", 1985),
]
FREQUENT_EXPRESSIONS = [
    "* * * * *",
    "0 * * * *",
    "0 */1 * * *",
    "0 */2 * * *",
    "*/15 * * * *",
    "30 * * * *",
    "*/30 1-3 * * *",
    "15 */3 * * *",
    "* 2 * * *",
]
WALL_CLOCK_EXPRESSIONS = [
    "0 2 * * *",
    "30 2 * * *",
    "45 2 * * *",
    "0 0 * * *",
    "15,45 1-3 * * *",
    "0 1,2,3 * * *",
    "0 9 * * *",
    "10 2-4/2 * * *",
]


def reference_fires(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire times in [start, end) by brute force over every UTC minute."""
    from croniter import croniter

    fields, _ = croniter.expand(expression)
    minute_values = set(range(60)) if fields[0] == ["*"] else set(fields[0])
    hour_values = set(range(24)) if fields[1] == ["*"] else set(fields[1])
    assert expression.split()[2:] == ["*", "*", "*"], "the reference matches times only"

    def matches(wall: datetime) -> bool:
        return wall.minute in minute_values and wall.hour in hour_values

    raw = expression.split()
    frequent = raw[0].startswith("*") or raw[1].startswith("*")
    tz = ZoneInfo(zone)
    fires: list[datetime] = []
    seen: set[datetime] = set()
    previous_wall: datetime | None = None
    t = start
    while t < end:
        wall = t.astimezone(tz).replace(tzinfo=None)
        if frequent:
            if matches(wall):
                fires.append(t)
        else:
            skipped_match = False
            if previous_wall is not None and wall - previous_wall > timedelta(minutes=1):
                w = previous_wall + timedelta(minutes=1)
                while w < wall:
                    skipped_match = skipped_match or matches(w)
                    w += timedelta(minutes=1)
            if skipped_match or (matches(wall) and wall not in seen):
                fires.append(t)
            seen.add(wall)
        previous_wall = wall
        t += timedelta(minutes=1)
    return fires


ORACLE_CASES = []
for _zone, _year in ORACLE_ZONES:
    for _tr in find_transitions(_zone, _year):
        for _expression in FREQUENT_EXPRESSIONS + WALL_CLOCK_EXPRESSIONS:
            ORACLE_CASES.append(pytest.param(_tr, _expression, id=f"{_tr}-{_expression}"))
# No DST at all, but a half-hour and a 45-minute offset; and UTC, whose fire times are
# computed without resolving each wall time through the zone.
for _zone in ("Asia/Kolkata", "Asia/Kathmandu", "Australia/Eucla", "UTC"):
    _steady = Transition(
        _zone,
        datetime(2026, 3, 29, tzinfo=UTC),
        _offset(ZoneInfo(_zone), datetime(2026, 3, 29, tzinfo=UTC)),
        _offset(ZoneInfo(_zone), datetime(2026, 3, 29, tzinfo=UTC)),
    )
    for _expression in FREQUENT_EXPRESSIONS + WALL_CLOCK_EXPRESSIONS:
        ORACLE_CASES.append(pytest.param(_steady, _expression, id=f"{_zone}-{_expression}"))


def test_the_reference_zones_have_the_offsets_and_shifts_they_are_chosen_for() -> None:
    found = {zone: find_transitions(zone, year) for zone, year in ORACLE_ZONES}
    assert all(len(trs) >= 1 for trs in found.values()), found
    assert {tr.shift for tr in found["Australia/Lord_Howe"]} == {timedelta(minutes=30)}
    assert [tr.shift for tr in found["Asia/Kathmandu"]] == [timedelta(minutes=15)]
    assert all(tr.before.seconds % 3600 == 45 * 60 for tr in found["Pacific/Chatham"])
    assert all(tr.shift == timedelta(hours=1) for tr in found["Australia/Eucla"])


@pytest.mark.parametrize(("tr", "expression"), ORACLE_CASES)
def test_fire_times_match_the_brute_force_reference(tr: Transition, expression: str) -> None:
    start, end = tr.at - timedelta(hours=26), tr.at + timedelta(hours=26)
    start = start.replace(second=0, microsecond=0)
    expected = reference_fires(expression, tr.zone, start, end)
    got = [
        f for f in fires_between(expression, tr.zone, start - timedelta(seconds=1), end) if f < end
    ]
    assert expected, "the window must hold fire times"
    assert got == expected, (
        f"{tr} {expression!r}: only pgsched {sorted(set(got) - set(expected))}, "
        f"only reference {sorted(set(expected) - set(got))}"
    )


def test_lord_howe_hourly_fires_at_the_wall_clocks_top_of_the_hour_all_dst_season() -> None:
    # While DST (+11:00) is on, :00 on the wall clock is :00 UTC: never :30.
    fires = fires_between(
        "0 * * * *",
        "Australia/Lord_Howe",
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2026, 12, 3, tzinfo=UTC),
    )
    assert len(fires) == 48
    assert {f.astimezone(ZoneInfo("Australia/Lord_Howe")).minute for f in fires} == {0}


@pytest.mark.parametrize("tr", ALL)
def test_every_second_hour_is_frequent_not_a_list_of_named_hours(tr: Transition) -> None:
    # '0 */2 * * *' never fires inside a gap and fires a repeated even hour twice;
    # '0 0,2,4,...,22 * * *' (named hours) runs a skipped time after the gap, a repeat once.
    named = "0 " + ",".join(str(h) for h in range(0, 24, 2)) + " * * *"
    start, end = tr.at - timedelta(hours=12), tr.at + timedelta(hours=12)
    stepped = fires_between("0 */2 * * *", tr.zone, start, end)
    listed = fires_between(named, tr.zone, start, end)
    walls = [f.astimezone(tr.tz).replace(tzinfo=None) for f in stepped]
    assert all(w.minute == 0 and w.hour % 2 == 0 for w in walls), walls
    low, high = tr.odd_wall_times
    odd_even_hours = [
        low.replace(minute=0) + timedelta(hours=h)
        for h in range(0, 3)
        if low <= low.replace(minute=0) + timedelta(hours=h) < high
        and (low.replace(minute=0) + timedelta(hours=h)).hour % 2 == 0
    ]
    if not odd_even_hours:
        assert stepped == listed
    elif tr.spring_forward:
        assert len(stepped) == len(listed) - 1
    else:
        assert Counter(walls)[odd_even_hours[0]] == 2
        assert len(stepped) == len(listed) + 1


@pytest.mark.parametrize(
    ("zone", "expression", "days", "per_day"),
    [
        # Summer (DST on): every quarter hour of each local weekday, 00:00 to 23:45.
        ("America/New_York", "*/15 * * * 1-5", (date(2026, 7, 3), date(2026, 7, 7)), 96),
        ("Europe/Berlin", "0 * 1 * *", (date(2026, 7, 31), date(2026, 8, 2)), 24),
        ("Australia/Lord_Howe", "*/30 * * * 6", (date(2026, 12, 4), date(2026, 12, 6)), 48),
    ],
)
def test_frequent_schedule_with_a_day_restriction_fires_on_those_local_days_only(
    zone: str, expression: str, days: tuple[date, date], per_day: int
) -> None:
    tz = ZoneInfo(zone)
    start = datetime.combine(days[0], time(0), tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    end = datetime.combine(days[1], time(23, 59), tzinfo=tz).astimezone(UTC)
    fires = fires_between(expression, zone, start, end)
    cron = parse(expression, zone)
    by_day = Counter(local_day(f, tz) for f in fires)
    for day, n in by_day.items():
        assert cron.day_matches(day), f"fired {n} times on {day:%a %d %b}, not a matching day"
    matching = [
        days[0] + timedelta(days=n)
        for n in range((days[1] - days[0]).days + 1)
        if cron.day_matches(days[0] + timedelta(days=n))
    ]
    assert matching and all(by_day[d] == per_day for d in matching), by_day


# -- (d) one fire per matching day across a month that spans a transition ----------------


@pytest.mark.parametrize("tr", ALL)
def test_one_fire_per_matching_day_across_a_month(tr: Transition) -> None:
    start, end = tr.at - timedelta(days=15), tr.at + timedelta(days=15)
    first_day = local_day(start, tr.tz) + timedelta(days=1)
    last_day = local_day(end, tr.tz) - timedelta(days=1)
    days = [first_day + timedelta(days=n) for n in range((last_day - first_day).days + 1)]
    low, high = tr.odd_wall_times
    odd = low + (high - low) / 2
    odd_expression = f"{odd.minute} {odd.hour} * * *"

    for expression, wanted in [
        ("30 9 * * *", days),
        ("0 9 * * 1-5", [d for d in days if d.isoweekday() <= 5]),
        ("45 23 * * 0,6", [d for d in days if d.isoweekday() >= 6]),
        (odd_expression, days),
    ]:
        fires = [
            f for f in fires_between(expression, tr.zone, start, end) if local_day(f, tr.tz) in days
        ]
        per_day = Counter(local_day(f, tr.tz) for f in fires)
        assert sorted(per_day) == wanted, (tr, expression)
        assert set(per_day.values()) == {1}, (tr, expression, per_day)
        if expression == odd_expression:
            continue
        minute, hour = (int(v) for v in expression.split()[:2])
        assert {f.astimezone(tr.tz).time() for f in fires} == {time(hour, minute)}, expression


def test_a_daily_run_moves_by_the_shift_in_utc_across_each_change() -> None:
    # The daily 09:30 run in New York moves by one real hour in UTC across each change.
    for tr in find_transitions("America/New_York"):
        before = next_fire("30 9 * * *", tr.zone, tr.at - timedelta(days=2))
        after = next_fire("30 9 * * *", tr.zone, tr.at + timedelta(days=1))
        assert after - before == timedelta(days=3) - (tr.after - tr.before), tr


# -- bad input --------------------------------------------------------------------------


def test_never_firing_expression_is_refused_in_bounded_time() -> None:
    started = timer.perf_counter()
    with pytest.raises(CronError, match=r"'0 0 31 2 \*' never fires"):
        parse("0 0 31 2 *", "Europe/Berlin")
    with pytest.raises(CronError, match="never fires"):
        parse("0 0 30,31 2 *", "America/Santiago")
    with pytest.raises(CronError, match="never fires"):
        parse("0 0 31 4,6,9,11 *", "UTC")
    assert timer.perf_counter() - started < 2.0


def test_rare_but_possible_expressions_are_accepted() -> None:
    # 29 February fires in leap years only; the bounded search must still find it.
    assert next_fire("0 0 29 2 *", "UTC", datetime(2026, 3, 1, tzinfo=UTC)) == datetime(
        2028, 2, 29, tzinfo=UTC
    )
    # Both day fields restricted: either may match (cron's rule), so this fires on the
    # Mondays of February although 31 February does not exist.
    monday = next_fire("0 0 31 2 1", "UTC", datetime(2026, 1, 1, tzinfo=UTC))
    assert monday == datetime(2026, 2, 2, tzinfo=UTC)
    # 7 is Sunday, like 0.
    assert next_fire("0 0 * * 7", "UTC", datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 1, 4, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("61 * * * *", "out of range"),
        ("0 24 * * *", "invalid cron expression"),
        ("0 0 * 13 *", "invalid cron expression"),
        ("0 0 * * 8", "invalid cron expression"),
        ("a b c d e", "invalid cron expression"),
        ("* * *", "must have five fields: minute hour day month weekday"),
        ("* * * * * *", "must have five fields"),
        ("@daily", "must have five fields"),
        ("not a cron", "must have five fields"),
        # L, W and # (last day, nearest weekday, nth weekday) are not supported: refused,
        # never silently read as something else ('5#2' as every Friday, '15W' as the 15th).
        ("0 0 L * *", "not support"),
        ("0 0 L 2 *", "not support"),
        ("0 0 * * 5L", "(not support|invalid cron expression)"),
        ("0 0 LW * *", "(not support|invalid cron expression)"),
        ("0 0 * * 5#2", "(not support|invalid cron expression)"),
        ("0 0 15W * *", "(not support|invalid cron expression)"),
    ],
)
def test_bad_expressions_are_refused_with_a_clear_message(expression: str, why: str) -> None:
    # The message names the expression and says what is wrong with it.
    with pytest.raises(CronError, match=f"(?=.*{re.escape(repr(expression))})(?=.*{why})"):
        parse(expression, "UTC")


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("PST", r"unknown time zone 'PST' \(use an IANA Area/Location name"),
        ("EST", r"unknown time zone 'EST'"),
        ("Asia/Beijing", r"unknown time zone 'Asia/Beijing'"),
        ("Mars/Olympus", r"unknown time zone 'Mars/Olympus'"),
        ("", r"time zone is required \(an IANA name such as Europe/Berlin\)"),
        ("   ", r"time zone is required"),
        ("EST5EDT", r"unknown time zone"),
        ("Etc/GMT+5", r"unknown time zone"),
        ("posix/Europe/Berlin", r"unknown time zone"),
        ("../../etc/passwd", r"unknown time zone"),
    ],
)
def test_bad_zones_are_refused_with_a_clear_message(zone: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse("0 9 * * *", zone)
    with pytest.raises(CronError, match=message):
        check_timezone(zone)


def test_good_zones_are_accepted() -> None:
    for zone in [*ZONES, "UTC", "America/Argentina/Buenos_Aires", "Asia/Kolkata"]:
        assert parse("0 9 * * *", zone).zone == ZoneInfo(zone)
    # 09:00 in Kolkata (UTC+05:30) is 03:30 UTC.
    assert next_fire("0 9 * * *", "Asia/Kolkata", datetime(2026, 6, 1, tzinfo=UTC)) == datetime(
        2026, 6, 1, 3, 30, tzinfo=UTC
    )


def test_naive_after_is_refused() -> None:
    with pytest.raises(CronError, match="aware"):
        next(parse("* * * * *", "UTC").fires_after(datetime(2026, 1, 1)))
