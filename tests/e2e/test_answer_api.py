"""POST /v1/answer and the MCP tool `answer` over a real server (SQLite, tantivy, Qdrant Edge, the
sentence encoder), with the answer endpoint played by a local HTTP server that speaks chat
completions (tests/integration/fake_chat_server.py). The caller here is alice (group eng): one
version of the thread is finance's, and it must reach neither her prompt nor her citations, even
when the endpoint names its row id. Evidence text never reaches a log line or a span."""

from __future__ import annotations

import json
import logging

import anyio
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.core.answer import NO_EVIDENCE
from tests.conftest import LiveServer, create_key, free_port
from tests.e2e.test_mcp import error_text, http_session, structured
from tests.e2e.test_tracing import Collector, every_string
from tests.integration.fake_chat_server import FakeChatServer, Reply

pytestmark = pytest.mark.slow

MARKER = "zqxevidencemarker4d2"  # in every document's text: it must reach the prompt and nothing else
HIDDEN = "1500 euros"  # finance's version only
DOCS = [
    {"text": f"Travel budget {MARKER}: the limit is 900 euros per trip.", "date": "2025-03-01",
     "thread": "travel-budget", "title": "Travel budget", "author": "cfo@corp.example"},
    {"text": f"Travel budget {MARKER}: finance raises the limit to {HIDDEN} per trip.", "date": "2025-06-01",
     "thread": "travel-budget", "author": "fay@corp.example", "acl": ["finance"]},
    {"text": f"Travel budget {MARKER}: the limit is 1200 euros per trip from September.", "date": "2025-09-03",
     "thread": "travel-budget", "title": "Travel budget from September", "author": "coo@corp.example"},
]


@pytest.fixture
def chat():
    server = FakeChatServer().start()
    yield server
    server.stop()


@pytest.fixture
def world(settings, memory, chat):
    """A live server with an answer endpoint and tracing on (spans kept in memory too); the three
    versions ingested; alice's key."""
    from services.api.app import create_app
    from services.bootstrap import tracer_provider_for

    collector = Collector()
    settings.answer_base_url, settings.answer_model, settings.answer_timeout_s = chat.base_url, "answer-model", 1
    settings.tracing = settings.tracing.model_copy(update={"enabled": True, "otlp_endpoint": collector.url})
    exporter = InMemorySpanExporter()
    provider = tracer_provider_for(settings.tracing)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    admin = create_key(settings.data_dir)
    alice = create_key(settings.data_dir, role="reader", principal="alice@corp.example", groups=("eng",))
    try:
        with LiveServer(create_app(settings, memory), free_port(), admin) as server:
            written = server.client.post("/v1/documents", json={"documents": DOCS}).json()
            assert memory.wait_for(written["position"], 30)
            yield server, written["row_ids"], alice, exporter, provider
    finally:
        provider.shutdown()  # its exporter would keep sending to the closed collector
        collector.close()


def ask(server, token: str, **body):
    return server.client.post("/v1/answer", headers={"Authorization": f"Bearer {token}"},
                              json={"q": "travel budget limit per trip", "k": 10, **body})


def test_an_answer_cites_only_the_rows_the_caller_was_given(world, chat, caplog):
    server, (march, june, september), alice, exporter, provider = world
    caplog.set_level(logging.DEBUG)
    chat.add(Reply.json({"answer": "1200 euros per trip since 2025-09-03 (900 euros before).",
                         "citations": [september, march, "r-invented", june, september],
                         "missing": ["who approved the change"]}))
    answered = ask(server, alice)
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["answer"] == "1200 euros per trip since 2025-09-03 (900 euros before)."
    assert body["citations"] == [
        {"row_id": september, "title": "Travel budget from September", "date": "2025-09-03T00:00:00Z"},
        {"row_id": march, "title": "Travel budget", "date": "2025-03-01T00:00:00Z"}]
    # An invented id, and finance's row (the endpoint could guess or have seen it): dropped, flagged.
    assert body["dropped_citations"] == ["r-invented", june] and body["flagged"] is True
    assert body["missing"] == ["who approved the change"] and body["evidence_rows"] == 2
    assert body["model"] == "openai:answer-model" and body["time_window"] is None

    prompt = chat.requests[-1].body["messages"][-1]["content"]
    assert f"version 1 of 2, superseded by {september} on 2025-09-03" in prompt  # the current fact wins
    assert "version 2 of 2 (latest)" in prompt
    assert {f"[1] {september}", f"[2] {march}"} <= set(prompt.splitlines()) or \
        {f"[1] {march}", f"[2] {september}"} <= set(prompt.splitlines())  # the number -> row id table
    assert MARKER in prompt
    assert june not in prompt and HIDDEN not in prompt  # only rows alice may read
    provider.force_flush()
    assert "answer: 2 evidence rows, 2 cited, 2 citations dropped, 1 gaps" in caplog.text  # the server's logs are read
    assert MARKER not in caplog.text and "900 euros" not in caplog.text
    spans = exporter.get_finished_spans()
    assert any(s.name == "POST /v1/answer" for s in spans)
    assert not any(MARKER in text for s in spans for text in every_string(s))


def test_unusable_replies_are_502_and_a_timeout_504_naming_the_cause(world, chat, caplog):
    server, _ids, alice, _exporter, _provider = world
    caplog.set_level(logging.DEBUG)
    chat.add(Reply(content=f"The limit is 1200 euros {MARKER}."))
    garbage = ask(server, alice)
    assert garbage.status_code == 502 and garbage.headers["content-type"].startswith("application/problem+json")
    assert garbage.json()["type"].endswith("/answer-failed") and "reply: not JSON" in garbage.json()["detail"]
    chat.add(Reply.json({"answer": ["a", "list"], "citations": []}))
    wrong = ask(server, alice)
    assert wrong.status_code == 502 and "answer is a list, not a string" in wrong.json()["detail"]
    chat.add(Reply(content="{}", delay_s=3), Reply(content="{}", delay_s=3))
    slow = ask(server, alice)
    assert slow.status_code == 504 and "timed out after 1 s" in slow.json()["detail"]
    assert all(MARKER not in r.text for r in (garbage, wrong, slow)) and MARKER not in caplog.text


def test_no_evidence_asks_no_model_and_hostile_requests_are_refused(world, chat, settings):
    server, _ids, alice, _exporter, _provider = world
    before = len(chat.requests)
    empty = ask(server, alice, kinds=["chat"])  # no row of that kind
    assert empty.status_code == 200 and empty.json()["answer"] == NO_EVIDENCE and empty.json()["citations"] == []
    assert len(chat.requests) == before
    assert ask(server, alice, k=10**9).status_code == 422
    assert ask(server, alice, q={"an": "object"}).status_code == 422
    assert ask(server, alice, as_of="9999-12-31T00:00:00Z").status_code == 422
    assert ask(server, alice, surprise=True).status_code == 422
    settings.answer_max_evidence_chars = 50  # the route reads it per request; two rows render to more
    too_long = ask(server, alice)
    assert too_long.status_code == 400 and "answer_max_evidence_chars (50); ask with a smaller k" in too_long.json()["detail"]
    assert len(chat.requests) == before


def test_the_mcp_tool_answers_as_the_caller(world, chat):
    server, (march, june, september), alice, _exporter, _provider = world

    async def run():
        async with http_session(server.url, alice) as session:
            assert "answer" in {tool.name for tool in (await session.list_tools()).tools}
            chat.add(Reply.json({"answer": "1200 euros.", "citations": [september, june], "missing": []}))
            found = structured(await session.call_tool("answer", {"q": "travel budget limit per trip"}))
            chat.add(Reply(content="not json"))
            failed = error_text(await session.call_tool("answer", {"q": "travel budget limit per trip"}))
            return found, failed

    found, failed = anyio.run(run)
    assert [c["row_id"] for c in found["citations"]] == [september]
    assert found["dropped_citations"] == [june] and found["flagged"] is True
    assert "Answer endpoint failed: reply: not JSON" in failed
    assert HIDDEN not in json.dumps(chat.requests[-1].body)


def test_without_an_endpoint_the_answer_is_501_naming_the_setting(live_server):
    answered = live_server.client.post("/v1/answer", json={"q": "travel budget"})
    assert answered.status_code == 501 and answered.headers["content-type"].startswith("application/problem+json")
    problem = answered.json()
    assert problem["type"].endswith("/not-configured") and "answer_base_url" in problem["detail"]
    assert "ORGMEM_ANSWER_BASE_URL" in problem["detail"]
