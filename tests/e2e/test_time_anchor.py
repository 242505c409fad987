"""An event as the time in the question ("before the reorg"), over real HTTP: the earliest dated
row the caller may read whose title holds the event's words dates it; a private group's earlier
row never dates it for an outsider (nor leaks through `anchor_row_id`), a row after as_of is not
known yet, and no such row reads no window."""

from __future__ import annotations

import pytest

from tests.e2e.test_people_routes import acme_keys, call, served, write

pytestmark = pytest.mark.slow

DOCS = [
    {"text": "We decided the vendor contract goes to Northwind.", "date": "2025-01-20T00:00:00Z",
     "title": "Vendor contract", "source": "d", "source_id": "jan"},
    {"text": "Board only: the reorg is being planned, do not share.", "date": "2025-02-01T00:00:00Z",
     "title": "Reorg planning", "acl": ["group:board"], "source": "d", "source_id": "secret"},
    {"text": "We decided the vendor contract moves to Contoso.", "date": "2025-02-20T00:00:00Z",
     "title": "Vendor contract, revised", "source": "d", "source_id": "feb"},
    {"text": "The reorg is announced today: platform and data merge into one team.", "date": "2025-03-10T00:00:00Z",
     "title": "Reorg announced", "source": "d", "source_id": "announce"},
    {"text": "Later mail that mentions the reorg in passing and the vendor contract.", "date": "2025-03-20T00:00:00Z",
     "title": "Vendor contract after the change", "source": "d", "source_id": "mar"},
]


def test_before_and_after_an_event_use_the_readable_row_that_dates_it(tmp_path):
    data = tmp_path / "data"
    writer, outsider, board = acme_keys(data)
    with served(data) as (server, _memory):
        made = write(server, writer, DOCS)
        ids = dict(zip([d["source_id"] for d in DOCS], made["row_ids"], strict=True))
        after = made["position"]

        def ask(token, q, **body):
            answer = call(server, token, "POST", "/v1/query",
                          json={"q": q, "k": 10, "lexical_match": "any", "after": after, "time_rules": True, **body})
            assert answer.status_code == 200, answer.text
            found = answer.json()
            return found, {r["row_id"] for r in found["rows"]}

        window, rows = ask(outsider, "what did we decide about the vendor contract before the reorg?")
        assert window["time_window"] == {"start": None, "end": "2025-03-10T00:00:00Z", "phrase": "before the reorg",
                                         "anchor_row_id": ids["announce"]}
        assert rows == {ids["jan"], ids["feb"]}

        # The board may read the planning row: for them the reorg is dated by it.
        window, rows = ask(board, "what did we decide about the vendor contract before the reorg?")
        assert window["time_window"]["anchor_row_id"] == ids["secret"]
        assert window["time_window"]["end"] == "2025-02-01T00:00:00Z" and rows == {ids["jan"]}

        window, rows = ask(outsider, "what about the vendor contract since the reorg was announced")
        assert window["time_window"]["start"] == "2025-03-10T00:00:00Z" and window["time_window"]["end"] is None
        assert rows == {ids["announce"], ids["mar"]}

        # Known by as_of 2025-03-01, the reorg has no dated row yet for the outsider: no window.
        window, rows = ask(outsider, "the vendor contract before the reorg", as_of="2025-03-01T00:00:00Z")
        assert window["time_window"] is None and rows == {ids["jan"], ids["feb"]}

        # An event no title holds, and a time word, read nothing; with time_rules off nothing is read.
        for q in ("the vendor contract before the merger", "the vendor contract before the end of the quarter"):
            assert ask(outsider, q)[0]["time_window"] is None
        assert ask(outsider, "vendor contract before the reorg", time_rules=False)[0]["time_window"] is None
