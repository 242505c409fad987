"""Ingest encoding through an OpenAI-compatible endpoint: the adapter's throughput next to the
endpoint's own, measured in the same run on the same texts.

The endpoint is `bench/embedding_server.py` in its own process, wrapping the same ONNX encoder
orgmem uses locally. "The endpoint's own throughput" is what a bare client gets from it: one
batch of 64 after another, no checks. The adapter adds validation, unit-norm scaling, retries
and `concurrency` requests in flight.

    python -m bench.remote_embedder --texts 2000
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx

from bench.corpus import documents
from services.adapters.embedder.openai_compat import OpenAICompatEmbedder
MODEL = "all-MiniLM-L6-v2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the embedding server exited")
        try:
            httpx.post(f"{url}/embeddings", json={"model": MODEL, "input": ["warm up"]}, timeout=30)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the embedding server did not answer")


def bare_client(url: str, texts: list[str], batch: int) -> float:
    started = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for i in range(0, len(texts), batch):
            client.post(f"{url}/embeddings", json={"model": MODEL, "input": texts[i:i + batch]}).raise_for_status()
    return len(texts) / (time.perf_counter() - started)


def through_adapter(url: str, texts: list[str], batch: int, concurrency: int) -> float:
    adapter = OpenAICompatEmbedder(url, MODEL, dim=384, batch_size=batch, concurrency=concurrency)
    started = time.perf_counter()
    adapter.encode(texts)
    rate = len(texts) / (time.perf_counter() - started)
    adapter.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    texts = [doc.text for doc in documents(args.texts)]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.embedding_server", "--port", str(port), "--encoder", "onnx"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for(url, proc)
        print(f"{len(texts)} texts, batches of {args.batch}; endpoint: bench/embedding_server.py (ONNX, one process)")
        print("| round | endpoint, bare client (texts/s) | adapter, 1 in flight | adapter, 2 in flight |")
        print("|---|---|---|---|")
        for r in range(args.rounds):  # interleaved, so drift hits every column alike
            bare = bare_client(url, texts, args.batch)
            one = through_adapter(url, texts, args.batch, 1)
            two = through_adapter(url, texts, args.batch, 2)
            print(f"| {r + 1} | {bare:.1f} | {one:.1f} ({one / bare:.0%}) | {two:.1f} ({two / bare:.0%}) |", flush=True)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
