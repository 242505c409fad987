"""Property tests of the ingest and query request models: what they accept survives a JSON round
trip unchanged, what they refuse is refused with the failing field named, and row ids keep
tenants apart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.api import IngestRequest, QueryRequest
from schemas.documents import MAX_TAGS, DocumentIn
from services.core.write_rules import row_id_for

KINDS = ["email", "ticket", "meeting", "doc", "chat"]
text = st.text(min_size=0, max_size=200)
names = st.text(min_size=0, max_size=40)
dates = st.one_of(
    st.none(),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1),
                 timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                            timezone(timedelta(hours=-8))])),
)
documents = st.fixed_dictionaries(
    {"text": text},
    optional={"author": names, "date": dates, "kind": st.sampled_from(KINDS), "thread": st.none() | names,
              "title": st.none() | names, "tags": st.lists(names, max_size=8), "participants": st.lists(names, max_size=8),
              "acl": st.lists(names, max_size=8), "source": st.none() | names, "source_id": st.none() | names},
)


def as_json(value: dict) -> str:
    return json.dumps({k: v.isoformat() if isinstance(v, datetime) else v for k, v in value.items()})


@settings(max_examples=300, deadline=None)
@given(documents)
def test_a_valid_document_round_trips_and_is_normalised(raw):
    doc = DocumentIn.model_validate_json(as_json(raw))
    assert DocumentIn.model_validate_json(doc.model_dump_json()) == doc  # stable: what is stored reads back
    assert doc.text == raw["text"]  # stored whole, never trimmed
    if doc.date is not None:
        assert doc.date.utcoffset() == timedelta(0) and doc.date == raw["date"]  # the same instant, in UTC
    for field in ("tags", "participants", "acl"):
        values = getattr(doc, field)
        assert all(v == v.strip() and v for v in values) and len(values) == len(set(values))
        assert set(values) == {v.strip() for v in raw.get(field, []) if v.strip()}


@settings(max_examples=200, deadline=None)
@given(st.lists(documents, min_size=1, max_size=6), st.data())
def test_one_bad_document_names_its_index_and_field(batch, data):
    bad_index = data.draw(st.integers(0, len(batch) - 1))
    field, value = data.draw(st.sampled_from([
        ("text", None), ("kind", "fax"), ("date", "yesterday-ish"), ("tags", ["x"] * (MAX_TAGS + 1)),
        ("unexpected", 1), ("author", "a" * 513),
    ]))
    batch = [dict(d) for d in batch]
    batch[bad_index][field] = value
    body = json.dumps({"documents": [json.loads(as_json(d)) for d in batch]})
    with pytest.raises(ValidationError) as caught:
        IngestRequest.model_validate_json(body)
    locations = {tuple(e["loc"]) for e in caught.value.errors()}
    assert any(loc[:3] == ("documents", bad_index, field) for loc in locations), locations


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries(
    {"q": st.text(min_size=1, max_size=4096)},
    optional={"k": st.integers(1, 10_000), "candidates": st.integers(1, 10_000), "selector": st.sampled_from(["rrf", "pursuit"]),
              "lexical_match": st.sampled_from(["all", "any", "adaptive"]),
              "lexical_turn_match": st.sampled_from(["all", "any", "adaptive"]),
              "conjunctive": st.booleans(), "after": st.integers(0, 2**62), "as_of": dates,
              "weights": st.dictionaries(st.sampled_from(["lex", "tag", "vec"]), st.floats(0, 100)),
              "kinds": st.lists(names, max_size=5), "show_supersession": st.booleans()}))
def test_a_valid_query_round_trips(raw):
    if raw.get("lexical_match") and "conjunctive" in raw:  # the alias must agree (test below)
        raw["lexical_match"] = "all" if raw["conjunctive"] else "any"
    query = QueryRequest.model_validate_json(as_json(raw))
    assert QueryRequest.model_validate_json(query.model_dump_json()) == query
    assert query.q == raw["q"] and query.k == raw.get("k")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([
    ("q", ""), ("q", "x" * 4097), ("k", 0), ("k", -3), ("candidates", 0), ("after", -1), ("selector", "mmr"),
    ("weights", {"bm25": 1.0}), ("as_of", "not a date"), ("unknown_field", True), ("conjunctive", "maybe"),
    ("lexical_match", "some"), ("lexical_match", 2), ("lexical_turn_match", "turns"), ("lexical_turn_match", {"any": 1}),
]), st.text(min_size=1, max_size=50))
def test_an_invalid_query_names_the_field(case, q):
    field, value = case
    raw = {"q": q, field: value}
    with pytest.raises(ValidationError) as caught:
        QueryRequest.model_validate(raw)
    assert field in {str(e["loc"][0]) for e in caught.value.errors()}


@pytest.mark.parametrize(("conjunctive", "lexical_match"), [(True, "any"), (True, "adaptive"), (False, "all")])
def test_conjunctive_is_an_alias_that_must_agree_with_lexical_match(conjunctive, lexical_match):
    with pytest.raises(ValidationError, match="contradicts"):
        QueryRequest(q="x", conjunctive=conjunctive, lexical_match=lexical_match)
    assert QueryRequest(q="x", conjunctive=conjunctive).lexical_match is None  # the alias alone is kept as given


@settings(max_examples=300, deadline=None)
@given(documents, st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_row_ids_are_stable_and_never_shared_between_tenants(raw, tenant_a, tenant_b):
    doc = DocumentIn.model_validate_json(as_json(raw))
    assert row_id_for(tenant_a, doc) == row_id_for(tenant_a, DocumentIn.model_validate_json(doc.model_dump_json()))
    if tenant_a != tenant_b:
        assert row_id_for(tenant_a, doc) != row_id_for(tenant_b, doc)
