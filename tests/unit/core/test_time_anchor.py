"""The event phrase of a question ("before the reorg"): what is read, and what is not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.core.time_anchor import anchor_window, find_anchor


@pytest.mark.parametrize(("question", "bound", "terms", "text"), [
    ("what did we know before the reorg?", "before", ("reorg",), "before the reorg"),
    ("What did we know Before The Reorg", "before", ("reorg",), "Before The Reorg"),
    ("decisions after the outage in the EU region", "after", ("outage",), "after the outage"),
    ("what changed since the Berlin office move", "since", ("berlin", "office", "move"),
     "since the Berlin office move"),
    ("who owned billing before the re-org was announced", "before", ("re-org",), "before the re-org"),
    ("before the end of the year, and before the launch", "before", ("launch",), "before the launch"),
])
def test_an_event_phrase_is_read(question, bound, terms, text):
    anchor = find_anchor(question)
    assert anchor is not None and (anchor.bound, anchor.terms, anchor.text) == (bound, terms, text)


@pytest.mark.parametrize("question", [
    "what did we know before reorg",  # no article
    "before the end of March",  # a time, not an event (and a month besides)
    "after the weekend",
    "before the 2025 reorg",  # a year: a calendar time, read by the calendar rule or not at all
    "before the reorg in March 2025",  # a second, calendar time
    "between the reorg and the launch",
    "before the the",
    "what was decided about the vendor",
    "",
])
def test_no_event_phrase_reads_nothing(question):
    assert find_anchor(question) is None


def test_the_window_is_before_the_date_exclusive_or_from_it_on():
    moment = datetime(2025, 3, 10, tzinfo=UTC)
    before, after = find_anchor("x before the reorg"), find_anchor("x after the reorg")
    assert (anchor_window(before, moment).start, anchor_window(before, moment).end) == (None, moment)
    assert (anchor_window(after, moment).start, anchor_window(after, moment).end) == (moment, None)
