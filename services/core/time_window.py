"""Time in the question: the date window a phrase like "in March 2025" or "two weeks ago" names.

Pure: the phrase is found here by a cheap, conservative pattern (a month name needs a preposition
or a year beside it, so "may we" is no window; a bare number is never one), and the phrase's
date and granularity come from a parser the caller gives (services/app/time_parse.py wraps
dateparser). This module turns that point and granularity into a [start, end) window in UTC and
does what the library does not: quarters, and "since"/"before" as open-ended bounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

YEAR_MIN, YEAR_MAX = 1000, 8999  # schemas/documents.py's DATE_MIN..DATE_MAX window
_EARLIEST, _LATEST = datetime(YEAR_MIN, 1, 1, tzinfo=UTC), datetime(YEAR_MAX + 1, 1, 1, tzinfo=UTC)

# (text, reference) -> (point, period) where period is "day", "week", "month" or "year"; None = unread
Parser = Callable[[str, datetime], "tuple[datetime, str] | None"]

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_NUM = r"(?:\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?:day|week|month|year)s?"
_YEAR = r"(?<!\d)\d{4}(?!\d)"
_PHRASE = re.compile(
    r"\b(?P<bound>since|before|after|in|during|from)?\s*(?P<body>"
    r"(?:last|this|past|previous)\s+quarter"
    r"|q[1-4]\s+" + _YEAR +
    r"|(?:last|this|past|previous)\s+(?:week|month|year)"
    r"|" + _NUM + r"\s+" + _UNIT + r"\s+ago"
    r"|yesterday|today"
    r"|" + _MONTH + r"\s+" + _YEAR +
    r"|(?<=since\s)" + _MONTH + r"|(?<=in\s)" + _MONTH + r"|(?<=before\s)" + _MONTH + r"|(?<=during\s)" + _MONTH +
    r"|(?<=in\s)" + _YEAR + r"|(?<=since\s)" + _YEAR + r"|(?<=before\s)" + _YEAR + r"|(?<=during\s)" + _YEAR +
    r"|(?<=after\s)" + _YEAR +
    r")\b", re.IGNORECASE)
# Cheap gate before the regex above: most questions name no time at all.
_GATE = re.compile(r"\d{4}|ago|yesterday|today|last|this|past|previous|since|before|in\s|during|q[1-4]",
                   re.IGNORECASE)


# A second time named outside the phrase read ("between March and May 2025", "Q1 2025 against
# Q2 2025"): one phrase's window would drop rows the question asks for, so no window is read.
_OTHER_TIME = re.compile(
    r"\bbetween\b|(?<!\d)\d{4}(?!\d)|\bmay\s+\d{4}\b|\b(?:january|jan|february|feb|march|april|apr|june|jun|"
    r"july|jul|august|aug|september|sept|sep|october|oct|november|nov|december|dec)\b", re.IGNORECASE)


def names_a_time(text: str) -> bool:
    """Whether `text` names a year, a month or a "between": a time a single bound would cut."""
    return _OTHER_TIME.search(text) is not None


@dataclass(frozen=True)
class TimeWindow:
    start: datetime | None  # None = open (before ...)
    end: datetime | None  # exclusive; None = open
    text: str


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _add_months(moment: datetime, months: int) -> datetime:
    index = moment.year * 12 + moment.month - 1 + months
    return moment.replace(year=index // 12, month=index % 12 + 1, day=1)


def period_window(point: datetime, period: str) -> tuple[datetime, datetime]:
    """The whole day, week (Monday first), month or year that holds `point`."""
    day = _utc(point).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        return start, _add_months(start, 1)
    if period == "year":
        start = day.replace(month=1, day=1)
        return start, start.replace(year=start.year + 1)
    return day, day + timedelta(days=1)


def quarter_window(reference: datetime, offset: int = 0) -> tuple[datetime, datetime]:
    """The calendar quarter `offset` quarters from the one holding `reference` (-1 = last)."""
    ref = _utc(reference)
    start = _add_months(ref.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
                        -((ref.month - 1) % 3) + 3 * offset)
    return start, _add_months(start, 3)


def _in_range(*moments: datetime | None) -> bool:
    return all(m is None or _EARLIEST <= m <= _LATEST for m in moments)


def find_window(question: str, reference: datetime, parse: Parser) -> TimeWindow | None:
    """The first time phrase in the question as a window, or None when there is none."""
    if not _GATE.search(question):
        return None
    reference = _utc(reference)
    for match in _PHRASE.finditer(question):
        body, bound = match.group("body"), (match.group("bound") or "").lower()
        words = body.lower().split()
        if words[-1] == "quarter":
            span = quarter_window(reference, 0 if words[0] == "this" else -1)
        elif words[0].startswith("q") and len(words) == 2:
            year = int(words[1])
            if not YEAR_MIN <= year <= YEAR_MAX:
                continue
            span = quarter_window(datetime(year, 3 * int(words[0][1]) - 2, 1, tzinfo=UTC))
        else:
            # dateparser reads "last month" but not its synonyms "past month", "previous month"
            parsed = parse(re.sub(r"^(?:past|previous)\b", "last", body, flags=re.IGNORECASE), reference)
            if parsed is None:
                continue
            span = period_window(*parsed)
        start, end = span
        if bound == "since":  # from the phrase's start up to the reference time
            end = max(reference, start)
        elif bound == "before":
            start, end = None, start
        elif bound == "after":
            start, end = end, None
        if not _in_range(start, end):
            continue
        rest = question[:match.start()] + " " + question[match.end():]
        if names_a_time(rest):
            return None
        return TimeWindow(start=start, end=end, text=match.group(0).strip())
    return None
