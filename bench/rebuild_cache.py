"""`orgmem rebuild` with the content-addressed vector cache, next to encoding the same texts.

Builds a fresh data folder from N benchmark documents (indexing encodes every text once and fills
the cache), then rebuilds its projections from the log twice: with the cache (vectors are read)
and with it switched off (every text is encoded again). The raw encoder's throughput on the same
texts is printed beside them, from the same run.

    python -m bench.rebuild_cache --docs 3000

At sizes where encoding every text first would take hours (`--prefilled`, e.g. 100k rows), the
store is built as `bench.live --scale 1m` builds its store (bench/live_store.py: the synthetic
organisation's documents made distinct, their real vectors plus seeded noise put in the vector
cache before ingest, so nothing is encoded), the raw encoder is timed on a sample of the same
texts, and encoding all of them is that rate times the count: an extrapolation, printed as one.
The rebuild itself runs in full. The rebuild with the cache off is not run at that size (it
encodes every text: the 3k run measures it at the encoder's rate).

    python -m bench.rebuild_cache --prefilled --docs 100000
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from bench.corpus import documents
from services.adapters.vector_cache.sqlite import SqliteVectorCache
from services.bootstrap import build_memory, embedder_for, rebuild_aside
from services.core.write_path import embedding_text
from services.settings import Settings

WORK = Path(tempfile.gettempdir()) / "orgmem-live"  # bench.live's: the same base vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--prefilled", action="store_true",
                        help="build the store from prefilled vectors (bench/live_store.py) instead of encoding it")
    parser.add_argument("--sample", type=int, default=2000, help="with --prefilled: texts the raw encoder is timed on")
    parser.add_argument("--work", type=Path, default=WORK,
                        help=f"with --prefilled: where the base vectors are kept between runs (default {WORK})")
    args = parser.parse_args()
    if args.prefilled:
        prefilled(args.docs, args.sample, args.work)
        return
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

        encode_s = encoding_seconds(embedder_for(settings.embedder), [embedding_text(d.title, d.text) for d in docs])

        started = time.perf_counter()
        rebuild_aside(settings)
        cached_s = time.perf_counter() - started
        uncached = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"vector_cache": False})})
        started = time.perf_counter()
        rebuild_aside(uncached)
        uncached_s = time.perf_counter() - started
        cache_mb = (settings.data_dir / "cache" / "vectors.sqlite").stat().st_size / 2**20

        print(f"{len(docs)} documents, {rows} rows; vector cache {cache_mb:.1f} MiB")
        print_steps([("first indexing (encodes, fills the cache)", indexed_s, len(docs)),
                     ("raw encoder alone, same texts, batches of 256", encode_s, len(docs)),
                     ("rebuild, vectors from the cache", cached_s, len(docs)),
                     ("rebuild, cache off (encodes again)", uncached_s, len(docs))])
        print_ratio(encode_s, cached_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def prefilled(n: int, sample: int, work: Path) -> None:
    """The rebuild of an n-row store whose vectors were put in the cache, not encoded."""
    from bench import live_store

    work.mkdir(parents=True, exist_ok=True)
    base = live_store.load_base(work)  # encoded once, then read from work/base-vectors
    folder = Path(tempfile.mkdtemp(prefix="orgmem-rebuild-", dir=work))
    try:
        settings = Settings(data_dir=folder / "data")
        print(f"building {n:,} rows from prefilled vectors ({live_store.NOTICE})", flush=True)
        built = live_store.build_to(settings, base, n, seed=1)
        encoder = embedder_for(settings.embedder)
        cache_path = settings.data_dir / "cache" / "vectors.sqlite"
        cache = SqliteVectorCache(cache_path, encoder.dim)
        cached_before = cache.count()

        step = max(n // sample, 1)
        texts = [embedding_text(d.title, d.text)
                 for d in (live_store.row_document(base, i) for i in range(0, n, step))][:sample]
        rate = len(texts) / encoding_seconds(encoder, texts)

        started = time.perf_counter()
        _, counts = rebuild_aside(settings)
        cached_s = time.perf_counter() - started
        if cache.count() != cached_before:
            raise RuntimeError("the rebuild encoded texts the vector cache should have held")
        cache.close()
        size = cache_path.stat().st_size
        print(f"{n:,} documents, {counts['rows']} rows after the rebuild; vector cache "
              f"{size / 2**20:.0f} MiB ({size / n / 1024:.1f} KB per row)")
        print_steps([("building the store, vectors prefilled in the cache", built["build_s"], n),
                     (f"raw encoder alone, {len(texts):,} of the same texts, batches of 256", len(texts) / rate, len(texts)),
                     (f"encoding all {n:,} texts at that rate (extrapolated)", n / rate, n),
                     ("rebuild, vectors from the cache", cached_s, n)])
        print_ratio(n / rate, cached_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def encoding_seconds(encoder, texts: list[str]) -> float:
    started = time.perf_counter()
    for i in range(0, len(texts), 256):
        encoder.encode(texts[i:i + 256])
    return time.perf_counter() - started


def print_steps(steps: list[tuple[str, float, int]]) -> None:
    """A markdown table: each step's seconds and documents per second."""
    print("| step | seconds | documents/s |")
    print("|---|---|---|")
    for name, seconds, documents_count in steps:
        print(f"| {name} | {seconds:.1f} | {documents_count / seconds:.0f} |")


def print_ratio(encode_s: float, cached_s: float) -> None:
    print(f"rebuild with the cache: {encode_s / cached_s:.1f}x faster than encoding the texts "
          f"(target >= 10x); peak RSS {peak_rss_mib():.0f} MiB")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
