"""`orgmem ask` on a real data folder, the answer endpoint a local chat-completions server."""

from __future__ import annotations

import json

import pytest

from services.cli.main import main
from tests.integration.fake_chat_server import FakeChatServer, Reply

pytestmark = pytest.mark.slow

DOCS = [
    {"text": "Travel budget set to 900 euros per trip.", "author": "cfo@corp.example", "date": "2025-03-01",
     "thread": "travel", "title": "Travel budget"},
    {"text": "Travel budget raised to 1200 euros per trip.", "author": "coo@corp.example", "date": "2025-09-03",
     "thread": "travel"},
]


@pytest.fixture
def chat():
    server = FakeChatServer().start()
    yield server
    server.stop()


def test_ask_answers_with_checked_citations(tmp_path, capsys, monkeypatch, chat):
    data = tmp_path / "data"
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    assert main(["ingest", "--data", str(data), "--jsonl", str(source)]) == 0
    capsys.readouterr()

    assert main(["ask", "--data", str(data), "travel budget"]) == 2  # no endpoint configured
    assert "answer_base_url" in capsys.readouterr().err and chat.requests == []

    assert main(["query", "--data", str(data), "travel budget", "--json"]) == 0
    ids = {row["text"]: row["row_id"] for row in json.loads(capsys.readouterr().out)}
    march, september = ids[DOCS[0]["text"]], ids[DOCS[1]["text"]]
    monkeypatch.setenv("ORGMEM_ANSWER_BASE_URL", chat.base_url)
    monkeypatch.setenv("ORGMEM_ANSWER_MODEL", "answer-model")
    chat.add(Reply.json({"answer": "1200 euros per trip.", "citations": [september, "r-made-up"], "missing": []}),
             Reply.json({"answer": "1200 euros per trip.", "citations": [march], "missing": ["who approved it"]}),
             Reply(content="no json here"))
    assert main(["ask", "--data", str(data), "travel budget", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["answer"] == "1200 euros per trip." and answer["evidence_rows"] == 2
    assert answer["citations"] == [{"row_id": september, "title": None, "date": "2025-09-03T00:00:00+00:00"}]
    assert answer["dropped_citations"] == ["r-made-up"] and answer["flagged"] is True
    prompt = chat.requests[0].body["messages"][-1]["content"]
    assert f"version 1 of 2, superseded by {september} on 2025-09-03" in prompt and DOCS[0]["text"] in prompt

    assert main(["ask", "--data", str(data), "travel budget"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("1200 euros per trip.\n") and f"  [{march}] 2025-03-01 Travel budget\n" in printed
    assert "missing: who approved it" in printed and "flagged" not in printed

    assert main(["ask", "--data", str(data), "travel budget"]) == 2
    assert "reply: not JSON" in capsys.readouterr().err
