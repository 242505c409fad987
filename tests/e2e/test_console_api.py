"""The two read routes the console added to the API, over real HTTP: a tenant's connector dead
letters, and the decisions of a maintenance run. Each is admin only and the caller's tenant only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from services.connectors.base import ConnectorState, DeadLetter
from tests.conftest import create_key

pytestmark = pytest.mark.slow
RUNS = "/v1/admin/maintenance"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_dead_letters_are_the_callers_tenants_own_newest_first(live_server, settings):
    server, data = live_server, Path(settings.data_dir)
    inbox = data / "inbox" / "default"
    inbox.mkdir(parents=True)
    (inbox / "tickets.json").write_text(json.dumps([
        {"key": f"OPS-{i}", "fields": {"summary": "s", "created": "9999-12-31T23:00:00-05:00"}} for i in (1, 2)]))
    ran = server.client.post("/v1/connectors/tickets", json={"paths": [str(inbox / "tickets.json")]})
    assert ran.status_code == 200 and len(ran.json()["dead_letters"]) == 2
    # Another tenant's letter, and a legacy line that names no tenant: neither is this tenant's.
    ConnectorState(data, "email", "globex").record_dead_letters([DeadLetter("email", "/globex/secret.eml", "bad")])
    ConnectorState(data, "email").record_dead_letters([DeadLetter("email", "/legacy/secret.eml", "bad")])

    answer = server.client.get("/v1/connectors/dead-letters")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == 2 and [d["path"].rsplit("#", 1)[1] for d in body["dead_letters"]] == ["OPS-2", "OPS-1"]
    assert all(d["connector"] == "tickets" and "accepted dates" in d["reason"] for d in body["dead_letters"])
    assert "secret.eml" not in answer.text
    one = server.client.get("/v1/connectors/dead-letters", params={"limit": 1}).json()
    assert one["total"] == 2 and [d["path"] for d in one["dead_letters"]] == [body["dead_letters"][0]["path"]]
    assert server.client.get("/v1/connectors/dead-letters", params={"limit": 0}).status_code == 422

    globex = httpx.get(server.url + "/v1/connectors/dead-letters",
                       headers=bearer(create_key(data, tenant="globex", principal="gina"))).json()
    assert [d["path"] for d in globex["dead_letters"]] == ["/globex/secret.eml"] and globex["total"] == 1
    writer = create_key(data, role="writer", principal="will")
    assert httpx.get(server.url + "/v1/connectors/dead-letters", headers=bearer(writer)).status_code == 403
    # A reason may quote an item no access list has vetted: a restricted admin is refused too.
    restricted = create_key(data, principal="rhea", unrestricted=False)
    refused = httpx.get(server.url + "/v1/connectors/dead-letters", headers=bearer(restricted))
    assert refused.status_code == 403 and "unrestricted admin" in refused.json()["detail"]
    assert httpx.get(server.url + "/v1/connectors/dead-letters").status_code == 401


def wait_finished(server, run_id: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = server.client.get(f"{RUNS}/runs/{run_id}").json()
        if run["status"] in ("finished", "failed", "reverted"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish")


def test_the_decisions_of_a_run_for_its_tenants_admin_only(live_server, settings):
    server = live_server
    docs = [{"text": "Remote work policy: every team may work remotely 2 days per week, decided by Maria.",
             "author": "maria", "date": "2025-03-10", "thread": "remote"},
            {"text": "The on-call rotation for the payments team changes every Monday at 09:00.",
             "author": "kim", "date": "2025-04-01"},
            {"text": "The on-call rotation for the payments team changes every Monday at 09:00!",
             "author": "lee", "date": "2025-04-03"},
            {"text": "Remote work policy: every team may work remotely 3 days per week, decided by Maria.",
             "author": "maria", "date": "2025-06-16", "thread": "remote"}]
    ingested = server.client.post("/v1/documents", json={"documents": docs}).json()
    old, same_a, same_b, new = ingested["row_ids"]
    server.client.post("/v1/query", json={"q": "policy", "after": ingested["position"]})
    run_id = server.client.post(f"{RUNS}/consolidate", json={"tau": 0.85}).json()["run_id"]
    run = wait_finished(server, run_id)
    assert run["status"] == "finished" and run["events"] == 4

    answer = server.client.get(f"{RUNS}/runs/{run_id}/decisions")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["run_id"] == run_id and body["total"] == 4 and len(body["decisions"]) == 4
    by_row = {(d["row_id"], d["change"]): d for d in body["decisions"]}
    assert by_row[(old, "superseded")]["superseded_by"] == new
    assert (same_a, "archived") in by_row and (same_b, "archived") in by_row
    derived = [d for d in body["decisions"] if d["change"] == "derived"]
    assert len(derived) == 1 and set(derived[0]["sources"]) == {same_a, same_b}
    # A derived row's text is read through /v1/rows, where its access list applies; never here.
    assert all(set(d) == {"change", "row_id", "superseded_by", "sources", "reason"} for d in body["decisions"])
    assert "on-call rotation" not in answer.text
    first = server.client.get(f"{RUNS}/runs/{run_id}/decisions", params={"limit": 1}).json()
    assert first["total"] == 4 and first["decisions"] == body["decisions"][:1]

    globex = create_key(settings.data_dir, tenant="globex", principal="gina")
    assert httpx.get(server.url + f"{RUNS}/runs/{run_id}/decisions", headers=bearer(globex)).status_code == 404
    reader = create_key(settings.data_dir, role="reader", principal="rita")
    assert httpx.get(server.url + f"{RUNS}/runs/{run_id}/decisions", headers=bearer(reader)).status_code == 403
    assert server.client.get(f"{RUNS}/runs/no-such-run/decisions").status_code == 404
