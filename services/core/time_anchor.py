"""Time in the question, named by an event: "before the reorg", "after the outage", "since the
migration". Pure: this module reads the phrase and turns the anchor row's date into a window; the
caller finds the row (services/app/time_anchor.py: a dated row of the caller's scope whose title
holds the event's words) or reads no window.

Conservative on purpose: the article is required ("before the reorg", not "before reorg"), the
event is one to three words cut at the first stopword, a word that names a time rather than an
event ("before the end of March", "after the weekend") reads nothing, and a question that also
names a calendar time (a year, a month, "between") reads nothing, as for calendar phrases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from services.core.text import STOPWORDS
from services.core.time_window import TimeWindow, names_a_time

_ANCHOR = re.compile(r"\b(?P<bound>before|after|since)\s+the\s+(?P<event>[^\W\d_][\w-]*(?:\s+[^\W\d_][\w-]*){0,2})",
                     re.IGNORECASE)
# Words after "before the" that are times or parts of one, not events
_TIME_WORDS = frozenset({
    "end", "start", "beginning", "middle", "close", "rest", "time", "day", "days", "week", "weeks", "weekend",
    "month", "months", "quarter", "quarters", "year", "years", "morning", "afternoon", "evening", "night",
    "first", "last", "next", "previous", "same", "new", "holidays", "deadline", "past", "future", "moment",
})


@dataclass(frozen=True)
class EventAnchor:
    bound: str  # "before", "after" or "since"
    terms: tuple[str, ...]  # the event's words, lower case
    text: str  # the phrase as the question wrote it


def find_anchor(question: str) -> EventAnchor | None:
    """The first "before/after/since the <event>" of the question, or None."""
    for match in _ANCHOR.finditer(question):
        words = match.group("event").lower().split()
        terms: list[str] = []
        for word in words:
            if word in STOPWORDS:
                break
            terms.append(word)
        if not terms or terms[0] in _TIME_WORDS:
            continue
        rest = question[:match.start()] + " " + question[match.end():]
        if names_a_time(rest):
            return None
        bound = match.group("bound").lower()
        # The phrase as written, up to the last event word kept
        kept = re.match(r"\S+\s+\S+" + r"\s+\S+" * len(terms), match.group(0))
        return EventAnchor(bound, tuple(terms), kept.group(0) if kept else match.group(0))
    return None


def anchor_window(anchor: EventAnchor, moment: datetime) -> TimeWindow:
    """The window the anchor's event date gives: before it (exclusive), or from it on."""
    if anchor.bound == "before":
        return TimeWindow(start=None, end=moment, text=anchor.text)
    return TimeWindow(start=moment, end=None, text=anchor.text)
