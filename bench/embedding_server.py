"""A small local server that speaks the OpenAI `/v1/embeddings` protocol, for the tests of the
remote embedder adapter and for `bench/remote_embedder.py` (no such endpoint can be reached from
these machines). It serves either deterministic hash vectors (fast, for protocol tests) or a real
encoder's vectors, and can be told to misbehave: answer 429/503 first, stall, or change shape.

    python -m bench.embedding_server --port 8081 --encoder onnx    # serves all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


def hash_vectors(texts: list[str], dim: int) -> np.ndarray:
    """Deterministic vectors: the same text always gets the same vector."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        out[i] = np.random.default_rng(seed).standard_normal(dim)
    return out


@dataclass
class Behaviour:
    """What the server does; tests change it while it runs."""
    model: str = "test-embedder"
    dim: int = 16
    fail_first: int = 0  # answer the first n requests with `fail_status`
    fail_status: int = 429
    retry_after: str | None = "0"
    stall_s: float = 0.0  # sleep before answering (a timeout)
    wrong_count: bool = False
    requests: list[int] = field(default_factory=list)  # batch size of every request served
    lock: threading.Lock = field(default_factory=threading.Lock)


class EmbeddingServer:
    def __init__(self, behaviour: Behaviour | None = None, encode=None, port: int = 0):
        self.behaviour = behaviour or Behaviour()
        self.encode = encode or (lambda texts: hash_vectors(texts, self.behaviour.dim))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the tests read the counters instead
                pass

            def do_POST(self):
                b = server.behaviour
                if self.path.rstrip("/") != "/v1/embeddings":
                    return self._send(404, {"error": {"message": "not found"}})
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with b.lock:
                    b.requests.append(len(body.get("input", [])))
                    failing = len(b.requests) <= b.fail_first
                if b.stall_s:
                    time.sleep(b.stall_s)
                if failing:
                    headers = {"Retry-After": b.retry_after} if b.retry_after is not None else {}
                    return self._send(b.fail_status, {"error": {"message": "busy"}}, headers)
                if body.get("model") != b.model:
                    return self._send(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = server.encode(texts)
                data = [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                        for i, v in enumerate(vectors)]
                if b.wrong_count:
                    data = data[:-1]
                self._send(200, {"object": "list", "model": b.model, "data": list(reversed(data)),
                                 "usage": {"prompt_tokens": 0, "total_tokens": 0}})

            def _send(self, status, payload, headers=None):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EmbeddingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--encoder", choices=["hash", "onnx"], default="onnx")
    args = parser.parse_args()
    behaviour, encode = Behaviour(), None
    if args.encoder == "onnx":
        from services.bootstrap import embedder_for
        from services.settings import EmbedderSettings

        encoder = embedder_for(EmbedderSettings())
        behaviour, encode = Behaviour(model="all-MiniLM-L6-v2", dim=encoder.dim), encoder.encode
    with EmbeddingServer(behaviour, encode, args.port) as server:
        print(f"serving {behaviour.model} on {server.url}", flush=True)
        server.thread.join()


if __name__ == "__main__":
    main()
