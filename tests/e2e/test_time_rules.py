"""time_rules through the HTTP API: a time phrase in the question ("in March 2025") narrows the
query to that window of event dates, only when asked, never past as_of, and says what it applied."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

MONTHS = {"02": "February", "03": "March", "04": "April"}
# Two decisions a month, on days that test both edges of March (its first and last day).
DAYS = ["2025-02-12", "2025-02-28T23:59:59Z", "2025-03-01T00:00:00Z", "2025-03-31T23:59:59Z",
        "2025-04-01T00:00:00Z", "2025-04-20"]
DOCUMENTS = [{"text": f"We decided to move the {MONTHS[day[5:7]]} release train, decision {i}.", "date": day,
              "kind": "email", "author": "rita@corp.example", "source": "decisions"} for i, day in enumerate(DAYS)]
QUESTION = "what did we decide in March 2025"


@pytest.fixture
def dated(live_server):
    answer = live_server.client.post("/v1/documents", json={"documents": DOCUMENTS})
    assert answer.status_code == 200, answer.text
    ids = answer.json()["row_ids"]
    return live_server.client, dict(zip(ids, DAYS, strict=True)), answer.json()["position"]


def ask(client, after, **body) -> dict:
    answer = client.post("/v1/query", json={"k": 10, "lexical_match": "any", "after": after, **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def months(found: dict, days: dict) -> list[str]:
    return sorted(days[r["row_id"]] for r in found["rows"])


def test_the_phrase_narrows_the_query_to_march_only_when_asked(dated):
    client, days, after = dated
    on = ask(client, after, q=QUESTION, time_rules=True)
    assert months(on, days) == ["2025-03-01T00:00:00Z", "2025-03-31T23:59:59Z"]
    assert on["time_window"] == {"start": "2025-03-01T00:00:00Z", "end": "2025-04-01T00:00:00Z",
                                 "phrase": "in March 2025", "anchor_row_id": None}
    off = ask(client, after, q=QUESTION)
    assert months(off, days) == sorted(DAYS) and off["time_window"] is None
    assert ask(client, after, q=QUESTION, time_rules=False)["time_window"] is None


def test_an_earlier_as_of_caps_the_window_and_a_later_one_does_not_widen_it(dated):
    client, days, after = dated
    capped = ask(client, after, q=QUESTION, time_rules=True, as_of="2025-03-15T00:00:00Z")
    assert months(capped, days) == ["2025-03-01T00:00:00Z"]
    later = ask(client, after, q=QUESTION, time_rules=True, as_of="2025-12-31T00:00:00Z")
    assert months(later, days) == ["2025-03-01T00:00:00Z", "2025-03-31T23:59:59Z"]


def test_a_relative_phrase_is_read_against_reference_time(dated):
    client, days, after = dated
    found = ask(client, after, q="what did we decide last month", time_rules=True,
                reference_time="2025-05-10T09:00:00Z")
    assert found["time_window"]["start"] == "2025-04-01T00:00:00Z"
    assert months(found, days) == ["2025-04-01T00:00:00Z", "2025-04-20"]
    # Without reference_time, as_of is the "now": last month of March is February.
    by_as_of = ask(client, after, q="what did we decide last month", time_rules=True, as_of="2025-03-20T00:00:00Z")
    assert months(by_as_of, days) == ["2025-02-12", "2025-02-28T23:59:59Z"]


def test_a_question_without_a_phrase_is_answered_as_with_time_rules_off(dated):
    client, _, after = dated
    question = "what did we decide about the release train"
    on, off = ask(client, after, q=question, time_rules=True), ask(client, after, q=question)
    assert on["time_window"] is None
    assert [r["row_id"] for r in on["rows"]] == [r["row_id"] for r in off["rows"]] and len(on["rows"]) == 6


@pytest.mark.parametrize("reference", ["9999-12-31T00:00:00Z", "0999-01-01T00:00:00Z"])
def test_an_absurd_reference_time_is_refused_naming_the_field(dated, reference):
    client, _, _ = dated
    answer = client.post("/v1/query", json={"q": QUESTION, "time_rules": True, "reference_time": reference})
    assert answer.status_code == 422 and "reference_time" in answer.text, answer.text
