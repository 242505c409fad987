"""POST /v1/answer: the query route's retrieval (`answer_query`, with its checks and the caller's
scope), then the configured chat model answers from those rows alone (services.app.answer)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from schemas.answer import AnswerRequest, AnswerResponse, Citation
from services.api.deps import CurrentCaller, State
from services.api.routes.memory import answer_query
from services.app.answer import answer_from_evidence
from services.core.answer import EvidenceRow
from services.errors import AnswerNotConfigured

router = APIRouter(tags=["memory"])

NOT_CONFIGURED = ("answer_base_url, answer_model: this server has no answer endpoint; set ORGMEM_ANSWER_BASE_URL "
                  "and ORGMEM_ANSWER_MODEL (an OpenAI-compatible chat-completions endpoint) to enable answers")
_PROBLEM = {"content": {"application/problem+json": {}}}


@router.post("/v1/answer", operation_id="answer", response_model=AnswerResponse, responses={
    501: {**_PROBLEM, "description": "No answer endpoint is configured (answer_base_url, answer_model)"},
    502: {**_PROBLEM, "description": "The answer endpoint failed or replied something unusable"},
    504: {**_PROBLEM, "description": "The answer endpoint did not answer in time"}})
async def answer(body: AnswerRequest, s: State, caller: CurrentCaller) -> AnswerResponse:
    model = getattr(s.parts, "answerer", None)
    if model is None:  # before retrieval: nothing is read for an answer nobody can give
        raise AnswerNotConfigured(NOT_CONFIGURED)
    found = await answer_query(body, s, caller)
    rows = [EvidenceRow(hit.row_id, hit.title, hit.date) for hit in found.rows]
    checked = await run_in_threadpool(answer_from_evidence, model, body.q, found.evidence, rows,
                                      s.settings.answer_max_evidence_chars)
    window = getattr(found, "time_window", None)  # a query response may carry one (a model or a dict)
    return AnswerResponse(
        answer=checked.answer,
        citations=[Citation(row_id=c.row_id, title=c.title, date=c.date) for c in checked.citations],
        dropped_citations=checked.dropped_citations, flagged=checked.flagged, missing=checked.missing,
        time_window=window.model_dump(mode="json") if hasattr(window, "model_dump") else
        window if isinstance(window, dict) else None,
        evidence_rows=len(rows), model=getattr(model, "name", None) if rows else None,
        applied_position=found.applied_position)
