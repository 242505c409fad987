"""A thread answer is capped: a writer who floods one thread cannot make every reader of it load the
whole flood. The cap keeps the thread's latest rows, says that earlier ones exist, and counts only
rows the caller may read (so `truncated` tells a reader nothing of rows hidden from it)."""

from __future__ import annotations

import pytest

from orgmem.client import Client
from tests.conftest import create_key

pytestmark = pytest.mark.slow


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def docs(thread: str, n: int, acl=None, start_day: int = 1) -> list[dict]:
    return [{"text": f"{thread} update {start_day + i}: the plan moves to step {start_day + i}.", "date": f"2025-03-{start_day + i:02d}",
             "thread": thread, "author": "pm@corp.example", **({"acl": acl} if acl else {})} for i in range(n)]


def test_a_long_thread_answers_its_latest_rows_within_the_cap(live_server, settings):
    client = live_server.client
    written = client.post("/v1/documents", json={"documents": docs("long", 6) + docs("mixed", 3)
                                                 + docs("mixed", 3, acl=["finance"], start_day=10)})
    assert written.status_code == 200, written.text
    ids = written.json()["row_ids"]
    position = written.json()["position"]
    assert client.post("/v1/query", json={"q": "plan", "after": position}).status_code == 200
    settings.limits.max_thread_rows = 4

    answer = client.get("/v1/threads/long").json()
    assert [r["row_id"] for r in answer["rows"]] == ids[2:6] and answer["truncated"] is True
    assert set(answer["versions"]) <= set(ids[2:6])
    two = client.get("/v1/threads/long", params={"limit": 2}).json()
    assert [r["row_id"] for r in two["rows"]] == ids[4:6] and two["truncated"] is True
    for bad in (5, 0, -1, "all", "1e9"):
        refused = client.get("/v1/threads/long", params={"limit": bad})
        assert refused.status_code == 422, (bad, refused.text)
    assert "limits.max_thread_rows" in client.get("/v1/threads/long", params={"limit": 5}).text

    alice = bearer(create_key(settings.data_dir, role="reader", principal="alice@corp.example", groups=("eng",)))
    seen = client.get("/v1/threads/mixed", headers=alice).json()
    assert [r["row_id"] for r in seen["rows"]] == ids[6:9] and seen["truncated"] is False
    fay = bearer(create_key(settings.data_dir, role="reader", principal="fay@corp.example", groups=("finance",)))
    full = client.get("/v1/threads/mixed", headers=fay).json()
    assert [r["row_id"] for r in full["rows"]] == ids[8:12] and full["truncated"] is True

    with Client(live_server.url, api_key=live_server.token) as typed:
        latest = typed.thread("long", limit=3)
    assert [r.row_id for r in latest.rows] == ids[3:6] and latest.truncated
