"""The store of `bench.live --scale 1m`: up to a million rows, built at the adapter level.

Encoding a million distinct texts would take hours on this machine, so the store is built from
the synthetic organisation's generator with real vectors reused: the documents of a few seeds
(the base, B documents) are encoded once by the real document encoder (kept in a vector cache
under the work folder, so a rerun encodes nothing); row i is base document i mod B made distinct
by a `[copy c]` prefix (c = i div B), its own source id and thread and a date c hours later, and
its vector is the base's real vector plus seeded Gaussian noise (PERTURBATION per component, then
renormalised: cosine to the base about 0.98). Those vectors are put in the data folder's vector
cache under the keys the write path uses, and the documents then go through `Memory.ingest` and
the projector like any others (log, row store, tantivy, Qdrant Edge, the cache itself), which
find every vector in the cache and encode none. The store measures latency and memory, not
quality: its texts are copies and its vectors near-duplicates.

`run_scale` grows the store to each checkpoint (a rerun on the same --data resumes it), then
starts the real server on it, waits until it is ready and, where /metrics reports the vector
graph, until at most --settle-exact rows are searched exactly, and measures queries (the
organisation's own questions, through HTTP, embedding included), RSS and disk.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import numpy as np

from bench import live_report as lr
from bench import live_server as ls
from bench.live_compare import compare_targets, paired_queries, print_comparison, query_figures, stage_line
from bench.live_corpus import org_documents
from schemas.documents import DocumentIn
from services.adapters.vector_cache.sqlite import SqliteVectorCache
from services.app.vector_cache import cache_key
from services.bootstrap import build_memory, cached_document_embedder
from services.core.write_path import embedding_text
from services.core.write_rules import author_scope, content_hash
from services.settings import Settings

PERTURBATION = 0.01  # standard deviation per component of a unit vector's noise
BASE_SEEDS = (1, 2, 3)
VECTOR_CACHE = Path("cache") / "vectors.sqlite"  # in the data folder, where services.bootstrap keeps it
CHUNK = 2000
NOTICE = ("measures latency and memory, not quality: rows are copies of the synthetic organisation's "
          f"documents with real vectors plus seeded noise (sd {PERTURBATION} per component)")


@dataclass(frozen=True)
class Base:
    documents: list[DocumentIn]
    vectors: np.ndarray  # one real, unit-length document vector per base document
    questions: list[str]  # the organisation's own questions: every leg has matches for them


def distinct_texts(docs: list[DocumentIn]) -> list[DocumentIn]:
    """The documents whose text is not a repeat in their author scope: the write path stores a
    repeat once, and every row document must make one row (its copy index is its position)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for doc in docs:
        key = (author_scope(doc.author), content_hash(doc.text))
        if key not in seen:
            seen.add(key)
            out.append(doc)
    return out


def load_base(work: Path, seeds=BASE_SEEDS, log=sys.stderr) -> Base:
    docs, questions = org_documents(work, seeds)
    docs = distinct_texts(docs)
    encoder = cached_document_embedder(Settings(data_dir=work / "base-vectors"))
    started = time.perf_counter()
    print(f"encoding {len(docs):,} base documents (once: kept in {work / 'base-vectors'})", file=log, flush=True)
    try:
        vectors = encoder.encode([embedding_text(d.title, d.text) for d in docs])
    finally:
        close = getattr(encoder, "close", None)
        if close:
            close()
    print(f"  base vectors ready in {time.perf_counter() - started:.0f} s", file=log, flush=True)
    return Base(docs, np.asarray(vectors, dtype=np.float32), questions)


def row_document(base: Base, i: int) -> DocumentIn:
    doc = base.documents[i % len(base.documents)]
    copy = i // len(base.documents)
    return doc.model_copy(update={
        "text": f"[copy {copy}] {doc.text}",
        "source_id": f"{doc.source_id}#copy{copy}",
        "thread": f"{doc.thread}#copy{copy}" if doc.thread else None,
        "date": doc.date + timedelta(hours=copy) if doc.date else None,
    })


def perturbed(vector: np.ndarray, seed: int, i: int) -> np.ndarray:
    """Row i's vector: the same (seed, i) always gives the same vector, of unit length."""
    noise = np.random.default_rng([seed, i]).standard_normal(vector.shape[0]).astype(np.float32)
    out = vector + PERTURBATION * noise
    return (out / np.linalg.norm(out)).astype(np.float32)


def row_vector(base: Base, i: int, seed: int) -> np.ndarray:
    return perturbed(base.vectors[i % len(base.vectors)], seed, i)


def build_to(settings: Settings, base: Base, target: int, seed: int, optimize: bool = False,
             log=sys.stderr) -> dict:
    """Grow the store of `settings.data_dir` to `target` rows (resuming from the rows it holds;
    the server must not be running on it). Returns what the build took."""
    if not settings.embedder.vector_cache:
        raise SystemExit("--scale 1m needs the vector cache (embedder.vector_cache): it feeds the projector")
    data = Path(settings.data_dir)
    recipe = {"base_documents": len(base.documents), "seed": seed, "perturbation": PERTURBATION}
    marker = data.parent / f"{data.name}.recipe.json"
    if marker.exists() and json.loads(marker.read_text()) != recipe:
        raise SystemExit(f"{data} was built from {marker.read_text().strip()}, not {recipe}: "
                         "pass another --data, or the same --base-seeds and --seed")
    marker.write_text(json.dumps(recipe))
    memory, lock = build_memory(settings)
    probe = cached_document_embedder(settings)
    model, dim = probe.model, probe.dim
    probe.close()
    cache = SqliteVectorCache(Path(settings.data_dir) / VECTOR_CACHE, dim)
    started, have = time.perf_counter(), memory.counts()["active"]
    first = have
    try:
        while have < target:
            n = min(CHUNK, target - have)
            docs = [row_document(base, i) for i in range(have, have + n)]
            texts = [embedding_text(d.title, d.text) for d in docs]
            cache.put_many([(cache_key(model, t), row_vector(base, i, seed)) for i, t in enumerate(texts, start=have)])
            cached = cache.count()
            memory.ingest(docs)
            memory.catch_up()
            if cache.count() != cached:
                raise RuntimeError(f"the projector encoded {cache.count() - cached} texts that the prefilled vector "
                                   f"cache should have held: has {VECTOR_CACHE} or the cache key moved?")
            now = memory.counts()["active"]
            if now != have + n:
                raise RuntimeError(f"{n} documents made {now - have} rows: rows must map one to one to documents")
            have = now
            if have % 50_000 < n:
                rate = (have - first) / (time.perf_counter() - started)
                print(f"  built {have:,} rows ({rate:,.0f} rows/s)", file=log, flush=True)
        built_s = time.perf_counter() - started
        optimize_s = None
        if optimize:
            began = time.perf_counter()
            memory.optimize_vectors()
            optimize_s = round(time.perf_counter() - began, 1)
    finally:
        cache.close()
        memory.close()
        lock.release()
    return {"rows": have, "added": have - first, "build_s": round(built_s, 1),
            "rows_per_s": round((have - first) / built_s, 1) if have > first else None, "optimize_s": optimize_s}


# --- measuring the real server on the store ------------------------------------------------
SCALE_TARGETS = (("p50", 40.0), ("p95", 100.0))
SCALE_HEADERS = ("rows", "build s", "rows/s", "optimize s", "queries", "p50 ms", "p95 ms", "p99 ms", "max ms",
                 "embed ms", "vector ms", "graph rows", "exact rows", "graph wait s", "RSS MiB", "with children MiB",
                 "disk MiB", "disk MiB/100k")


def settle(http: httpx.Client, proc, exact_max: int, timeout_s: float) -> tuple[dict, float]:
    """Wait until the server process `proc` is ready and, where it reports its vector graph, no
    build runs and at most `exact_max` rows are searched exactly (up to timeout_s). The last
    sample, and the wait. A connection the server drops is asked again: opening a new sealed
    shard holds its interpreter for seconds at 400k rows, and a keep-alive connection can be
    reset under it."""
    started = time.monotonic()
    while True:
        try:
            now = ls.sample(http, proc.pid)
        except httpx.TransportError as exc:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited ({proc.returncode}) while settling: {exc!r}") from exc
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the server did not answer within {timeout_s:g} s: {exc!r}") from exc
            time.sleep(2)
            continue
        waited = time.monotonic() - started
        graph_pending = now["exact_rows"] is not None and (now["building"] or now["exact_rows"] > exact_max)
        if (now["status"] == "ready" and not graph_pending) or waited > timeout_s:
            return now, round(waited, 1)
        time.sleep(2)


def measure_scale(args, keys: dict[str, str], questions: list[str], built: dict) -> dict:
    server = ls.Server(args.data)
    try:
        admin, reader = ls.client(server.url, keys["admin"]), ls.client(server.url, keys["reader"])
        _, settle_s = settle(admin, server.proc, args.settle_exact, args.graph_wait)
        asked = itertools.cycle(questions)
        for _ in range(args.warmup):
            ls.timed_query(reader, next(asked), args.preset)
        if args.compare_preset:
            queries, compared = paired_queries(reader, asked, args.queries, args.preset, args.compare_preset)
        else:
            queries, compared = [ls.timed_query(reader, next(asked), args.preset) for _ in range(args.queries)], None
        last = ls.sample(admin, server.proc.pid)
    finally:
        server.stop()
    disk = ls.disk_parts(args.data)
    return {**built, **query_figures(queries), "compared": compared,
            "graph_rows": last["graph_rows"], "exact_rows": last["exact_rows"], "settle_s": settle_s,
            "last_build_s": last["last_build_s"],
            "rss_mib": lr.mib(last["rss"]), "tree_rss_mib": lr.mib(last["tree_rss"]), "disk_mib": disk,
            "disk_mib_per_100k": round(disk["total"] / built["rows"] * 100_000, 1) if built["rows"] else None}


def scale_cells(row: dict) -> list:
    return [row["rows"], row["build_s"], row["rows_per_s"], row["optimize_s"], row["n"], row["p50_ms"], row["p95_ms"],
            row["p99_ms"], row["max_ms"], row["embed_p50_ms"], row["vector_p50_ms"], row["graph_rows"],
            row["exact_rows"], row["settle_s"], row["rss_mib"], row["tree_rss_mib"], row["disk_mib"]["total"],
            row["disk_mib_per_100k"]]


def run_scale(args) -> dict:
    print(NOTICE, flush=True)
    base = load_base(args.work, seed_count(args.base_seeds))
    args.data = Path(args.data or args.work / "store-1m")
    keys = ls.create_keys(args.data)
    checkpoints = list(range(args.every, args.rows + 1, args.every))
    if not checkpoints or checkpoints[-1] != args.rows:
        checkpoints.append(args.rows)
    print(lr.render_table(SCALE_HEADERS, []), flush=True)
    rows = []
    for target in checkpoints:
        built = build_to(Settings(data_dir=args.data), base, target, args.seed, optimize=args.optimize)
        if built["rows"] > target:
            print(f"  the store already holds {built['rows']:,} rows: no measurement at {target:,}", flush=True)
            continue
        rows.append(measure_scale(args, keys, base.questions, built))
        print(lr.render_table(SCALE_HEADERS, [scale_cells(rows[-1])]).splitlines()[-1], flush=True)
        print("  stage p50 ms: " + stage_line(rows[-1]), flush=True)
        if rows[-1]["compared"]:
            print_comparison(args.preset, rows[-1])
    last = rows[-1]
    at = f"at {last['rows']:,} rows (the target is stated for 1,000,000)"
    return {"notice": NOTICE, "rows": rows, "base_documents": len(base.documents), "questions": "synthetic-org",
            "targets": [lr.target_line(f"{name} {at}", last.get(f"{name}_ms"), limit) for name, limit in SCALE_TARGETS]
            + compare_targets(args.preset, last),
            "data": str(args.data)}


def seed_count(n: int) -> tuple[int, ...]:
    return tuple(range(1, n + 1))
