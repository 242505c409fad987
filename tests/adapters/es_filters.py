"""A small interpreter of the Elasticsearch query DSL subset the adapters emit (bool with
filter/must/must_not/should, match_none, term, terms, range up to `lte`), evaluated over one
document as the adapters write it: the tests check the query bodies against the reference
semantics without a server."""

from __future__ import annotations


def matches(query: dict, doc: dict) -> bool:
    (kind, body), = query.items()
    if kind == "bool":
        should = body.get("should", [])
        return (all(matches(q, doc) for q in body.get("filter", []) + body.get("must", []))
                and not any(matches(q, doc) for q in body.get("must_not", []))
                and (not should or sum(matches(q, doc) for q in should) >= body.get("minimum_should_match", 1)))
    if kind == "match_none":
        return False
    (field, value), = body.items()
    have = doc.get(field)
    values = have if isinstance(have, list) else ([] if have is None else [have])
    if kind == "term":
        return value in values
    if kind == "terms":
        return bool(set(values) & set(value))
    if kind == "range":
        return have is not None and have <= value["lte"]
    raise AssertionError(f"unexpected clause {kind}")
