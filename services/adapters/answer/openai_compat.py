"""The answers' chat model behind any OpenAI-compatible chat-completions endpoint (hosted, vLLM,
Ollama, llama.cpp server): the ChatModel port. httpx stays here and in the shared retries
(http_retry); its errors become AnswerFailed at this boundary, `timed_out` when the endpoint did
not answer in time (the API's 504; every other failure is a 502).

The endpoint is not trusted: its response body is read through a cap (MAX_BODY_BYTES; the request
asks for no compression, so the cap is on what is parsed), and a message that is not a string is
refused. What it sent is never quoted in an error or a log line: a reply may repeat the evidence.
The API key goes only into the Authorization header.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import httpx
from pydantic import SecretStr

from services.adapters.http_retry import RetriesExhausted, post_with_retries
from services.errors import AnswerFailed

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024  # a chat completion of a 32,000-character answer is far below this


class ReplyTooLarge(Exception):
    """The endpoint's body passed the cap (not an httpx error, so the shared retries do not retry it)."""


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, cap: int):
        self._stream, self._cap = stream, cap

    def __iter__(self) -> Iterator[bytes]:
        total = 0
        for chunk in self._stream:
            total += len(chunk)
            if total > self._cap:
                raise ReplyTooLarge(f"response body over {self._cap} bytes")
            yield chunk

    def close(self) -> None:
        self._stream.close()


class _CappedTransport(httpx.BaseTransport):
    """httpx's own transport, with every response body read through a byte cap."""

    def __init__(self, cap: int):
        self._inner, self._cap = httpx.HTTPTransport(), cap

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_CappedStream(response.stream, self._cap), extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


class OpenAICompatChat:
    def __init__(self, base_url: str, model: str, api_key: SecretStr | None = None, timeout_s: float = 60.0,
                 max_retries: int = 1, backoff_s: float = 0.5, *, temperature: float | None = 0.0,
                 structured_output: bool = True, max_body_bytes: int = MAX_BODY_BYTES):
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_body_bytes < 1:
            raise ValueError("timeout_s and max_body_bytes must be > 0, max_retries and backoff_s >= 0")
        self.name = f"openai:{model}"
        self.model, self.base_url = model, base_url.rstrip("/")
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.temperature, self.structured_output = temperature, structured_output
        self.max_body_bytes = max_body_bytes
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if api_key is not None and api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers,
                                    transport=_CappedTransport(max_body_bytes))

    def __repr__(self) -> str:
        return f"OpenAICompatChat(base_url={self.base_url!r}, model={self.model!r})"

    def close(self) -> None:
        self._client.close()

    def complete(self, system: str, prompt: str, response_format: dict) -> str:
        body: dict = {"model": self.model,
                      "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}]}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.structured_output:
            body["response_format"] = response_format
        url = f"{self.base_url}/chat/completions"
        try:
            response = post_with_retries(self._client, url, body, max_retries=self.max_retries,
                                         backoff_s=self.backoff_s, timeout_s=self.timeout_s,
                                         label=f"answer {self.name}", amend=self._without_response_format)
            if len(response.content) > self.max_body_bytes:  # a proxy from the environment has its own transport
                raise ReplyTooLarge(f"response body over {self.max_body_bytes} bytes")
            if response.status_code != 200:
                raise AnswerFailed(f"answer endpoint {self.name}: HTTP {response.status_code}")
            payload = response.json()
        except RetriesExhausted as exc:
            raise AnswerFailed(f"answer endpoint {self.name}: {exc.problem}, {exc.attempts} attempts",
                               timed_out=exc.problem.startswith("timed out")) from None
        except ReplyTooLarge as exc:
            raise AnswerFailed(f"answer endpoint {self.name}: {exc}") from None
        except ValueError:
            raise AnswerFailed(f"answer endpoint {self.name}: the response body is not JSON") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise AnswerFailed(f"answer endpoint {self.name}: no choices[0].message.content") from None
        if not isinstance(content, str):
            raise AnswerFailed(f"answer endpoint {self.name}: choices[0].message.content is not a string")
        return content

    def _without_response_format(self, response: httpx.Response, body: dict) -> dict | None:
        """The request again without `response_format`, when the server refused it for that."""
        if response.status_code == 400 and "response_format" in body and \
                re.search(r"response_format|json_schema", response.text[:300]):
            log.info("answer %s: server rejected response_format; asking without it", self.name)
            self.structured_output = False
            return {k: v for k, v in body.items() if k != "response_format"}
        return None
