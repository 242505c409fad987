"""The dateparser call behind services/core/time_window.find_window: a phrase's date and granularity."""

from __future__ import annotations

from datetime import datetime
from dateparser.date import DateDataParser

from services.core.time_window import TimeWindow, find_window


def parse_phrase(text: str, reference: datetime) -> tuple[datetime, str] | None:
    # English only: detecting the language per phrase is most of dateparser's cost.
    settings = {"RELATIVE_BASE": reference.replace(tzinfo=None), "PREFER_DATES_FROM": "past",
                "PREFER_DAY_OF_MONTH": "first"}
    try:
        data = DateDataParser(languages=["en"], settings=settings).get_date_data(text)
    except (ValueError, OverflowError):  # an out-of-range date is no window
        return None
    if data.date_obj is None or data.period not in ("day", "week", "month", "year"):
        return None
    return data.date_obj, data.period


def question_window(question: str, reference: datetime) -> TimeWindow | None:
    return find_window(question, reference, parse_phrase)
