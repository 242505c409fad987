"""The OpenAI-compatible judge against a real local HTTP server that speaks chat completions."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from schemas.rows import Row
from services.adapters.judge.openai_compat import OpenAICompatJudge
from services.errors import JudgeFailed
from tests.integration.fake_chat_server import FakeChatServer, Reply

T0 = datetime(2024, 7, 1, tzinfo=UTC)
KEY = "sk-test-4f1c9a-very-secret"


def mk(rid: str, pos: int, text: str, days: int = 0) -> Row:
    return Row(row_id=rid, tenant="acme", text=text, author=f"author{pos}", event_time=T0 + timedelta(days=days),
               ingest_position=pos, ingested_at=T0)  # fmt: skip


A = mk("a", 1, "Budget for Q3 is 10k.", 0)
B = mk("b", 2, "Q3 budget: 10k, approved by Kim.", 3)


@pytest.fixture
def server():
    srv = FakeChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def judge(server):
    j = OpenAICompatJudge(server.base_url, "test-model", SecretStr(KEY), timeout_s=2, max_retries=2, backoff_s=0.01)
    yield j
    j.close()


def test_decisions_are_parsed(server, judge):
    server.add(
        Reply.json({"label": "conflict", "reason": "budget changed"}),
        Reply.json({"action": "delete", "drop": "a", "merge_instruction": "", "reason": "b says more"}),
        Reply.json({"action": "merge", "drop": "none", "merge_instruction": "keep approver", "reason": "both"}),
        Reply.json({"text": "Q3 budget is 10k, approved by Kim."}),
        Reply(content='```json\n{"action": "nothing", "drop": "none", "merge_instruction": "", "reason": "x"}\n```'),
    )
    label = judge.label_group([A, B])
    assert (label.label, label.reason) == ("conflict", "budget changed")
    delete = judge.judge_pair(A, B, 0.93)
    assert (delete.action, delete.archive, delete.keep) == ("delete", "a", "b")
    merge = judge.judge_pair(A, B, 0.91)
    assert merge.action == "merge" and merge.merged_text == "Q3 budget is 10k, approved by Kim."
    assert judge.judge_pair(A, B, 0.9).action == "preserve"  # MemRefine's "nothing", fenced
    assert judge.calls == 5
    first = server.requests[0]
    assert first.path == "/v1/chat/completions" and first.body["model"] == "test-model"
    assert first.body["response_format"]["type"] == "json_schema"
    assert "JSON" in first.body["messages"][-1]["content"]  # asked in the prompt too
    assert "Budget for Q3 is 10k." in first.body["messages"][-1]["content"]
    assert "keep approver" in server.requests[3].body["messages"][-1]["content"]


@pytest.mark.parametrize(
    "reply",
    [
        Reply(content="I think they conflict."),  # not JSON
        Reply.json({"label": "maybe", "reason": ""}),  # outside the schema
        Reply.json({"reason": "no label"}),
        Reply(body='{"choices": []}'),
        Reply(body="<html>gateway</html>"),
    ],
)
def test_malformed_answers_fail(server, judge, reply):
    server.add(reply)
    with pytest.raises(JudgeFailed):
        judge.label_group([A, B])
    assert len(server.requests) == 1  # a malformed answer is not retried


def test_delete_must_name_a_row(server, judge):
    server.add(Reply.json({"action": "delete", "drop": "none", "merge_instruction": "", "reason": ""}))
    with pytest.raises(JudgeFailed, match="drop"):
        judge.judge_pair(A, B, 0.99)


def test_timeout_fails_after_retries(server):
    judge = OpenAICompatJudge(server.base_url, "m", None, timeout_s=0.3, max_retries=1, backoff_s=0.01)
    server.add(Reply.json({"label": "distinct"}, delay_s=2), Reply.json({"label": "distinct"}, delay_s=2))
    # Both replies would parse had the client waited for them, so the error itself shows the timeout fired.
    with pytest.raises(JudgeFailed, match="timed out"):
        judge.label_group([A, B])
    assert len(server.requests) == 2
    judge.close()


def test_server_errors_are_retried_until_one_succeeds(server, judge):
    server.add(Reply.error(500), Reply.error(429), Reply.json({"label": "restatement", "reason": "same"}))
    assert judge.label_group([A, B]).label == "restatement"
    assert len(server.requests) == 3 and judge.calls == 1


def test_errors_past_the_retries_and_client_errors_fail(server, judge):
    server.add(Reply.error(503), Reply.error(503), Reply.error(503))
    with pytest.raises(JudgeFailed, match="HTTP 503"):
        judge.label_group([A, B])
    assert len(server.requests) == 3  # max_retries=2: three attempts
    server.add(Reply.error(401, '{"error": "bad key"}'))
    with pytest.raises(JudgeFailed, match="HTTP 401"):
        judge.label_group([A, B])
    assert len(server.requests) == 4  # not retried


def test_a_server_without_structured_output_is_asked_again_without_it(server, judge):
    server.add(
        Reply.error(400, '{"error": "response_format json_schema is not supported"}'),
        Reply.json({"label": "distinct", "reason": "x"}),
        Reply.json({"label": "distinct", "reason": "y"}),
    )
    assert judge.label_group([A, B]).label == "distinct"
    assert judge.label_group([A, B]).reason == "y"
    assert "response_format" in server.requests[0].body
    assert all("response_format" not in r.body for r in server.requests[1:])


def test_the_call_cap_holds(server):
    judge = OpenAICompatJudge(server.base_url, "m", None, max_calls=2, backoff_s=0.01)
    server.add(*[Reply.json({"label": "distinct", "reason": ""}) for _ in range(3)])
    judge.label_group([A, B])
    judge.label_group([A, B])
    with pytest.raises(JudgeFailed, match="call cap reached"):
        judge.label_group([A, B])
    assert len(server.requests) == 2
    judge.close()


def test_the_key_is_a_bearer_header_and_nowhere_else(server, judge, caplog):
    caplog.set_level(logging.DEBUG)
    server.add(Reply.error(500, f'{{"error": "echo {KEY}"}}'), Reply.json({"label": "distinct", "reason": ""}))
    judge.label_group([A, B])
    server.add(Reply.error(403, f'{{"error": "rejected key {KEY}"}}'))
    with pytest.raises(JudgeFailed) as failure:
        judge.label_group([A, B])
    assert all(r.headers.get("Authorization") == f"Bearer {KEY}" for r in server.requests)
    assert any("retry" in m for m in caplog.messages)  # the 500 was logged...
    assert "HTTP Request" in caplog.text and KEY not in caplog.text  # httpx logged too, no key
    assert KEY not in str(failure.value) and "***" in str(failure.value)
    assert KEY not in repr(judge) and judge.name == "openai:test-model"
    keyless = OpenAICompatJudge(server.base_url, "m")
    server.add(Reply.json({"label": "distinct", "reason": ""}))
    keyless.label_group([A, B])
    assert "Authorization" not in server.requests[-1].headers
    keyless.close()
