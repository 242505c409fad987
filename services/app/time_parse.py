"""The dateparser call behind services/core/time_window.find_window: a phrase's date and granularity."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from dateparser.date import DateDataParser

from services.core.time_window import TimeWindow, find_window


@lru_cache(maxsize=8)
def _parser_for(day: datetime) -> DateDataParser:
    # A parser's relative base is fixed when it is built, so one per reference day. The phrases
    # find_window reads name days at the finest (no hours), so a base at the day's midnight gives
    # the same day, week, month or year as the reference itself.
    settings = {"RELATIVE_BASE": day, "PREFER_DATES_FROM": "past", "PREFER_DAY_OF_MONTH": "first"}
    return DateDataParser(languages=["en"], settings=settings)  # English only: detection is costly


# get_date_data itself is the cost (0.4-0.9 ms a phrase; building a parser is 0.014 ms), so the
# answers are kept: a phrase asked again on the same day is a dictionary look-up.
@lru_cache(maxsize=1024)
def _parse_on(text: str, day: datetime) -> tuple[datetime, str] | None:
    try:
        data = _parser_for(day).get_date_data(text)
    except (ValueError, OverflowError):  # an out-of-range date is no window
        return None
    if data.date_obj is None or data.period not in ("day", "week", "month", "year"):
        return None
    return data.date_obj, data.period


def parse_phrase(text: str, reference: datetime) -> tuple[datetime, str] | None:
    day = reference.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    return _parse_on(text.lower(), day)


def question_window(question: str, reference: datetime) -> TimeWindow | None:
    return find_window(question, reference, parse_phrase)
