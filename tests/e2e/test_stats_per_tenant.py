"""Issue 16 (low): `/v1/stats` of one tenant counted the skipped documents of every tenant, so an
admin of one tenant learnt how many repeats and empty documents the others sent. Over real HTTP:
tenant A's skips never show in tenant B's stats, and B's own skips do."""

from __future__ import annotations

import pytest

from tests.conftest import create_key

pytestmark = pytest.mark.slow


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_stats_of_one_tenant_leave_out_the_skips_of_another(live_server, memory, settings):
    a_admin, a_writer = live_server.headers, bearer(create_key(settings.data_dir, role="writer", principal="wa"))
    b_admin = bearer(create_key(settings.data_dir, role="admin", tenant="globex", principal="b-admin"))
    b_writer = bearer(create_key(settings.data_dir, role="writer", tenant="globex", principal="wb"))

    repeated = {"text": "The Q3 budget review moved to Friday.", "author": "a@corp.example"}
    answer = live_server.client.post("/v1/documents", headers=a_writer, json={"documents": [
        repeated, repeated, repeated, {"text": "   ", "author": "a@corp.example"}]})
    assert answer.status_code == 200, answer.text
    answer = live_server.client.post("/v1/documents", headers=b_writer, json={"documents": [
        {"text": "Globex ships on Monday.", "author": "b@globex.example"}]})
    assert answer.status_code == 200, answer.text
    assert memory.wait_for(answer.json()["position"], 60)

    b_stats = live_server.client.get("/v1/stats", headers=b_admin)
    assert b_stats.status_code == 200, b_stats.text
    assert b_stats.json()["rows"] == {"active": 1, "archived": 0, "skipped": 0}
    a_stats = live_server.client.get("/v1/stats", headers=a_admin).json()
    assert a_stats["rows"] == {"active": 1, "archived": 0, "skipped": 3}

    # B's own skips count for B, and still not for A.
    answer = live_server.client.post("/v1/documents", headers=b_writer, json={"documents": [
        {"text": "Globex ships on Monday.", "author": "b@globex.example"}]})
    assert memory.wait_for(answer.json()["position"], 60)
    assert live_server.client.get("/v1/stats", headers=b_admin).json()["rows"]["skipped"] == 1
    assert live_server.client.get("/v1/stats", headers=a_admin).json()["rows"]["skipped"] == 3
