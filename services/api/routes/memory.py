"""The memory routes: ingest whole documents, query as of a time, read a row or a thread."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.concurrency import run_in_threadpool

from schemas.api import (
    IngestRequest,
    IngestResponse,
    PersonNamed,
    QueryHit,
    QueryRequest,
    QueryResponse,
    RowResponse,
    RowVersion,
    ThreadResponse,
    TimeWindowApplied,
)
from schemas.documents import DATE_MAX, DATE_MIN  # the window every entry point applies
from services.api.deps import CurrentCaller, State, Writer
from services.api.problems import ApiProblem, invalid_request
from services.api.routes.people import authors_for
from services.app.people import directory_for
from services.app.retrieval import PeopleLeg
from services.app.time_anchor import event_window
from services.app.time_parse import question_window
from services.core.evidence import render_evidence
from services.core.people import aliases_of
from services.core.people_mentions import named_in, without_names
from services.core.positions import lane_of
from services.core.retrieval_config import weights_problem
from services.core.time_anchor import find_anchor
from services.core.versions import Version
from services.errors import NotReady

router = APIRouter(tags=["memory"])


def date_problem(field: str, value: datetime | None) -> str | None:
    """The problem with a date outside the window every entry point accepts (the MCP tools too), if any."""
    if value is None:
        return None
    try:
        in_range = DATE_MIN <= (value if value.tzinfo else value.replace(tzinfo=UTC)) <= DATE_MAX
    except OverflowError:
        in_range = False
    return None if in_range else f"{field}: a date from year {DATE_MIN.year} to {DATE_MAX.year}"


def check_document_dates(body: IngestRequest) -> None:
    problems = [p for i, d in enumerate(body.documents) if (p := date_problem(f"documents.{i}.date", d.date))]
    if problems:
        raise invalid_request("; ".join(problems[:10]))


def check_query_limits(body: QueryRequest, limits) -> None:
    problems = [p for p in (date_problem("as_of", body.as_of), date_problem("known_at", body.known_at),
                            date_problem("reference_time", body.reference_time)) if p]
    if (body.k or 0) > limits.max_k:
        problems.append(f"k: at most {limits.max_k}")
    if (body.reserve or 0) > limits.max_k:
        problems.append(f"reserve: at most {limits.max_k}")
    if (body.candidates or 0) > limits.max_candidates:
        problems.append(f"candidates: at most {limits.max_candidates}")
    for name in ("kinds", "authors", "threads"):
        values = getattr(body, name)
        if values is not None and len(values) > limits.max_filter_values:
            problems.append(f"{name}: at most {limits.max_filter_values} values")
    for leg, weight in (body.weights or {}).items():
        if not math.isfinite(weight) or not 0 <= weight <= 1000:
            problems.append(f"weights.{leg}: a finite number from 0 to 1000")
    if problems:
        raise invalid_request("; ".join(problems))


@router.post("/v1/documents", operation_id="ingest_documents", response_model=IngestResponse)
async def ingest(body: IngestRequest, s: State, caller: Writer) -> IngestResponse:
    limit = s.settings.limits.max_batch_documents
    if len(body.documents) > limit:
        raise ApiProblem(413, "Batch too large", f"documents: {len(body.documents)} documents exceeds the batch "
                         f"limit of {limit}", "too-large")
    check_document_dates(body)
    result = await run_in_threadpool(s.memory.accept, body.documents, caller)
    s.metrics.documents.inc(len(body.documents))
    s.indexer.wake()
    return IngestResponse(row_ids=result.row_ids, position=result.position)


async def wait_for_position(memory, position: int, timeout_s: float) -> None:
    """Read-your-writes without holding a worker thread: the event loop polls the applied position
    with short sleeps, up to the timeout. Only the check of a process that follows other indexers
    (one read of the row store's checkpoint) borrows a thread, for a moment, now and then."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + timeout_s, 0.005
    while not memory.covers(position):
        if await run_in_threadpool(memory.wait_for, position, 0):
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise NotReady(f"after: position {position} not indexed within {timeout_s:g} s "
                           f"(indexed: {memory.applied})")
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.1)


@router.post("/v1/query", operation_id="query", response_model=QueryResponse)
async def query(body: QueryRequest, s: State, caller: CurrentCaller) -> Response:
    # Written out as it is: the response_model (kept for the schema) would dump it, validate the
    # dump again and dump that, about 2 ms of the event loop for 50 rows' texts.
    answer = await answer_query(body, s, caller)
    return Response(answer.model_dump_json(by_alias=True), media_type="application/json")


async def answer_query(body: QueryRequest, s: State, caller: CurrentCaller) -> QueryResponse:
    """The query route's answer, also for the MCP tools."""
    limits = s.settings.limits
    check_query_limits(body, limits)
    if body.after is not None and body.after > (head := s.memory.heads().of(lane_of(body.after))):
        # No amount of waiting reaches a position nobody has written: a client error, not a 503.
        raise invalid_request(f"after: position {body.after} is past the log head {head}")
    config = s.memory.config_for(body.preset, k=body.k, reserve=body.reserve, candidates=body.candidates,
                                 selector=body.selector, conjunctive=body.conjunctive,
                                 lexical_match=body.lexical_match, lexical_turn_match=body.lexical_turn_match,
                                 weights=body.weights)
    if problem := weights_problem(config.weights):  # the request's weights over its preset's
        raise invalid_request(problem)
    if body.after is not None:
        # First: the event phrase, the people filter and the people rule read the store, and
        # must see what `after` waits for.
        await wait_for_position(s.memory, body.after, limits.read_your_writes_timeout_s)
    as_of, since, window = (await run_in_threadpool(time_bounds, body, s.memory, caller) if body.time_rules
                            else (body.as_of, None, None))  # an event phrase reads the index: off the loop
    scope = s.memory.scope_for(caller, as_of=as_of, since=since, known_at=body.known_at, kinds=body.kinds,
                               authors=body.authors if not body.people else await run_in_threadpool(
                                   authors_for, body.people, body.authors, s.memory, caller),
                               threads=body.threads)
    people, named = await run_in_threadpool(people_rule, body, s.memory, caller) if body.people_rules else (None, None)
    result = await run_in_threadpool(s.memory.query, body.q, scope, config, None, 30.0, people)
    rows = [sel.row for sel in result.selected]
    versions = {row_id: _version(v) for row_id, v in result.versions.items()}
    return QueryResponse(
        rows=[QueryHit(rank=sel.rank, row_id=sel.row.row_id, reason=sel.reason, fused_score=sel.fused_score,
                       leg_ranks=sel.leg_ranks, leg_scores=sel.leg_scores, date=sel.row.event_time,
                       author=sel.row.author, kind=sel.row.kind, thread=sel.row.thread, title=sel.row.title,
                       text=sel.row.text, parent=sel.row.parent, version=(version := versions.get(sel.row.row_id)),
                       superseded_by=version.contradicted_by[0] if version and version.contradicted_by else None)
              for sel in result.selected],
        evidence=render_evidence(rows, show_supersession=body.show_supersession, versions=result.versions),
        matched=result.matched, leg_sizes=result.leg_sizes, timings_ms=result.timings_ms,
        applied_position=s.memory.applied_for(caller.tenant),
        time_window=window,
        people_named=named,
    )


# How old a people directory the query's people rule may use: under steady ingest each write would
# otherwise rebuild it (tens of ms at 20k rows); a person first met less than this long ago is not read.
PEOPLE_RULE_DIRECTORY_AGE_S = 30.0


def people_rule(body: QueryRequest, memory, caller) -> tuple[PeopleLeg | None, list[PersonNamed]]:
    """The persons the question names among the caller's directory, and the leg of their rows."""
    directory = directory_for(memory, caller, max_age_s=PEOPLE_RULE_DIRECTORY_AGE_S)
    persons = directory.persons
    named = named_in(body.q, persons, directory.names)
    reported = [PersonNamed(person_id=n.person_id, phrase=n.phrase) for n in named]
    if not named:
        return None, reported
    aliases = frozenset(aliases_of(persons, [n.person_id for n in named]))
    return PeopleLeg(aliases, without_names(body.q, named)), reported


def time_bounds(body: QueryRequest, memory, caller
                ) -> tuple[datetime | None, datetime | None, TimeWindowApplied | None]:
    """(as_of, since, the window applied): with time_rules, the question's time phrase narrows the
    event-date bounds; it never widens as_of. A calendar phrase ("in March 2025") is read first;
    else an event ("before the reorg") dated by a row the caller may read, known by as_of."""
    as_of = body.as_of
    if not body.time_rules:
        return as_of, None, None
    reference = body.reference_time or as_of or datetime.now(UTC)
    found, anchor_row = question_window(body.q, reference), None
    if found is None and (anchor := find_anchor(body.q)) is not None:
        dated = event_window(memory, memory.scope_for(caller, as_of=as_of, known_at=body.known_at), anchor)
        if dated is not None:
            found, anchor_row = dated
    if found is None:
        return as_of, None, None
    if found.end is not None:
        last = found.end - timedelta(microseconds=1)  # the window's end is exclusive, as_of is not
        as_of = last if as_of is None else min(as_of, last)
    return as_of, found.start, TimeWindowApplied(start=found.start, end=found.end, phrase=found.text,
                                                 anchor_row_id=anchor_row.row_id if anchor_row else None)


@router.get("/v1/rows/{row_id}", operation_id="get_row", response_model=RowResponse)
def get_row(row_id: str, s: State, caller: CurrentCaller) -> RowResponse:
    row, history = s.memory.row(row_id, caller)
    version = s.memory.versions([row], caller).get(row.row_id)
    return RowResponse(row=row, history=history, version=_version(version) if version else None)


@router.get("/v1/threads/{thread_id:path}", operation_id="get_thread", response_model=ThreadResponse)
def get_thread(thread_id: str, s: State, caller: CurrentCaller,
               limit: Annotated[int | None, Query(ge=1, description=(
                   "At most this many rows, the thread's latest (the server caps it at limits.max_thread_rows)"))] = None,
               ) -> ThreadResponse:
    cap = s.settings.limits.max_thread_rows
    if limit is not None and limit > cap:
        raise invalid_request(f"limit: at most {cap} (limits.max_thread_rows)")
    limit = limit or cap
    rows = s.memory.thread(thread_id, caller, limit + 1)  # one more tells whether earlier rows were left out
    truncated, rows = len(rows) > limit, rows[-limit:]
    versions = s.memory.versions(rows, caller)
    return ThreadResponse(thread=thread_id, rows=rows, truncated=truncated,
                          versions={rid: _version(v) for rid, v in versions.items()})


def _version(version: Version) -> RowVersion:
    return RowVersion(index=version.index, count=version.count, latest_row_id=version.latest_row_id,
                      superseded_by=version.superseded_by, superseded_on=version.superseded_on,
                      contradicted_by=list(version.contradicted_by))
