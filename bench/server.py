"""An `orgmem serve` subprocess on loopback, for benchmarks and for tests that kill it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx


def start_server(data: Path, port: int, env: dict[str, str] | None = None,
                 timeout_s: float = 180.0) -> tuple[subprocess.Popen, str]:
    """Start the server on `data` and wait until /healthz answers; return the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "--log-level", "WARNING", "serve", "--data", str(data),
         "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "ORGMEM_INDEXER_POLL_S": "0.05", **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start within {timeout_s:g} s")
