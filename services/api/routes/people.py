"""`GET /v1/people`, `GET /v1/people/{id}`: the people met in the caller's readable rows.

The directory is built from the caller's scope only (services/app/people.py), so a person met
only in rows the caller cannot read is neither listed nor found: their guessed id is a 404.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from schemas.people import PEOPLE_MAX_LIMIT, PeopleResponse, PersonResponse, PersonRow, PersonSummary
from services.api.deps import CurrentCaller, State
from services.api.problems import invalid_request
from services.app.people import directory_for, rows_of
from services.core.people import Person, aliases_of, with_prefix
from services.errors import NotFound

router = APIRouter(tags=["people"])
ROWS_PER_ROLE = 200


def summary(person: Person) -> PersonSummary:
    return PersonSummary(person_id=person.person_id, display_name=person.display_name,
                         aliases=sorted(person.aliases), roles=dict(sorted(person.roles.items())))


@router.get("/v1/people", operation_id="list_people", response_model=PeopleResponse)
async def list_people(s: State, caller: CurrentCaller,
                      q: str | None = Query(None, max_length=320, description="Name or alias prefix."),
                      limit: int = Query(100, ge=1, le=PEOPLE_MAX_LIMIT),
                      offset: int = Query(0, ge=0, le=1_000_000)) -> PeopleResponse:
    directory = await run_in_threadpool(directory_for, s.memory, caller)
    chosen = with_prefix(directory.persons, q)
    page = chosen[offset:offset + limit]
    more = offset + limit < len(chosen)
    return PeopleResponse(people=[summary(p) for p in page], next_offset=offset + limit if more else None)


@router.get("/v1/people/{person_id}", operation_id="get_person", response_model=PersonResponse)
async def get_person(person_id: str, s: State, caller: CurrentCaller) -> PersonResponse:
    if len(person_id) > 64:
        raise invalid_request("person_id: at most 64 characters")
    directory = await run_in_threadpool(directory_for, s.memory, caller)
    person = directory.persons.get(person_id)
    if person is None:
        raise NotFound(f"person {person_id} not found")
    by_role = rows_of(directory, person)
    return PersonResponse(
        person=summary(person),
        rows={role: [PersonRow(row_id=r.row_id, date=r.event_time, kind=r.kind, title=r.title, thread=r.thread)
                     for r in rows[:ROWS_PER_ROLE]] for role, rows in by_role.items()},
        truncated=any(len(rows) > ROWS_PER_ROLE for rows in by_role.values()))


def authors_for(people: list[str] | None, authors: list[str] | None, memory, caller) -> list[str] | None:
    """The query's `authors` narrowed to these persons' aliases (the `people` filter)."""
    if not people:
        return authors
    persons = directory_for(memory, caller).persons
    unknown = [pid for pid in people if pid not in persons]
    if unknown:  # unknown to this caller: the same answer whether or not it exists elsewhere
        raise invalid_request(f"people: unknown person id {unknown[0][:64]!r}")
    aliases = aliases_of(persons, people)
    if authors is not None:
        aliases = [a for a in aliases if a in set(authors)]
    if not aliases:
        raise invalid_request("people: none of these persons' aliases is among `authors`")
    return aliases
