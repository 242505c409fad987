"""Maintenance over real HTTP: start a run (queued), watch it, read the rows it changed, revert it."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import create_key

BASE = "/v1/admin/maintenance"
OLD = "Remote work policy: every team may work remotely 2 days per week, decided by Maria."
NEW = "Remote work policy: every team may work remotely 3 days per week, decided by Maria."
SAME_A = "The on-call rotation for the payments team changes every Monday at 09:00."
SAME_B = "The on-call rotation for the payments team changes every Monday at 09:00!"
FILLER = [
    "Quarterly revenue review moved to Thursday afternoon.",
    "Security training is mandatory for all staff this quarter.",
    "Travel expenses above 500 euros need director approval.",
]


def wait_run(server, run_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    seen = set()
    while time.monotonic() < deadline:
        response = server.client.get(f"{BASE}/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()
        seen.add(run["status"])
        if run["status"] in ("finished", "failed", "reverted"):
            run["seen"] = seen
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish: {seen}")


def active_rows(server, row_ids) -> dict[str, str | None]:
    rows = {rid: server.client.get(f"/v1/rows/{rid}").json()["row"] for rid in row_ids}
    return {rid: row["superseded_by"] for rid, row in rows.items() if row["state"] == "active"}


def test_consolidate_watch_and_revert_over_http(live_server, settings):
    server = live_server
    docs = [{"text": t, "author": "ops", "date": f"2025-02-0{i + 1}"} for i, t in enumerate(FILLER)]
    docs += [{"text": OLD, "author": "maria", "date": "2025-03-10", "thread": "remote"},
             {"text": SAME_A, "author": "kim", "date": "2025-04-01"},
             {"text": SAME_B, "author": "lee", "date": "2025-04-03"},
             {"text": NEW, "author": "maria", "date": "2025-06-16", "thread": "remote"}]
    ingested = server.client.post("/v1/documents", json={"documents": docs}).json()
    ids = ingested["row_ids"]
    old, same_a, same_b, new = ids[3:]
    server.client.post("/v1/query", json={"q": "policy", "after": ingested["position"]})  # indexed now
    before = active_rows(server, ids)
    originals = {rid: server.client.get(f"/v1/rows/{rid}").json()["row"]["text"] for rid in ids}

    started = server.client.post(f"{BASE}/consolidate", json={"tau": 0.85})
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["status"] == "queued" and body["job"] == "consolidate"
    assert started.headers["location"].endswith(body["run_id"])
    run = wait_run(server, body["run_id"])
    assert run["status"] == "finished", run
    assert run["judge"] == "rule" and run["requested_by"].startswith("test-admin") and run["tenant"] == "default"
    assert run["summary"]["labels"] == {"conflict": 1, "restatement": 1} and run["events"] == 4
    assert run["progress"].get("phase") == "judging"

    # The older policy is superseded, still active, and its row shows why and by which run.
    got = server.client.get(f"/v1/rows/{old}").json()
    assert got["row"]["superseded_by"] == new and got["row"]["state"] == "active"
    assert [h["change"] for h in got["history"]] == ["observed", "superseded"]
    assert got["history"][-1]["run_id"] == run["run_id"] and got["history"][-1]["superseded_by"] == new
    answer = server.client.post("/v1/query", json={"q": "remote work policy days per week", "k": 10}).json()
    hits = {h["row_id"]: h for h in answer["rows"]}
    assert old in hits and hits[old]["superseded_by"] == new
    assert same_a not in hits and same_b not in hits  # archived rows leave retrieval
    for rid in (same_a, same_b):
        row = server.client.get(f"/v1/rows/{rid}").json()
        assert row["row"]["state"] == "archived" and row["history"][-1]["run_id"] == run["run_id"]

    listed = server.client.get(f"{BASE}/runs").json()["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]

    reverted = server.client.post(f"{BASE}/runs/{run['run_id']}/revert")
    assert reverted.status_code == 202 and reverted.json()["reverts"] == run["run_id"]
    undo = wait_run(server, reverted.json()["run_id"])
    assert undo["status"] == "finished" and undo["job"] == "revert"
    assert server.client.get(f"{BASE}/runs/{run['run_id']}").json()["status"] == "reverted"
    assert active_rows(server, ids) == before
    assert {rid: server.client.get(f"/v1/rows/{rid}").json()["row"]["text"] for rid in ids} == originals
    assert server.client.get(f"/v1/rows/{old}").json()["history"][-1]["change"] == "restored"

    again = server.client.post(f"{BASE}/runs/{run['run_id']}/revert")
    assert again.status_code == 409 and "reverted already" in again.json()["detail"]
    assert server.client.get(f"{BASE}/runs/no-such-run").status_code == 404


def test_refine_request_validation_and_roles(live_server, settings):
    server = live_server
    both = server.client.post(f"{BASE}/refine", json={"budget_fraction": 0.7, "budget_bytes": 100})
    assert both.status_code == 422 and "budget_fraction, budget_bytes" in both.text
    bad = server.client.post(f"{BASE}/refine", json={"budget_fraction": 1.5})
    assert bad.status_code == 422 and "budget_fraction" in bad.text

    started = server.client.post(f"{BASE}/refine", json={"budget_fraction": 0.7})
    assert started.status_code == 202
    run = wait_run(server, started.json()["run_id"])
    assert run["status"] == "finished" and run["summary"]["start_bytes"] == 0  # an empty store meets any budget
    assert run["summary"]["stop_reason"] == "budget_reached" and run["events"] == 0
    assert run["params"]["budget_fraction"] == 0.7

    reader = create_key(settings.data_dir, role="reader", principal="rita")
    headers = {"Authorization": f"Bearer {reader}"}
    assert httpx.get(server.url + f"{BASE}/runs", headers=headers).status_code == 403
    assert httpx.post(server.url + f"{BASE}/consolidate", json={}, headers=headers).status_code == 403
    assert httpx.get(server.url + f"{BASE}/runs").status_code == 401
    # Another tenant's admin sees none of these runs and cannot revert them.
    other = create_key(settings.data_dir, role="admin", tenant="globex", principal="gina")
    other_headers = {"Authorization": f"Bearer {other}"}
    assert httpx.get(server.url + f"{BASE}/runs", headers=other_headers).json()["runs"] == []
    assert httpx.post(server.url + f"{BASE}/runs/{run['run_id']}/revert", headers=other_headers).status_code == 404


class TestWithAModelJudge:
    """The server's judge comes from its settings: here a local OpenAI-compatible server that
    answers slowly, so the run can be watched while it runs."""

    @pytest.fixture
    def chat(self):
        from tests.integration.fake_chat_server import FakeChatServer

        server = FakeChatServer().start()
        yield server
        server.stop()

    @pytest.fixture
    def settings(self, tmp_path, chat):
        from services.settings import Settings

        return Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05, judge_base_url=chat.base_url,
                        judge_model="fake-model", auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})

    def test_progress_is_visible_while_the_model_judges(self, live_server, chat):
        from tests.integration.fake_chat_server import Reply

        server = live_server
        docs = [{"text": OLD, "author": "maria", "date": "2025-03-10"},
                {"text": NEW, "author": "maria", "date": "2025-06-16"}]
        ingested = server.client.post("/v1/documents", json={"documents": docs}).json()
        old, new = ingested["row_ids"]
        chat.add(Reply.json({"label": "conflict", "reason": "the number of days changed"}, delay_s=2.0))
        run_id = server.client.post(f"{BASE}/consolidate", json={}).json()["run_id"]
        deadline, during = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            during = server.client.get(f"{BASE}/runs/{run_id}").json()
            if during["status"] == "running" and during["progress"]:
                break
            time.sleep(0.05)
        assert during["status"] == "running" and during["progress"]["phase"] == "grouping"
        run = wait_run(server, run_id)
        assert run["status"] == "finished" and run["judge"] == "openai:fake-model"
        assert run["params"]["judge_model"] == "fake-model" and run["summary"]["labels"] == {"conflict": 1}
        assert server.client.get(f"/v1/rows/{old}").json()["row"]["superseded_by"] == new
        assert len(chat.requests) == 1 and "sk-" not in str(run)
