"""Document encoding past one encoder: the same texts through one encoder process and through N,
as the raw encoder and as the embedded memory's ingest (log -> projector -> row store, lexical
and vector index), in the same run; and int8 against fp32 document encoding.

    python -m bench.encoders --texts 1000 --processes 2
    python -m bench.encoders --texts 500 --int8      # also the int8 encoder, one text at a time

The texts are LoCoMo turns and QMSum meeting turns from ../shared/data, taken evenly across both
(a LoCoMo turn is ~25 word pieces, a QMSum turn up to the 256 cut). The target on the 2-core
machine: two processes ingest at least 1.6x one.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.corpus import base_texts
from schemas.documents import DocumentIn
from services.adapters.embedder.onnx_runtime import OnnxEmbedder
from services.adapters.embedder.process_pool import ProcessPoolEmbedder
from services.bootstrap import build_memory
from services.core.write_path import embedding_text
from services.settings import Settings

MODEL = "all-MiniLM-L6-v2"
BATCH = 256  # the indexer's batch (settings.indexer_batch)


def corpus(n: int) -> list[DocumentIn]:
    texts = base_texts()
    step = max(len(texts) // n, 1)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return [DocumentIn(text=text, author=author, date=start + timedelta(minutes=7 * i), kind="chat",
                       source="bench", source_id=str(i))
            for i, (author, text) in enumerate(texts[::step][:n])]


def encode_rate(embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    for i in range(0, len(texts), BATCH):
        embedder.encode(texts[i:i + BATCH])
    return len(texts) / (time.perf_counter() - started)


def ingest_rate(documents: list[DocumentIn], processes: int, work: Path) -> float:
    """Documents per second from `ingest` to every projection applied, vector cache cold."""
    settings = Settings(data_dir=work / f"data-{processes}", auth={"enabled": False},
                        embedder={"encoder_processes": processes})
    memory, lock = build_memory(settings)
    try:
        # A first batch outside the timing loads the model (and starts the workers), as in a
        # server that has seen one batch.
        memory.ingest(documents[:BATCH // 4])
        memory.catch_up()
        rest = documents[BATCH // 4:]
        started = time.perf_counter()
        memory.ingest(rest)
        memory.catch_up()
        return len(rest) / (time.perf_counter() - started)
    finally:
        memory.close()
        lock.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--int8", action="store_true", help="also time the int8 encoder on the same texts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    documents = corpus(args.texts)
    texts = [embedding_text(d.title, d.text) for d in documents]
    load = os.getloadavg()[0]
    print(f"{len(texts)} texts (LoCoMo + QMSum turns), batches of {BATCH}; {os.cpu_count()} cores, "
          f"load average {load:.1f} at start")

    local = OnnxEmbedder(MODEL)
    raw = encode_rate(local, texts)
    # The workers batch 16 texts (services.bootstrap.components.pooled), the process 64: the
    # in-process encoder at 16 separates that effect from the processes'.
    raw16 = encode_rate(OnnxEmbedder(MODEL, batch_size=16), texts)
    pool = ProcessPoolEmbedder(local, functools.partial(OnnxEmbedder, MODEL, batch_size=16), args.processes)
    try:
        pool.encode(texts[:BATCH])  # started and warm
        pooled = encode_rate(pool, texts)
    finally:
        pool.close()
    print("| what | docs/s | vs one |")
    print("|---|---|---|")
    print(f"| raw encoder, in process (fp32, 1 thread, batches of 64) | {raw:.1f} | 1.00x |")
    print(f"| raw encoder, in process, batches of 16 | {raw16:.1f} | {raw16 / raw:.2f}x |")
    print(f"| raw encoder, {args.processes} processes (batches of 16) | {pooled:.1f} | {pooled / raw:.2f}x |", flush=True)
    if args.int8:
        int8 = encode_rate(OnnxEmbedder(MODEL, precision="int8"), texts)
        print(f"| raw encoder, in process, int8 (one text at a time) | {int8:.1f} | {int8 / raw:.2f}x |", flush=True)
    with tempfile.TemporaryDirectory(prefix="orgmem-encoders-") as work:
        one = ingest_rate(documents, 1, Path(work))
        many = ingest_rate(documents, args.processes, Path(work))
    print(f"| memory ingest, 1 encoder process | {one:.1f} | {one / raw:.2f}x of raw |")
    print(f"| memory ingest, {args.processes} encoder processes | {many:.1f} | {many / one:.2f}x "
          f"(target >= 1.6x) |")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
