"""Fixtures shared by the integration and end-to-end tests: a real memory on a temp data folder
(SQLite, tantivy, Qdrant Edge, the real sentence encoder) and a real HTTP server around it."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def settings(tmp_path):
    from services.settings import Settings

    return Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05)


@pytest.fixture
def memory(settings):
    from services.bootstrap import build_memory

    mem, lock = build_memory(settings)
    yield mem
    mem.close()
    lock.release()


class LiveServer:
    def __init__(self, app, port: int):
        import uvicorn

        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def live_server(settings, memory):
    from services.api.app import create_app

    with LiveServer(create_app(settings, memory), free_port()) as server:
        yield server
