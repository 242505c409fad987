"""orgmem's MCP server (the official `mcp` SDK, 2.x: `MCPServer`): six tools and two resource
templates over `MemoryTools`. The transport decides who calls: `caller_of` reads the Caller from a
request's context (Streamable HTTP, authenticated like the API) or returns the one a stdio process
was started as.

No `from __future__ import annotations` here: the SDK reads these signatures at run time to build
each tool's input schema and to find the Context parameter.
"""

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from schemas.documents import DocumentIn
from services.core.caller import Caller
from services.mcp.tools import MemoryTools

CallerOf = Callable[[Context], Caller]

INSTRUCTIONS = (
    "orgmem is an organization's memory: mail, tickets, meeting notes and documents, each stored whole, "
    "dated and attributed. Nothing is overwritten: a decision that changes an earlier one is a later "
    "version, so check dates and versions before answering what holds now. Start with search_memory; "
    "use as_of for what held on a date, known_at for what was known on a date; follow a thread with "
    "get_thread_versions, and ask what_changed for what moved between two dates."
)

DateArg = Annotated[datetime | None, Field(description="ISO 8601 date or time, e.g. 2025-07-01 or 2025-07-01T12:00:00Z")]
Values = Annotated[list[str] | None, Field(description="Only rows with one of these values")]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_server(tools: MemoryTools, caller_of: CallerOf) -> MCPServer:
    server = MCPServer("orgmem", title="orgmem organizational memory", instructions=INSTRUCTIONS,
                       log_level="WARNING")

    @server.tool(annotations=READ_ONLY, description=(
        "Search the organization's memory (email, tickets, meetings, docs) for evidence on a question. "
        "Returns the best-matching documents, each with its date, author, kind, thread, title, whole text, "
        "row_id and version (its place in its thread, and the later version that supersedes it). Use "
        "as_of to ask what held on a date (only documents dated by then), known_at to ask what orgmem "
        "knew on a date. Prefer the latest version unless the question is about the past."))
    async def search_memory(
        q: Annotated[str, Field(description="The question or keywords, in plain words")],
        ctx: Context,
        as_of: DateArg = None,
        known_at: DateArg = None,
        k: Annotated[int, Field(description="How many documents to return (default 10)")] = 10,
        kinds: Annotated[list[str] | None, Field(description="Only these kinds: email, ticket, meeting, doc, chat")] = None,
        authors: Values = None,
        threads: Values = None,
        after: Annotated[int | None, Field(description="A position add_documents returned: wait until it is searchable")] = None,
        people_rules: Annotated[bool, Field(description=(
            "Rank higher what the people the question names wrote (a full name, address, or unique first name)"))] = False,
        time_rules: Annotated[bool, Field(description=(
            "Read a time phrase in the question (in March 2025, last quarter) as a window on dates"))] = False,
    ) -> dict[str, Any]:
        return await tools.search(caller_of(ctx), q, as_of=as_of, known_at=known_at, k=k, kinds=kinds,
                                  authors=authors, threads=threads, after=after,
                                  people_rules=people_rules, time_rules=time_rules)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True), description=(
        "Answer a question from the organization's memory: the documents search_memory would find are "
        "given to the server's answer model, which answers from them alone. Returns the answer, its "
        "citations (row_id, title, date; only rows you may read), dropped_citations (ids the model "
        "cited that were not in the evidence: if any, `flagged` is true) and what the evidence does "
        "not cover (`missing`). Fails when the server has no answer model configured."))
    async def answer(
        q: Annotated[str, Field(description="The question, in plain words")],
        ctx: Context,
        as_of: DateArg = None,
        known_at: DateArg = None,
        k: Annotated[int, Field(description="How many documents the answer may draw on (default 10)")] = 10,
        kinds: Annotated[list[str] | None, Field(description="Only these kinds: email, ticket, meeting, doc, chat")] = None,
        authors: Values = None,
        threads: Values = None,
        after: Annotated[int | None, Field(description="A position add_documents returned: wait until it is searchable")] = None,
        people_rules: Annotated[bool, Field(description=(
            "Rank higher what the people the question names wrote (a full name, address, or unique first name)"))] = False,
        time_rules: Annotated[bool, Field(description=(
            "Read a time phrase in the question (in March 2025, last quarter) as a window on dates"))] = False,
    ) -> dict[str, Any]:
        return await tools.answer(caller_of(ctx), q, as_of=as_of, known_at=known_at, k=k, kinds=kinds,
                                  authors=authors, threads=threads, after=after,
                                  people_rules=people_rules, time_rules=time_rules)

    @server.tool(annotations=READ_ONLY, description=(
        "Read one document whole by its row_id (from search_memory or a thread): every field, its state "
        "(active or archived), what superseded it, and its history of changes."))
    async def get_document(row_id: Annotated[str, Field(max_length=256, description="A row_id")], ctx: Context) -> dict[str, Any]:
        return await tools.document(caller_of(ctx), row_id)

    @server.tool(annotations=READ_ONLY, description=(
        "Every document in a thread (a decision, a ticket, a mail thread), oldest first: its version "
        "number, date, author and state, the later version that superseded it, and any row a maintenance "
        "judge found to contradict it. Use it to see how a decision evolved and which version is the latest. "
        "A very long thread answers with its latest versions and `truncated: true`."))
    async def get_thread_versions(thread: Annotated[str, Field(max_length=1024, description="A thread id")],
                                  ctx: Context) -> dict[str, Any]:
        return await tools.thread_versions(caller_of(ctx), thread)

    @server.tool(annotations=READ_ONLY, description=(
        "The people met in the documents you may read (authors and participants): each with a person_id, "
        "display name, aliases (addresses) and counts by role. Give q for a name or address prefix; give "
        "person_id for one person and their documents by role. Pass person_ids as `people` to search."))
    async def find_people(
            ctx: Context,
            q: Annotated[str | None, Field(max_length=320, description="Name or alias prefix")] = None,
            person_id: Annotated[str | None, Field(max_length=64, description="One person's id")] = None,
            limit: Annotated[int, Field(ge=1, le=500)] = 100,
            offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0) -> dict[str, Any]:
        return await tools.people(caller_of(ctx), q=q, person_id=person_id, limit=limit, offset=offset)

    @server.tool(annotations=READ_ONLY, description=(
        "What changed between two dates, in one thread or around a question: the documents added, the "
        "versions superseded by a later one, contradictions, and archived rows within [since, until), with "
        "who wrote each and what it replaced. Give exactly one of thread or q."))
    async def what_changed(
        since: Annotated[datetime, Field(description="Start of the window (inclusive), ISO 8601")],
        until: Annotated[datetime, Field(description="End of the window (exclusive), ISO 8601")],
        ctx: Context,
        thread: Annotated[str | None, Field(max_length=1024, description="A thread id")] = None,
        q: Annotated[str | None, Field(description="A question; the threads of its matches are read")] = None,
        k: Annotated[int, Field(description="With q: how many matches to start from (default 10)")] = 10,
    ) -> dict[str, Any]:
        return await tools.what_changed(caller_of(ctx), since, until, thread=thread, q=q, k=k)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False), description=(
        "Add documents to the memory (needs the writer role). Each is stored whole and never overwritten: "
        "to change a decision, add a later, dated document in the same thread. Returns the row_ids and a "
        "position; pass it as `after` to search_memory to read them back."))
    async def add_documents(
        documents: Annotated[list[DocumentIn], Field(min_length=1, description="Documents: text, and author, date, kind, thread, title, tags, acl")],
        ctx: Context,
    ) -> dict[str, Any]:
        return await tools.add(caller_of(ctx), documents)

    @server.resource("orgmem://rows/{row_id}", name="row", mime_type="application/json",
                     description="One stored document with its state and history (as get_document)")
    async def row_resource(row_id: str, ctx: Context) -> str:
        return json.dumps(await as_resource(tools.document(caller_of(ctx), row_id)))

    @server.resource("orgmem://threads/{thread_id}", name="thread", mime_type="application/json",
                     description="The versions of a thread in date order, its latest when long (as get_thread_versions)")
    async def thread_resource(thread_id: str, ctx: Context) -> str:
        return json.dumps(await as_resource(tools.thread_versions(caller_of(ctx), thread_id)))

    return server


async def as_resource(answer) -> dict:
    """A tool's answer for a resource read: its refusals as resource errors (not found stays not found)."""
    try:
        return await answer
    except ToolError as exc:
        text = str(exc)
        raise (ResourceNotFoundError if text.startswith("Not found") else ResourceError)(text) from None
