"""Operations: liveness, readiness, Prometheus metrics and row counts of a tenant."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.api import StatsResponse
from services.api.deps import Admin, State
from services.app.indexer import rewound

router = APIRouter(tags=["ops"])


@router.get("/healthz", operation_id="health")
def healthz() -> dict:
    return {"status": "ok"}


def _storage(s) -> dict | None:
    disk = getattr(s.parts, "disk", None)
    return disk.report() if disk is not None else None


@router.get("/readyz", operation_id="ready")
def readyz(s: State, response: Response) -> dict:
    heads, checkpoints = s.memory.heads(), s.memory.projection.checkpoints
    head, applied = heads.summary(), checkpoints.summary()
    # Positions are dense on SQLite; on Kafka they leave gaps and the backlog counts batches.
    lag, unit = (s.memory.lag(heads), "events" if s.settings.profile == "embedded" else "batches")
    storage = _storage(s)
    alive = s.indexer.is_alive()
    status, reason = ("ready", None) if alive else ("starting", "the indexer is not running")
    max_lag = getattr(s.settings, "indexer_max_lag", 0)
    problems = getattr(s.memory, "problems", {})
    if problems:
        status = "projections-broken"
        reason = ("projection " + ", ".join(f"{name} is {state}" for name, state in sorted(problems.items()))
                  + " beside the row store: stop the server and run `orgmem rebuild`")
    elif behind := rewound(heads, checkpoints):
        status, reason = "log-behind", behind
    elif status == "ready" and max_lag and lag > max_lag:
        status = "lagging"
        reason = f"the indexer is {lag} {unit} behind the log (indexer_max_lag: {max_lag})"
    if storage is not None and storage["low"]:
        status = "storage-low"
        reason = (f"data folder has {storage['free_bytes']} bytes free, under the floor of "
                  f"{storage['min_free_bytes']} bytes (limits.min_free_bytes): writes are refused "
                  "and indexing is paused until space is freed")
    response.status_code = 200 if status == "ready" else 503
    body = {"status": status, "log_head": head, "applied_position": applied, "lag": lag,
            "indexer_paused": bool(getattr(s.indexer, "paused", False))}
    if reason:
        body["reason"] = reason
    if len(heads) > 1:  # a log split by tenant: each lane (partition) on its own
        body["lanes"] = {str(lane): {"head": lane_head, "applied": checkpoints.of(lane)}
                         for lane, lane_head in sorted(heads.items())}
    if problems:
        body["projections"] = dict(problems)
    if max_lag:
        body["max_lag"] = max_lag
    if storage is not None:  # not the folder's path: /readyz needs no credentials
        body["storage"] = {k: v for k, v in storage.items() if k != "data_dir"}
    return body


@router.get("/metrics", operation_id="metrics")
def metrics(s: State) -> Response:
    m = s.metrics
    heads, checkpoints = s.memory.heads(), s.memory.projection.checkpoints
    m.log_head.set(heads.summary())
    m.applied.set(checkpoints.summary())
    m.log_behind.set(1 if checkpoints.behind(heads) else 0)
    m.indexer_errors.set(s.indexer.errors)
    m.indexer_paused.set(1 if getattr(s.indexer, "paused", False) else 0)
    storage = _storage(s)
    if storage is not None:
        if storage["free_bytes"] is not None:
            m.free_bytes.set(storage["free_bytes"])
        m.min_free_bytes.set(storage["min_free_bytes"])
    for key, value in s.memory.counts().items():
        m.rows.labels(key).set(value)
    if (graph := s.memory.vector_status()) is not None:
        m.vector_graph(graph)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/stats", operation_id="stats", response_model=StatsResponse)
def stats(s: State, caller: Admin) -> StatsResponse:  # counts cover rows past access lists
    return StatsResponse(**s.memory.stats(caller.tenant))
