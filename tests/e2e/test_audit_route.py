"""`GET /v1/admin/audit` over real HTTP (issue 41, docs/audit.md): an admin reads its tenant's
trail (an API export, a key grant, an online backup, a restore) newest first; writers, readers
and callers without a key are refused; another tenant's admin never sees this tenant's acts,
whatever it asks for, and sees the acts on the whole data folder without their paths or counts."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime

import httpx

from schemas.documents import DocumentIn
from services.core.caller import Caller
from tests.conftest import LiveServer, create_key, free_port


@contextmanager
def served(data):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=data, indexer_poll_s=0.05, embedder={"encoder_processes": 1},
                        auth={"rate_limit": "", "failed_auth_limit": ""})
    memory, lock = build_memory(settings)
    try:
        with LiveServer(create_app(settings, memory), free_port()) as server:
            yield server
    finally:
        memory.close()
        lock.release()


def trail(server, token, **params) -> httpx.Response:
    return httpx.get(server.url + "/v1/admin/audit", params=params, headers={"Authorization": f"Bearer {token}"},
                     timeout=60)


def test_the_audit_route_gives_a_tenants_admin_its_own_trail_only(tmp_path):
    from services.cli.main import main

    data = tmp_path / "data"
    admin = create_key(data, principal="ada.lovelace")  # not hex: a key id never spells it
    globex = create_key(data, tenant="globex", principal="gus")
    writer, reader = create_key(data, role="writer", principal="walt"), create_key(data, role="reader", principal="rita")
    with served(data) as server:
        server.client.headers["Authorization"] = f"Bearer {admin}"
        position = server.client.post("/v1/documents", json={"documents": [{"text": "Acme pricing rises in May."}]}
                                      ).json()["position"]
        server.client.post("/v1/query", json={"q": "pricing", "after": position})  # indexed now
        exported = server.client.get("/v1/admin/export")
        assert exported.status_code == 200 and "Acme pricing" in exported.text
        made = server.client.post("/v1/admin/keys", json={"principal": "bot", "role": "reader"})
        assert made.status_code == 201
        gx = httpx.post(server.url + "/v1/admin/keys", json={"principal": "gus-bot", "role": "reader"},
                        headers={"Authorization": f"Bearer {globex}"}, timeout=60)
        assert gx.status_code == 201
        between = datetime.now(UTC)
        assert main(["backup", str(tmp_path / "b1"), "--data", str(data), "--server", server.url, "--key", admin,
                     "--actor", "ops:bob"]) == 0

        answer = trail(server, admin)
        assert answer.status_code == 200, answer.text
        entries = answer.json()["entries"]
        actions = [e["action"] for e in entries]
        assert actions == ["backup", "projections.held", "key.created", "export", "export.started"], actions
        assert [e["at"] for e in entries] == sorted((e["at"] for e in entries), reverse=True)
        done = entries[3]
        assert done["actor"].startswith("ada.lovelace (key ") and done["tenant"] == "default" and done["kind"] == "export"
        assert done["details"]["file"] == "default.jsonl" and done["details"]["rows"] == 1
        assert done["details"]["complete"] is True and done["details"]["via"] == "api"
        assert entries[2]["details"]["principal"] == "bot" and entries[2]["actor"] == done["actor"]
        backup = entries[0]
        assert backup["tenant"] == "*" and backup["actor"] == "ops:bob" and backup["details"] == {"online": True}
        assert str(tmp_path) not in answer.text  # the host's paths stay with `orgmem audit`

        assert [e["action"] for e in trail(server, admin, kind="key").json()["entries"]] == ["key.created"]
        assert [e["action"] for e in trail(server, admin, since=between.isoformat()).json()["entries"]] == \
            ["backup", "projections.held"]
        one = trail(server, admin, limit=1).json()
        assert [e["action"] for e in one["entries"]] == ["backup"] and one["more"] is True
        assert trail(server, admin).json()["more"] is False

        # Another tenant's admin: its own key grant and the host-wide backup, nothing of default's,
        # however it asks.
        for params in ({}, {"tenant": "default"}, {"kind": "export"}, {"limit": 1000}, {"since": "2000-01-01"}):
            theirs = trail(server, globex, **params)
            assert theirs.status_code == 200, (params, theirs.text)
            assert {e["tenant"] for e in theirs.json()["entries"]} <= {"globex", "*"}, params
            assert "ada.lovelace" not in theirs.text and "default.jsonl" not in theirs.text and '"bot"' not in theirs.text
        assert [e["action"] for e in trail(server, globex).json()["entries"]] == ["backup", "key.created"]

        for token in (writer, reader):
            refused = trail(server, token)
            assert refused.status_code == 403 and refused.headers["content-type"].startswith("application/problem+json")
            assert "entries" not in refused.text
        assert httpx.get(server.url + "/v1/admin/audit", timeout=60).status_code == 401
        for bad in ({"limit": 0}, {"limit": 1001}, {"kind": "everything"}, {"since": "yesterday"}):
            assert trail(server, admin, **bad).status_code == 422, bad

    # Restored over the live folder: the restore is in the trail the server reads afterwards.
    assert main(["restore", str(tmp_path / "b1"), "--data", str(data), "--replace", "--actor", "ops:carol"]) == 0
    with served(data) as server:
        entries = trail(server, admin).json()["entries"]
        assert entries[0]["action"] == "restore" and entries[0]["actor"] == "ops:carol"
        assert entries[0]["tenant"] == "*" and entries[0]["details"] == {"replace": True}
        assert "export" in [e["action"] for e in entries]  # the backup's trail came back with it
        assert [e["action"] for e in trail(server, globex).json()["entries"]] == ["restore", "key.created"]


def test_an_export_by_a_restricted_admin_is_recorded_as_restricted(tmp_path):
    from services.bootstrap import build_memory
    from services.settings import Settings

    data = tmp_path / "data"
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        memory.ingest([DocumentIn(text="Open note.", author="a"), DocumentIn(text="Board only.", acl=["group:board"])])
        memory.ingest([DocumentIn(text="Globex note.")], Caller(tenant="globex"))
        memory.catch_up()
    finally:
        memory.close()
        lock.release()
    limited, admin = create_key(data, principal="ann", unrestricted=False), create_key(data, principal="ada")
    with served(data) as server:
        got = httpx.get(server.url + "/v1/admin/export", headers={"Authorization": f"Bearer {limited}"}, timeout=60)
        assert got.text.count("\n") == 1
        (done,) = [e for e in trail(server, admin).json()["entries"] if e["action"] == "export"]
        assert done["actor"].startswith("ann (key ") and done["details"]["restricted"] is True and done["details"]["rows"] == 1
