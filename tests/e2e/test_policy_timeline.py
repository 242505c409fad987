"""The as-of scenario over real HTTP: a policy set in March, revised in June, reversed in September."""

import time
from datetime import UTC, datetime

import httpx

POLICY = [
    ("2025-03-10", "maria.santos@corp.example", "Remote work policy: starting this month every team may work remotely two days per week."),
    ("2025-06-16", "devon.clark@corp.example", "Update to the remote work policy: from July, remote work is allowed three days per week."),
    ("2025-09-22", "priya.natarajan@corp.example", "Remote work policy reversed: from October everyone is back in the office five days, remote work only by exception."),
]
FILLER = [
    "Quarterly revenue review moved to Thursday afternoon.",
    "The cafeteria menu now includes vegetarian options every day.",
    "Please rotate your VPN certificates before the end of the month.",
    "Onboarding checklist for new engineers updated with laptop setup steps.",
    "Travel expenses above 500 euros need director approval.",
    "The on-call rotation for the payments team changes weekly on Monday.",
    "Security training is mandatory for all staff this quarter.",
    "Data retention for support tickets is 18 months.",
]


def post(server, path, body):
    response = server.client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def policy_rows(result, ids):
    return [row for row in result["rows"] if row["row_id"] in ids]


def test_as_of_and_known_at_over_http(live_server):
    filler = [{"text": t, "author": "ops@corp.example", "date": f"2025-0{1 + i % 9}-05", "kind": "email"} for i, t in enumerate(FILLER)]
    first = post(live_server, "/v1/documents", {"documents": filler + [
        {"text": text, "author": author, "date": date, "kind": "email", "thread": "remote-work"}
        for date, author, text in POLICY[:2]]})
    march, june = first["row_ids"][-2:]
    time.sleep(0.05)
    between = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    second = post(live_server, "/v1/documents", {"documents": [
        {"text": POLICY[2][2], "author": POLICY[2][1], "date": POLICY[2][0], "kind": "email", "thread": "remote-work"}]})
    september = second["row_ids"][0]
    after = second["position"]
    ids = {march, june, september}
    q = "What is the remote work policy?"

    july = post(live_server, "/v1/query", {"q": q, "as_of": "2025-07-15", "after": after})
    found = policy_rows(july, ids)
    assert {r["row_id"] for r in found} == {march, june}
    assert september not in july["evidence"]
    for row in found:  # each version headed by its date in the rendered evidence
        assert row["date"][:10] in july["evidence"]
    assert "2025-09-22" not in july["evidence"]

    april = post(live_server, "/v1/query", {"q": q, "as_of": "2025-04-01", "after": after})
    assert {r["row_id"] for r in policy_rows(april, ids)} == {march}

    now = post(live_server, "/v1/query", {"q": q, "after": after})
    assert {r["row_id"] for r in policy_rows(now, ids)} == ids

    for as_of in (None, "2025-12-31", "2030-01-01"):
        body = {"q": q, "known_at": between, "after": after}
        if as_of:
            body["as_of"] = as_of
        then = post(live_server, "/v1/query", body)
        assert september not in {r["row_id"] for r in then["rows"]}
        assert {r["row_id"] for r in policy_rows(then, ids)} == {march, june}


def test_evidence_header_and_leg_ranks(live_server):
    ingest = post(live_server, "/v1/documents", {"documents": [
        {"text": POLICY[0][2], "author": POLICY[0][1], "date": POLICY[0][0], "kind": "email"}]})
    result = post(live_server, "/v1/query", {"q": "remote work policy", "after": ingest["position"], "k": 5})
    top = result["rows"][0]
    assert top["row_id"] == ingest["row_ids"][0]
    assert set(top["leg_ranks"]) >= {"lex", "vec"} and top["reason"] == "fused"
    assert result["evidence"].startswith(f"[1] 2025-03-10 · {POLICY[0][1]} · email")


def test_reserve_per_request(live_server):
    docs = [{"text": text, "author": author, "date": date, "kind": "email"} for date, author, text in POLICY]
    docs += [{"text": f"Remote work tip {i}: a quiet room helps.", "author": "ops@corp.example",
              "date": f"2025-1{i}-01", "kind": "email"} for i in range(3)]
    ingest = post(live_server, "/v1/documents", {"documents": docs})
    body = {"q": "remote work policy", "after": ingest["position"], "k": 3, "preset": "paper-orgmembench"}
    # The paper's settings: with k at the reserve (3), every slot goes to the latest-dated matches.
    default = post(live_server, "/v1/query", body)
    assert [r["reason"] for r in default["rows"]] == ["reserve"] * 3
    assert [r["date"][:10] for r in default["rows"]] == ["2025-12-01", "2025-11-01", "2025-10-01"]
    ranked = post(live_server, "/v1/query", {**body, "reserve": 0})
    assert [r["reason"] for r in ranked["rows"]] == ["fused"] * 3
    assert ranked["rows"][0]["row_id"] in ingest["row_ids"][:3]
    mixed = post(live_server, "/v1/query", {**body, "k": 4, "reserve": 1})
    assert [r["reason"] for r in mixed["rows"]] == ["fused"] * 3 + ["reserve"]
    # The default preset keeps no reserve: every slot by its selector.
    no_preset = {key: value for key, value in body.items() if key != "preset"}
    assert [r["reason"] for r in post(live_server, "/v1/query", no_preset)["rows"]] == ["coverage"] * 3
    too_many = live_server.client.post("/v1/query", json={**body, "reserve": 100000})
    assert too_many.status_code == 422 and "reserve" in too_many.json()["detail"]


def test_row_and_thread_views_and_duplicates(live_server):
    docs = [{"text": text, "author": author, "date": date, "thread": "remote-work"} for date, author, text in POLICY]
    first = post(live_server, "/v1/documents", {"documents": docs})
    again = post(live_server, "/v1/documents", {"documents": docs[:1] + [{"text": "   ", "author": "x"}]})
    assert again["row_ids"][0] == first["row_ids"][0]  # an exact repeat names the row it repeats
    post(live_server, "/v1/query", {"q": "policy", "after": again["position"]})
    row = live_server.client.get(f"/v1/rows/{first['row_ids'][1]}").json()
    assert row["row"]["text"] == POLICY[1][2] and row["history"][0]["change"] == "observed"
    thread = live_server.client.get("/v1/threads/remote-work").json()
    assert [r["event_time"][:10] for r in thread["rows"]] == [p[0] for p in POLICY]
    stats = live_server.client.get("/v1/stats").json()
    assert stats["rows"]["active"] == 3 and stats["rows"]["skipped"] == 2
    missing = live_server.client.get(f"/v1/rows/{again['row_ids'][1]}")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/problem+json")


def test_bad_requests_name_the_field(live_server):
    response = live_server.client.post("/v1/documents", json={"documents": [{"text": "ok"}, {"author": "no text"}]})
    assert response.status_code == 422
    problem = response.json()
    assert problem["status"] == 422 and "documents.1.text" in problem["detail"]
    stats = live_server.client.get("/v1/stats").json()
    assert stats["log_head"] == 0  # nothing half-written
    response = live_server.client.post("/v1/query", json={"q": "x", "k": 100000})
    assert response.status_code == 422 and "k" in response.json()["detail"]
    response = live_server.client.post("/v1/query", json={"q": "x", "as_of": "not a date"})
    assert response.status_code == 422 and "as_of" in response.json()["detail"]
    response = live_server.client.post("/v1/documents", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422


def test_health_ready_metrics_openapi(live_server):
    assert httpx.get(live_server.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(live_server.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["lag"] >= 0
    post(live_server, "/v1/documents", {"documents": [{"text": "metrics check"}]})
    metrics = httpx.get(live_server.url + "/metrics").text
    assert "orgmem_documents_ingested_total 1.0" in metrics
    spec = httpx.get(live_server.url + "/openapi.json").json()
    assert {"/v1/documents", "/v1/query", "/v1/rows/{row_id}"} <= set(spec["paths"])
