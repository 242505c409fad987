"""The people and time rules in the harness: a question's scope and people leg as `POST /v1/query`
with `people_rules` and `time_rules` would fetch them (the route's own functions), so that
`--rules` measures what the rules do to a public dataset, not a copy of them."""

from __future__ import annotations

from schemas.api import QueryRequest
from services.api.routes.memory import people_rule, time_bounds
from services.app.retrieval import PeopleLeg
from services.core.caller import Caller
from services.core.scope import Scope


RULES = ("people", "time", "both")


def question_scope(memory, question, rules: str = "") -> tuple[Scope, PeopleLeg | None]:
    """The scope a question is asked in and, with the rules ("people", "time" or "both"; "" for
    none), the leg of the persons it names. The reference time is the route's default (now): a
    caller of the API gives none either."""
    if not rules:
        return Scope(tenant=question.group, as_of=question.as_of, known_at=question.known_at), None
    if rules not in RULES:
        raise ValueError(f"rules: {rules!r} not among {', '.join(RULES)}")
    body = QueryRequest(q=question.text, as_of=question.as_of, known_at=question.known_at,
                        people_rules=rules != "time", time_rules=rules != "people")
    caller = Caller(tenant=question.group)
    as_of, since, _ = time_bounds(body, memory, caller)
    people = people_rule(body, memory, caller)[0] if body.people_rules else None
    return Scope(tenant=question.group, as_of=as_of, since=since, known_at=question.known_at), people
