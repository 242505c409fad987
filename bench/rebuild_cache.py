"""`orgmem rebuild` with the content-addressed vector cache, next to encoding the same texts.

Builds a fresh data folder from N benchmark documents (indexing encodes every text once and fills
the cache), then rebuilds its projections from the log twice: with the cache (vectors are read)
and with it switched off (every text is encoded again). The raw encoder's throughput on the same
texts is printed beside them, from the same run.

    python -m bench.rebuild_cache --docs 3000
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from bench.corpus import documents
from services.bootstrap import build_memory, embedder_for, rebuild_aside
from services.core.write_path import embedding_text
from services.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="orgmem-rebuild-"))
    try:
        settings = Settings(data_dir=folder / "data")
        docs = documents(args.docs)
        memory, lock = build_memory(settings)
        try:
            memory.ingest(docs)
            started = time.perf_counter()
            memory.catch_up()
            indexed_s = time.perf_counter() - started
            rows = memory.counts().get("active", 0)
        finally:
            memory.close()
            lock.release()

        encoder = embedder_for(settings.embedder)
        texts = [embedding_text(d.title, d.text) for d in docs]
        started = time.perf_counter()
        for i in range(0, len(texts), 256):
            encoder.encode(texts[i:i + 256])
        encode_s = time.perf_counter() - started

        started = time.perf_counter()
        rebuild_aside(settings)
        cached_s = time.perf_counter() - started
        uncached = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"vector_cache": False})})
        started = time.perf_counter()
        rebuild_aside(uncached)
        uncached_s = time.perf_counter() - started
        cache_mb = (settings.data_dir / "cache" / "vectors.sqlite").stat().st_size / 2**20

        print(f"{len(docs)} documents, {rows} rows; vector cache {cache_mb:.1f} MiB")
        print("| step | seconds | documents/s |")
        print("|---|---|---|")
        for name, seconds in (("first indexing (encodes, fills the cache)", indexed_s),
                              ("raw encoder alone, same texts, batches of 256", encode_s),
                              ("rebuild, vectors from the cache", cached_s),
                              ("rebuild, cache off (encodes again)", uncached_s)):
            print(f"| {name} | {seconds:.1f} | {len(docs) / seconds:.0f} |")
        print(f"rebuild with the cache: {encode_s / cached_s:.1f}x faster than encoding the texts "
              f"(target >= 10x); peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
