"""Operations: liveness, readiness, Prometheus metrics and row counts of a tenant."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.api import StatsResponse
from services.api.deps import Admin, State

router = APIRouter(tags=["ops"])


@router.get("/healthz", operation_id="health")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", operation_id="ready")
def readyz(s: State, response: Response) -> dict:
    head, applied = s.memory.head(), s.memory.applied
    ready = s.indexer.is_alive()
    response.status_code = 200 if ready else 503
    return {"status": "ready" if ready else "starting", "log_head": head, "applied_position": applied,
            "lag": head - applied}


@router.get("/metrics", operation_id="metrics")
def metrics(s: State) -> Response:
    m = s.metrics
    m.log_head.set(s.memory.head())
    m.applied.set(s.memory.applied)
    m.indexer_errors.set(s.indexer.errors)
    for key, value in s.memory.counts().items():
        m.rows.labels(key).set(value)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/stats", operation_id="stats", response_model=StatsResponse)
def stats(s: State, caller: Admin) -> StatsResponse:  # counts cover rows past access lists
    return StatsResponse(**s.memory.stats(caller.tenant))
