"""bench/people.py's questions say what they claim: a person question's gold is that person's
decisions, a time question's phrase reads as the month its gold is dated in."""

from __future__ import annotations

from datetime import UTC, date, datetime

from bench.people import questions_of
from services.app.time_parse import question_window
from services.demo.synthetic_org import generate


def test_person_and_time_questions_match_their_gold(tmp_path):
    org = generate(tmp_path / "org", seed=5, threads=6, filler=0.1)
    questions = questions_of(org)
    people = [q for q in questions if q["kind"] == "person"]
    times = [q for q in questions if q["kind"] == "time"]
    assert people and times
    assert {q["form"] for q in people} == {"full name", "first name", "address"}
    assert {q["half"] for q in questions} == {"tune", "held-out"}
    assert all(q["gold"] for q in questions)
    for q in times:
        reference = (datetime.fromisoformat(q["reference_time"].replace("Z", "+00:00")) if q["reference_time"]
                     else datetime(2030, 1, 1, tzinfo=UTC))
        window = question_window(q["q"], reference)
        assert window is not None, q["q"]
        assert window.start.day == 1 and (window.end - window.start).days in (28, 29, 30, 31), q["q"]
    # The decider's forms: each person question names one of the thread's version authors.
    authors = {v["author"] for t in org.threads for v in t["versions"]}
    firsts = {a.split()[0] for a in authors}
    for q in people:
        who = q["q"].removeprefix("What did ").split(" decide about")[0]
        assert who in authors or who in firsts or who.endswith("@kestrelbay.example")
    assert date.fromisoformat(org.threads[0]["versions"][0]["date"])  # the dates the gold is read from
