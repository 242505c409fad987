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


def create_key(data_dir: Path, role: str = "admin", tenant: str = "default", principal: str = "test-admin",
               groups: tuple[str, ...] = (), unrestricted: bool | None = None) -> str:
    """A fresh API key in a data folder's key store; the token to send as 'Authorization: Bearer'."""
    from services.adapters.key_store.sqlite import SqliteKeyStore

    store = SqliteKeyStore(Path(data_dir) / "keys.sqlite")
    try:
        unrestricted = role == "admin" if unrestricted is None else unrestricted
        return store.create(tenant, principal, role, "tests", groups=groups, unrestricted=unrestricted)[1]
    finally:
        store.close()


@pytest.fixture
def settings(tmp_path):
    from services.settings import Settings

    # Auth on, as `serve` runs; rate limits off so that tests that send bursts measure what they mean to.
    # One encoder in process: on CI's two cores, worker processes per test would only cost start-up
    # (the pool has its own tests, which ask for it).
    return Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05, embedder={"encoder_processes": 1},
                    auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})


@pytest.fixture
def memory(settings):
    from services.bootstrap import build_memory

    mem, lock = build_memory(settings)
    yield mem
    mem.close()
    lock.release()


class LiveServer:
    """A uvicorn server in a thread; `client` is an httpx client with an admin key of the default tenant."""

    def __init__(self, app, port: int, token: str | None = None):
        import uvicorn

        self.url = f"http://127.0.0.1:{port}"
        self.token = token
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, headers=self.headers, timeout=60)
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
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def live_server(settings, memory):
    from services.api.app import create_app

    token = create_key(settings.data_dir) if settings.auth.enabled else None
    with LiveServer(create_app(settings, memory), free_port(), token) as server:
        yield server
