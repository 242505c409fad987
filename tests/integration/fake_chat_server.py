"""A real HTTP server on 127.0.0.1 that speaks the chat-completions protocol from a script.

It stands in for a model endpoint, which cannot run here. Each request takes the next scripted
reply: JSON content (a decision), raw content (malformed), an HTTP error status, or a delay
before answering. Requests are recorded with their headers and bodies for assertions.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str | None = None  # choices[0].message.content
    status: int = 200
    delay_s: float = 0.0
    body: str | None = None  # a raw response body instead of a chat completion
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, payload: dict, **kw: object) -> Reply:
        return cls(content=json.dumps(payload), **kw)  # type: ignore[arg-type]

    @classmethod
    def error(cls, status: int, body: str = '{"error": {"message": "scripted failure"}}') -> Reply:
        return cls(status=status, body=body)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict


class FakeChatServer:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                server.requests.append(Recorded(self.path, dict(self.headers.items()), body))
                reply = server.script.popleft() if server.script else Reply.error(418, "unscripted request")
                if reply.delay_s and server._stopping.wait(reply.delay_s):
                    return
                if self.path != "/v1/chat/completions":
                    reply = Reply.error(404, "no such route")
                if reply.body is not None:
                    payload = reply.body.encode()
                else:
                    payload = json.dumps({
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content}}],
                    }).encode()  # fmt: skip
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a scripted delay past its timeout)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def add(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def start(self) -> FakeChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
