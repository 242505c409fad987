"""Time phrases in a question as windows, against a fixed reference (Sunday 15 June 2025, noon UTC)."""

import time
from datetime import UTC, datetime

import pytest

from services.app.time_parse import question_window
from services.core.time_window import period_window, quarter_window

REF = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)


def d(y, m, day=1, h=0):
    return datetime(y, m, day, h, tzinfo=UTC)


CASES = [
    ("what happened in March 2025", "in March 2025", d(2025, 3), d(2025, 4)),
    ("decisions during March 2025?", "during March 2025", d(2025, 3), d(2025, 4)),
    ("Mar 2024 outage", "Mar 2024", d(2024, 3), d(2024, 4)),
    ("notes from December 2024", "from December 2024", d(2024, 12), d(2025, 1)),
    ("in sept 2023 who owned billing", "in sept 2023", d(2023, 9), d(2023, 10)),
    ("in February 2024 the plan", "in February 2024", d(2024, 2), d(2024, 3)),
    ("January 2025 hiring", "January 2025", d(2025, 1), d(2025, 2)),
    ("what did we ship last quarter", "last quarter", d(2025, 1), d(2025, 4)),
    ("previous quarter numbers", "previous quarter", d(2025, 1), d(2025, 4)),
    ("this quarter goals", "this quarter", d(2025, 4), d(2025, 7)),
    ("Q1 2024 revenue", "Q1 2024", d(2024, 1), d(2024, 4)),
    ("q4 2023 plan", "q4 2023", d(2023, 10), d(2024, 1)),
    ("in Q3 2025", "in Q3 2025", d(2025, 7), d(2025, 10)),
    ("what changed two weeks ago", "two weeks ago", d(2025, 5, 26), d(2025, 6, 2)),
    ("a week ago", "a week ago", d(2025, 6, 2), d(2025, 6, 9)),
    ("3 days ago the deploy", "3 days ago", d(2025, 6, 12), d(2025, 6, 13)),
    ("one day ago", "one day ago", d(2025, 6, 14), d(2025, 6, 15)),
    ("two months ago", "two months ago", d(2025, 4), d(2025, 5)),
    ("a year ago", "a year ago", d(2024, 1), d(2025, 1)),
    ("five years ago", "five years ago", d(2020, 1), d(2021, 1)),
    ("yesterday's standup", "yesterday", d(2025, 6, 14), d(2025, 6, 15)),
    ("Yesterday", "Yesterday", d(2025, 6, 14), d(2025, 6, 15)),
    ("what is due today", "today", d(2025, 6, 15), d(2025, 6, 16)),
    ("in 2024", "in 2024", d(2024, 1), d(2025, 1)),
    ("during 2023 who led", "during 2023", d(2023, 1), d(2024, 1)),
    ("incidents in 1999", "in 1999", d(1999, 1), d(2000, 1)),
    ("since January", "since January", d(2025, 1), REF),
    ("since March 2025", "since March 2025", d(2025, 3), REF),
    ("since 2024", "since 2024", d(2024, 1), REF),
    ("since yesterday", "since yesterday", d(2025, 6, 14), REF),
    ("since last month", "since last month", d(2025, 5), REF),
    ("since last quarter", "since last quarter", d(2025, 1), REF),
    ("before 2024", "before 2024", None, d(2024, 1)),
    ("before March 2025", "before March 2025", None, d(2025, 3)),
    ("before last quarter", "before last quarter", None, d(2025, 1)),
    ("after March 2025", "after March 2025", d(2025, 4), None),
    ("after 2020", "after 2020", d(2021, 1), None),
    ("previous week", "previous week", d(2025, 6, 2), d(2025, 6, 9)),
    ("last month", "last month", d(2025, 5), d(2025, 6)),
    ("last week", "last week", d(2025, 6, 2), d(2025, 6, 9)),
    ("last year", "last year", d(2024, 1), d(2025, 1)),
    ("this year", "this year", d(2025, 1), d(2026, 1)),
    ("this month", "this month", d(2025, 6), d(2025, 7)),
    ("past month", "past month", d(2025, 5), d(2025, 6)),
    ("in May", "in May", d(2025, 5), d(2025, 6)),
    ("in December", "in December", d(2024, 12), d(2025, 1)),
]


@pytest.mark.parametrize(("question", "text", "start", "end"), CASES)
def test_phrase_window(question, text, start, end):
    window = question_window(question, REF)
    if text is None:
        assert window is None
        return
    assert window is not None, question
    assert (window.text, window.start, window.end) == (text, start, end)


@pytest.mark.parametrize("question", [
    "may we ship the release", "May I ask who owns billing", "42", "what is 2024 times 3",
    "ticket 12345 status", "who owns the march planning doc", "the reorg", "in the year 99999",
    "in 99999", "in 0999", "since 12", "Q5 2024", "q1 99999", "12 monkeys", "version 3.2024",
    "", "the past", "in time", "since then", "last but not least", "this is 2024ish",
])
def test_no_window(question):
    assert question_window(question, REF) is None


def test_this_week_reads_a_monday_week():
    window = question_window("what's on this week", REF)
    assert (window.start, window.end) == (d(2025, 6, 9), d(2025, 6, 16))


def test_years_outside_the_stored_range_are_refused():
    assert question_window("in 9500", REF) is None
    assert question_window("since 0999", REF) is None
    assert question_window("in 8999", REF).start == d(8999, 1)


def test_hostile_question_full_of_dates_stays_fast():
    question = ("in March 2025 since 2024 " * 200)[:4096]
    started = time.perf_counter()
    window = question_window(question, REF)
    assert time.perf_counter() - started < 0.5
    assert window is None  # many times named: no one window is the question's
    worst = ("9" * 4096, "in " * 1365, "since " * 682, "q1 " * 1365, "ago " * 1024)
    started = time.perf_counter()
    assert all(question_window(q, REF) is None for q in worst)
    assert time.perf_counter() - started < 0.5


def test_a_naive_reference_is_utc():
    assert question_window("yesterday", REF.replace(tzinfo=None)).start == d(2025, 6, 14)


def test_window_arithmetic():
    assert quarter_window(d(2025, 1, 1), -1) == (d(2024, 10), d(2025, 1))
    assert quarter_window(d(2025, 12, 31), 0) == (d(2025, 10), d(2026, 1))
    assert period_window(d(2024, 2, 29, 5), "month") == (d(2024, 2), d(2024, 3))
    assert period_window(d(2024, 12, 31), "week") == (d(2024, 12, 30), d(2025, 1, 6))


@pytest.mark.parametrize("question", [
    "what changed between March and May 2025",  # one phrase's window (May) would drop March and April
    "compare Q1 2025 with Q2 2025",
    "in March 2025 or in April 2025",
    "decisions since January, before the June 2025 launch",
])
def test_a_question_naming_two_times_gets_no_window(question):
    assert question_window(question, REF) is None


def test_may_as_a_verb_is_not_a_second_time():
    window = question_window("what may we ship in March 2025", REF)
    assert window is not None and window.start == d(2025, 3)
