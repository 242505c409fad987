"""The closing burst of the live benchmark (bench/live.py): the whole pipeline's documents/s on
fresh documents through HTTP, beside one raw encoder's on the same texts in this process."""

from __future__ import annotations

import time

import httpx


def wait_applied(http: httpx.Client, position: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if http.get("/readyz").json()["applied_position"] >= position:
            return True
        time.sleep(0.2)
    return False


def throughput(run, n: int, timeout_s: float) -> dict:
    """The pipeline's documents/s on a burst of n fresh documents (sent as fast as accepted, timed
    until the projections hold them all), then the raw encoder's on the same texts in this process.
    `run` is a LiveRun of bench/live.py: its writer and admin clients and its document stream."""
    from services.bootstrap import embedder_for
    from services.core.write_path import embedding_text
    from services.settings import Settings

    head, began = run.admin.get("/readyz").json()["log_head"], time.perf_counter()
    if not wait_applied(run.admin, head, timeout_s):
        return {"error": f"the indexer did not catch up with the log within {timeout_s:g} s"}
    catch_up_s = round(time.perf_counter() - began, 1)
    docs = [next(run.stream) for _ in range(n)]
    started, position = time.perf_counter(), head
    for start in range(0, n, 100):
        response = run.writer.post("/v1/documents", json={
            "documents": [d.model_dump(mode="json", exclude_defaults=True) for d in docs[start:start + 100]]})
        response.raise_for_status()
        position = response.json()["position"]
    if not wait_applied(run.admin, position, timeout_s):
        return {"error": f"the burst was not indexed within {timeout_s:g} s"}
    pipeline = n / (time.perf_counter() - started)
    settings = Settings()
    encoder = embedder_for(settings.embedder)
    texts = [embedding_text(d.title, d.text) for d in docs]
    encoder.encode(texts[:16])  # warm-up: the model loads here, not in the timing
    started = time.perf_counter()
    for start in range(0, n, settings.indexer_batch):
        encoder.encode(texts[start:start + settings.indexer_batch])
    raw = n / (time.perf_counter() - started)
    precision = getattr(settings.embedder, "document_vectors", "fp32")
    return {"catch_up_s": catch_up_s, "documents": n, "pipeline_docs_per_s": round(pipeline, 1),
            "raw_encoder_docs_per_s": round(raw, 1), "ratio": round(pipeline / raw, 3),
            "raw_encoder": f"one {settings.embedder.backend} {precision} encoder in this process, "
                           f"batches of {settings.indexer_batch}",
            "server_encoder_processes": server_encoder_processes(settings)}


def server_encoder_processes(settings) -> int | None:
    """How many document encoder processes the server runs with these settings (None where this
    version has no such setting)."""
    try:
        from services.bootstrap.components import encoder_processes
    except ImportError:
        return None
    return encoder_processes(settings.embedder)
