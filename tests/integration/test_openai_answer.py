"""The answers' chat model (services/adapters/answer) against a real local HTTP server that speaks
chat completions: what it sends, and every way the endpoint can fail becoming AnswerFailed."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from services.adapters.answer import OpenAICompatChat
from services.core.answer import RESPONSE_FORMAT
from services.errors import AnswerFailed
from tests.integration.fake_chat_server import FakeChatServer, Reply

KEY = "sk-answer-test-9b2e-very-secret"


@pytest.fixture
def server():
    srv = FakeChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def chat(server):
    model = OpenAICompatChat(server.base_url, "answer-model", SecretStr(KEY), timeout_s=1, max_retries=1,
                             backoff_s=0.01, max_body_bytes=64 * 1024)
    yield model
    model.close()


def test_the_request_and_the_reply(server, chat):
    server.add(Reply(content='{"answer": "x", "citations": [], "missing": []}'))
    assert chat.complete("system text", "prompt text", RESPONSE_FORMAT) == '{"answer": "x", "citations": [], "missing": []}'
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.body["model"] == "answer-model"
    assert sent.body["messages"] == [{"role": "system", "content": "system text"}, {"role": "user", "content": "prompt text"}]
    assert sent.body["response_format"] == RESPONSE_FORMAT and sent.body["temperature"] == 0.0
    assert sent.headers["Authorization"] == f"Bearer {KEY}" and KEY not in repr(chat)


def test_a_server_without_structured_output_is_asked_again_without_it(server, chat):
    server.add(Reply.error(400, '{"error": {"message": "response_format json_schema is not supported"}}'),
               Reply(content="{}"))
    assert chat.complete("s", "p", RESPONSE_FORMAT) == "{}"
    assert "response_format" in server.requests[0].body and "response_format" not in server.requests[1].body


def test_a_timeout_is_timed_out_after_its_retries(server, chat):
    server.add(Reply(content="{}", delay_s=3), Reply(content="{}", delay_s=3))
    with pytest.raises(AnswerFailed, match="timed out after 1 s, 2 attempts") as caught:
        chat.complete("s", "p", RESPONSE_FORMAT)
    assert caught.value.timed_out


@pytest.mark.parametrize(("replies", "cause"), [
    ([Reply.error(500), Reply.error(503)], "HTTP 503, 2 attempts"),
    ([Reply.error(401, '{"error": "bad key, evidence-marker"}')], "HTTP 401$"),
    ([Reply(body="<html>gateway evidence-marker</html>")], "response body is not JSON"),
    ([Reply(body='{"choices": []}')], r"no choices\[0\].message.content"),
    ([Reply(body='{"choices": [{"message": {"content": {"answer": "x"}}}]}')], "is not a string"),
    ([Reply(content="evidence-marker " * 10_000)], "response body over 65536 bytes"),
])
def test_endpoint_failures_name_the_cause_and_never_the_body(server, chat, replies, cause, caplog):
    server.add(*replies)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AnswerFailed, match=cause) as caught:
        chat.complete("s", "p", RESPONSE_FORMAT)
    assert not caught.value.timed_out
    assert "evidence-marker" not in str(caught.value) and "evidence-marker" not in caplog.text


def test_an_unreachable_endpoint_fails():
    model = OpenAICompatChat("http://127.0.0.1:9/v1", "m", timeout_s=1, max_retries=0)
    try:
        with pytest.raises(AnswerFailed, match="transport error") as caught:
            model.complete("s", "p", RESPONSE_FORMAT)
        assert not caught.value.timed_out
    finally:
        model.close()
