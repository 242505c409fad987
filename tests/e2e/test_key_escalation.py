"""Key creation over real HTTP, attacked: an admin that is not unrestricted tries to mint keys that
read more than it may; keys expire; and a failing event log answers 503 naming it, leaving no key
behind that was not audited."""

from __future__ import annotations

import time

from tests.conftest import create_key


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_a_restricted_admin_cannot_mint_more_than_it_holds(live_server, settings):
    root = live_server.client  # an unrestricted admin of the default tenant
    finance = root.post("/v1/documents", json={"documents": [
        {"text": "Finance only: the acquisition of Initech closes in June.", "acl": ["finance"]},
        {"text": "Engineering: the acquisition needs a data migration.", "acl": ["eng"]}]})
    assert finance.status_code == 200, finance.text
    finance_row, eng_row = finance.json()["row_ids"]
    after = finance.json()["position"]
    rhea = bearer(create_key(settings.data_dir, role="admin", principal="rhea", groups=("eng",), unrestricted=False))

    attempts = {
        "an unrestricted admin key": {"principal": "rhea", "role": "admin", "unrestricted": True},
        "a group rhea is not in": {"principal": "rhea", "role": "reader", "groups": ["eng", "finance"]},
        "another principal": {"principal": "cfo", "role": "reader"},
        "a group as principal": {"principal": "finance", "role": "reader"},
        "an unrestricted reader key": {"principal": "rhea", "role": "reader", "unrestricted": True},
    }
    for name, body in attempts.items():
        refused = root.post("/v1/admin/keys", json=body, headers=rhea)
        assert refused.status_code == 403, f"{name}: {refused.status_code} {refused.text}"
        assert refused.json()["type"].endswith("forbidden") and "token" not in refused.json()
    other_tenant = root.post("/v1/admin/keys", json={"principal": "rhea", "role": "reader", "tenant": "globex"},
                             headers=rhea)
    assert other_tenant.status_code == 422  # the tenant is always the creator's; no field names another
    listed = root.get("/v1/admin/keys").json()["keys"]
    assert {k["principal"] for k in listed} == {"test-admin", "rhea"}, listed  # nothing was minted

    own = root.post("/v1/admin/keys", json={"principal": "rhea", "role": "reader", "groups": ["eng"]}, headers=rhea)
    assert own.status_code == 201, own.text
    token = own.json()["token"]
    seen = root.post("/v1/query", headers=bearer(token), json={"q": "acquisition", "after": after}).json()
    assert {r["row_id"] for r in seen["rows"]} == {eng_row}
    assert root.get(f"/v1/rows/{finance_row}", headers=bearer(token)).status_code == 404

    # An unrestricted admin still may.
    made = root.post("/v1/admin/keys", json={"principal": "auditor", "role": "reader", "groups": ["finance"]})
    assert made.status_code == 201
    assert root.post("/v1/admin/keys", json={"principal": "ops", "role": "admin", "unrestricted": True}).status_code == 201


def test_keys_expire(live_server):
    client = live_server.client
    made = client.post("/v1/admin/keys", json={"principal": "ci", "role": "reader", "expires_in_s": 2})
    assert made.status_code == 201, made.text
    key, token = made.json()["key"], made.json()["token"]
    assert key["expires_at"] is not None
    assert client.post("/v1/query", headers=bearer(token), json={"q": "x"}).status_code == 200
    listed = {k["key_id"]: k for k in client.get("/v1/admin/keys").json()["keys"]}
    assert listed[key["key_id"]]["expires_at"] == key["expires_at"]
    time.sleep(2.2)
    expired = client.post("/v1/query", headers=bearer(token), json={"q": "x"})
    assert expired.status_code == 401, expired.text  # verified before, so cached: expiry still applies

    for bad in ({"expires_at": "2001-01-01T00:00:00Z"}, {"expires_at": "2099-01-01T00:00:00"},
                {"expires_in_s": 0}, {"expires_in_s": 60, "expires_at": "2099-01-01T00:00:00Z"}):
        answer = client.post("/v1/admin/keys", json={"principal": "ci", "role": "reader", **bad})
        assert answer.status_code == 422, f"{bad}: {answer.status_code} {answer.text}"


def test_a_failing_event_log_answers_503_and_mints_no_key(live_server):
    client = live_server.client
    event_log = live_server.server.config.app.state.orgmem.memory.event_log
    with event_log._lock:  # the log's file now refuses writes (SQLITE_READONLY), as on a read-only mount
        event_log._conn.execute("PRAGMA query_only=ON")
    try:
        for path, body in (("/v1/documents", {"documents": [{"text": "written while the disk refuses"}]}),
                           ("/v1/admin/keys", {"principal": "made-in-outage", "role": "admin", "unrestricted": True})):
            answer = client.post(path, json=body)
            assert answer.status_code == 503, f"{path}: {answer.status_code} {answer.text}"
            problem = answer.json()
            assert problem["component"] == "event log (sqlite)" and "token" not in problem, problem
        assert client.post("/v1/query", json={"q": "anything"}).status_code == 200  # reads keep being served
        assert "made-in-outage" not in {k["principal"] for k in client.get("/v1/admin/keys").json()["keys"]}
    finally:
        with event_log._lock:
            event_log._conn.execute("PRAGMA query_only=OFF")
    made = client.post("/v1/admin/keys", json={"principal": "made-after", "role": "reader"})
    assert made.status_code == 201
    assert client.post("/v1/query", headers=bearer(made.json()["token"]), json={"q": "x"}).status_code == 200
