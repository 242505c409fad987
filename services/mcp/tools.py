"""What each MCP tool does, through the HTTP routes' own functions: a tool builds the route's request
model, runs the route (its checks, limits, use case and response model) as the same Caller, and
shapes the answer for a model to read. Nothing here reads the memory another way, so a tool shows a
caller no more than the API would.

Failures become MCP tool errors (`isError` results) that name the field and the problem, with the
title problems.py gives the same exception; an unexpected exception is left to the SDK, which
answers a bare tool error and logs it, so a session never ends on a bad call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from schemas.answer import AnswerRequest
from schemas.api import IngestRequest, QueryRequest
from schemas.documents import DocumentIn
from schemas.rows import Row, RowChange
from services.api import problems
from services.api.auth import ROLE_RANK
from services.api.routes import answer as answer_route
from services.api.routes import memory as routes
from services.api.routes import people as people_route
from services.core.caller import Caller
from services.errors import NotFound
from services.mcp import timeline

# The read path's internals: noise to a model, and every other QueryHit field is passed through.
SCORING_FIELDS = {"leg_ranks", "leg_scores", "fused_score"}


def tool_error(exc: Exception) -> Exception:
    """The tool error of an exception (field and problem, titled as the API's problem details), or
    the exception itself where the API would answer 500."""
    if isinstance(exc, ToolError):
        return exc
    if isinstance(exc, ValidationError):
        listed = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()[:10])
        return ToolError(f"Invalid request: {listed}")
    rule = problems.rule_for(exc)
    if rule is problems.INTERNAL:
        return exc
    return ToolError(f"{rule.title}: {rule.detail(exc)}")


@contextmanager
def as_tool_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = tool_error(exc)
        if mapped is exc:
            raise
        raise mapped from None


def require(caller: Caller, role: str, tool: str) -> None:
    """The routes' role rule (reader < writer < admin), worded for a tool."""
    if ROLE_RANK.get(caller.role, -1) < ROLE_RANK[role]:
        raise ToolError(f"Forbidden: {tool} needs the {role} role; the caller has {caller.role}")


def _utc(value: datetime | None) -> datetime | None:
    return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


class MemoryTools:
    """The tools over one server state (the API's AppState: settings, memory, metrics, indexer)."""

    def __init__(self, state):
        self.state = state

    async def search(self, caller: Caller, q: str, *, as_of: datetime | None = None, known_at: datetime | None = None,
                     k: int | None = None, kinds: list[str] | None = None, authors: list[str] | None = None,
                     threads: list[str] | None = None, after: int | None = None, people_rules: bool = False,
                     time_rules: bool = False) -> dict:
        with as_tool_errors():
            # A bare date ("2025-07-01") is midnight UTC, as a document's date is.
            body = QueryRequest(q=q, as_of=_utc(as_of), known_at=_utc(known_at), k=k, kinds=kinds, authors=authors,
                                threads=threads, after=after, people_rules=people_rules, time_rules=time_rules)
            answer = await routes.answer_query(body, self.state, caller)
        return {"rows": [hit.model_dump(mode="json", exclude=SCORING_FIELDS) for hit in answer.rows],
                "matched": answer.matched, "applied_position": answer.applied_position,
                **({"people_named": [p.model_dump() for p in answer.people_named]} if people_rules else {}),
                **({"time_window": answer.time_window.model_dump(mode="json") if answer.time_window else None}
                   if time_rules else {})}

    async def answer(self, caller: Caller, q: str, *, as_of: datetime | None = None, known_at: datetime | None = None,
                     k: int | None = None, kinds: list[str] | None = None, authors: list[str] | None = None,
                     threads: list[str] | None = None, after: int | None = None, people_rules: bool = False,
                     time_rules: bool = False) -> dict:
        """POST /v1/answer as this caller: the answer, its checked citations and what is missing."""
        with as_tool_errors():
            body = AnswerRequest(q=q, as_of=_utc(as_of), known_at=_utc(known_at), k=k, kinds=kinds, authors=authors,
                                 threads=threads, after=after, people_rules=people_rules, time_rules=time_rules)
            answer = await answer_route.answer(body, self.state, caller)
        return answer.model_dump(mode="json")

    async def document(self, caller: Caller, row_id: str) -> dict:
        with as_tool_errors():
            answer = await anyio.to_thread.run_sync(routes.get_row, row_id, self.state, caller)
        return answer.model_dump(mode="json")

    async def thread_versions(self, caller: Caller, thread: str) -> dict:
        with as_tool_errors():
            answer = await anyio.to_thread.run_sync(routes.get_thread, thread, self.state, caller)
        return {"thread": thread, "versions": timeline.versions(answer.rows), "truncated": answer.truncated}

    async def what_changed(self, caller: Caller, since: datetime, until: datetime, *, thread: str | None = None,
                           q: str | None = None, k: int | None = None) -> dict:
        with as_tool_errors():
            found = [p for p in (routes.date_problem("since", since), routes.date_problem("until", until)) if p]
            if (thread is None) == (q is None):
                found.append("thread, q: give exactly one (a thread id, or a question whose matches' threads are read)")
            if not found and _utc(since) >= _utc(until):
                found.append("since: must be before until")
            if found:
                raise problems.invalid_request("; ".join(found))
            since, until = _utc(since), _utc(until)
            budget = self.state.settings.limits.max_thread_rows
            rows, truncated = await (self._thread_rows(caller, thread, budget) if thread is not None else
                                     self._matching_rows(caller, q, until, k, budget))
            histories, readable = await anyio.to_thread.run_sync(self._histories, caller, rows)
        changes = timeline.changes(rows, histories, readable, since, until)
        return {"since": since.isoformat(), "until": until.isoformat(), "thread": thread, "q": q,
                "versions_read": len(rows), "truncated": truncated, "changes": changes}

    async def people(self, caller: Caller, *, q: str | None = None, person_id: str | None = None,
                     limit: int = 100, offset: int = 0) -> dict:
        """GET /v1/people (or /v1/people/{id} given person_id) as this caller: only people met in rows
        the caller may read, so a person seen only in a private channel is unknown to a non-member."""
        with as_tool_errors():
            if person_id is not None:
                answer = await people_route.get_person(person_id, self.state, caller)
            else:
                answer = await people_route.list_people(self.state, caller, q=q, limit=limit, offset=offset)
        return answer.model_dump(mode="json")

    async def add(self, caller: Caller, documents: list[DocumentIn]) -> dict:
        require(caller, "writer", "add_documents")
        with as_tool_errors():
            answer = await routes.ingest(IngestRequest(documents=documents), self.state, caller)
        return {"row_ids": answer.row_ids, "position": answer.position,
                "read_your_writes": "pass position as `after` to search_memory to wait until they are searchable"}

    # --- what_changed's reads: the routes, and the use case behind GET /v1/rows ----------------
    async def _thread_rows(self, caller: Caller, thread: str, limit: int) -> tuple[list[Row], bool]:
        answer = await anyio.to_thread.run_sync(routes.get_thread, thread, self.state, caller, limit)
        return answer.rows, answer.truncated

    async def _matching_rows(self, caller: Caller, q: str, until: datetime, k: int | None,
                             budget: int) -> tuple[list[Row], bool]:
        """The rows of the threads the question's matches (dated by `until`) belong to, the latest
        versions of each, `budget` rows in all (the best matches' threads first); a match without a
        thread stands alone. True when the budget left rows out."""
        body = QueryRequest(q=q, as_of=until, k=k)
        hits = (await routes.answer_query(body, self.state, caller)).rows
        rows: dict[str, Row] = {}
        truncated = False
        for thread in dict.fromkeys(hit.thread for hit in hits if hit.thread):
            if len(rows) >= budget:
                return list(rows.values()), True
            found, cut = await self._thread_rows(caller, thread, budget - len(rows))
            truncated |= cut
            rows.update((row.row_id, row) for row in found)
        for hit in hits:
            if not hit.thread and hit.row_id not in rows:
                rows[hit.row_id] = (await anyio.to_thread.run_sync(routes.get_row, hit.row_id, self.state, caller)).row
        return list(rows.values()), truncated

    def _histories(self, caller: Caller, rows: list[Row]) -> tuple[dict[str, list[RowChange]], dict[str, Row]]:
        """Each row's history, and the rows its supersessions name that the caller may read (the
        use case behind GET /v1/rows, without the version each answer there carries)."""
        memory = self.state.memory
        histories, readable = {}, {row.row_id: row for row in rows}
        for row in rows:
            histories[row.row_id] = memory.row(row.row_id, caller)[1]
        named = {step.superseded_by for steps in histories.values() for step in steps if step.superseded_by}
        for row_id in named - readable.keys():
            try:
                readable[row_id] = memory.row(row_id, caller)[0]
            except NotFound:  # not the caller's to read: neither its date nor its author is shown
                pass
        return histories, readable
