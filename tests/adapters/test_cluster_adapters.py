"""Pure parts of the cluster adapters, checked without servers: the Elasticsearch documents,
mappings and query bodies (the scope filter is evaluated against `admits`), the Kafka position
mapping and topic settings, and the row store's redo record."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, MaintenanceRunStarted, RowArchived
from schemas.rows import Row, RowChange
from services.adapters import elasticsearch_common as es
from services.adapters.event_log import kafka, kafka_records
from services.adapters.lexical.elasticsearch import search_body, tags_query, term_row_counts, text_query
from services.adapters.row_store.elasticsearch import (
    batch_operations,
    decode_batch,
    encode_batch,
)
from services.core.scope import Scope, admits
from services.core.term_match import ALL_TERMS, ANY_TERM, TermMatch
from services.errors import BackendUnavailable, OrgmemError
from services.ports import RowMutation, SkippedDocument
from tests.adapters.es_filters import matches

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)


def random_row(rnd: random.Random, i: int) -> Row:
    return Row(
        row_id=f"r{i}", tenant=rnd.choice(["acme", "globex"]), text=f"text {i}",
        author=rnd.choice(["Alice", "bob", ""]), thread=rnd.choice([None, "", "Q3 plan"]),
        kind=rnd.choice(["doc", "email"]), acl=rnd.sample(["Alice", " eng ", "sales"], rnd.randint(0, 2)),
        event_time=rnd.choice([None, T0 + timedelta(seconds=rnd.randrange(86_400), microseconds=rnd.randrange(10**6))]),
        ingested_at=T0 + timedelta(seconds=rnd.randrange(86_400), microseconds=rnd.randrange(10**6)),
        ingest_position=i + 1, state=rnd.choice(["active", "active", "archived"]),
    )


def random_scope(rnd: random.Random, rows: list[Row]) -> Scope:
    def bound(attr):
        times = [getattr(r, attr) for r in rows if getattr(r, attr)]
        return rnd.choice([None, rnd.choice(times) + timedelta(microseconds=rnd.choice([-1, 0, 1]))])

    known = bound("ingested_at")
    return Scope(
        tenant=rnd.choice(["acme", "globex"]),
        readers=rnd.choice([None, frozenset(), frozenset({"alice"}), frozenset({"eng", "x"})]),
        as_of=bound("event_time"), known_at=known,
        inactive_at_known=frozenset(r.row_id for r in rnd.sample(rows, 5)) if known else frozenset(),
        kinds=rnd.choice([None, frozenset({"email"}), frozenset()]),
        authors=rnd.choice([None, frozenset({"Alice", ""})]),
        threads=rnd.choice([None, frozenset({"", "Q3 plan"})]),
    )


def test_scope_filter_equals_reference_semantics():
    rnd = random.Random(5)
    rows = [random_row(rnd, i) for i in range(150)]
    docs = [json.loads(json.dumps(es.row_document(r))) for r in rows]
    for _ in range(300):
        scope = random_scope(rnd, rows)
        query = es.scoped(None, scope)
        expected = {r.row_id for r in rows if admits(r, scope)}
        got = set() if query is None else {d["row_id"] for d in docs if matches(query, d)}
        assert got == expected, scope


def test_documents_fit_the_strict_mapping_and_round_trip():
    rnd = random.Random(2)
    fields = set(es.ROW_MAPPINGS["properties"])
    for i in range(50):
        row = random_row(rnd, i).model_copy(update={"title": rnd.choice([None, "Title"]), "source": "email",
                                                    "source_id": f"m{i}", "superseded_by": rnd.choice([None, "r0"])})
        doc = json.loads(json.dumps(es.row_document(row)))
        assert set(doc) <= fields, set(doc) - fields
        assert es.row_from_document(doc) == row
    settings = es.index_settings()
    assert settings["analysis"]["analyzer"][es.ANALYZER]["tokenizer"] == "orgmem_words"
    assert es.ROW_MAPPINGS["properties"]["text"]["copy_to"] == "body"


def test_lexical_bodies():
    assert text_query(["×", "*"], ALL_TERMS) is None  # nothing to match: no request at all
    conj = text_query(["kafka", "lag", "×"], ALL_TERMS)["match"]["body"]
    assert conj == {"query": "kafka lag", "operator": "and", "zero_terms_query": "none"}
    assert text_query(["kafka"], ANY_TERM)["match"]["body"]["operator"] == "or"
    tags = tags_query(["KAFKA-1234", " Priya  Raman ", ""])["bool"]["should"]
    assert tags == [{"term": {"tag": "kafka-1234"}}, {"term": {"tag": "priya raman"}}]
    body = search_body(text_query(["x"], ALL_TERMS), Scope("acme"), 7)
    assert body["size"] == 7 and body["sort"][0] == {"_score": {"order": "desc"}}
    assert body["query"]["bool"]["must"] == [text_query(["x"], ALL_TERMS)]
    assert {"term": {"tenant": "acme"}} in body["query"]["bool"]["filter"]
    assert search_body(text_query(["x"], ALL_TERMS), Scope("acme", kinds=frozenset()), 7) is None
    assert search_body(text_query(["x"], ALL_TERMS), Scope("acme"), 0) is None


def test_adaptive_lexical_body_asks_a_share_of_a_long_question_and_all_of_a_short_one():
    adaptive = TermMatch("adaptive")
    assert text_query(["kafka", "lag"], adaptive)["match"]["body"] == {
        "query": "kafka lag", "operator": "and", "zero_terms_query": "none"}
    long = ["consumer", "lag", "kafka", "cluster", "after", "upgrade", "september"]
    body = text_query([*long, "lag", "—"], adaptive)["match"]["body"]  # a repeat and a bare dash do not count
    assert body == {"query": " ".join(long), "operator": "or", "zero_terms_query": "none",
                    "minimum_should_match": adaptive.required(len(long))}
    assert 1 < body["minimum_should_match"] < len(long)
    # A rule that lets one term suffice needs no minimum: "or" alone says it.
    assert "minimum_should_match" not in text_query(long, TermMatch("adaptive", share_floor=0.1, share_step=1.0))["match"]["body"]


def test_common_terms_only_score_in_the_elasticsearch_body():
    rule = TermMatch("adaptive", common_share=0.5)
    terms = ["kafka", "team", "lag", "upgrade", "project"]
    # The index's answer for an artificial document of the terms: "team" and "project" are in
    # more than half of the 1,000 rows; "upgrade" is in none (no doc_freq in the answer).
    answer = {"term_vectors": {"body": {
        "field_statistics": {"doc_count": 1000, "sum_doc_freq": 9000, "sum_ttf": 12000},
        "terms": {"kafka": {"doc_freq": 40, "term_freq": 1, "tokens": [{"position": 0}]},
                  "team": {"doc_freq": 700, "term_freq": 1, "tokens": [{"position": 1}]},
                  "lag": {"doc_freq": 12, "term_freq": 1, "tokens": [{"position": 2}]},
                  "upgrad": {"term_freq": 1, "tokens": [{"position": 3}]},
                  "project": {"doc_freq": 501, "term_freq": 1, "tokens": [{"position": 4}]}}}}}
    counts, total = term_row_counts(answer, terms)
    assert (counts, total) == ([40, 700, 12, 0, 501], 1000)
    query = text_query(terms, rule, counts, total)
    # The three that count need all three (the rule's share of 3); the common two only score.
    assert query == {"bool": {
        "must": [{"match": {"body": {"query": "kafka lag upgrade", "operator": "and", "zero_terms_query": "none"}}}],
        "should": [{"match": {"body": {"query": "team project"}}}]}}
    # Without counts, or where every term is common, every term counts as before.
    assert text_query(terms, rule) == text_query(terms, TermMatch("adaptive"))
    assert text_query(terms, rule, [900] * 5, 1000) == text_query(terms, TermMatch("adaptive"))


def test_chat_turns_match_by_their_own_rule_in_the_elasticsearch_body():
    terms = ["kafka", "consumer", "lag", "replication"]
    rows_rule = text_query(terms, TermMatch("adaptive"))
    assert rows_rule["match"]["body"]["minimum_should_match"] == 2
    query = text_query(terms, TermMatch("adaptive", turns="any"))
    is_turn = {"terms": {"kind": ["chat"]}}
    # A row is in one branch by its kind: documents by the share, turns by any term.
    assert query == {"bool": {"should": [
        {"bool": {"must": [rows_rule], "must_not": [is_turn]}},
        {"bool": {"must": [text_query(terms, ANY_TERM)], "filter": [is_turn]}},
    ], "minimum_should_match": 1}}
    # A turn rule equal to the rows' is no branch at all.
    assert text_query(terms, TermMatch("adaptive", turns="adaptive")) == rows_rule


def test_the_elasticsearch_leg_asks_the_term_counts_first_under_a_common_share():
    """No Elasticsearch server runs here: a recording client answers the two requests."""
    from services.adapters.lexical.elasticsearch import ElasticsearchLexicalIndex

    class Recording:
        def __init__(self):
            self.calls = []

        def termvectors(self, **request):
            self.calls.append(("termvectors", request))
            return {"term_vectors": {"body": {"field_statistics": {"doc_count": 10}, "terms": {
                "kafka": {"doc_freq": 2, "tokens": [{"position": 0}]},
                "team": {"doc_freq": 9, "tokens": [{"position": 1}]}}}}}

        def search(self, **request):
            self.calls.append(("search", request))
            return {"hits": {"hits": [{"_id": "r1", "sort": [2.5, 7, "r1"]}]}}

    client = Recording()
    index = ElasticsearchLexicalIndex(client=client, index="rows", writes=False)
    hits = index.search_text(["kafka", "team", "—"], Scope("acme"), 5, TermMatch("adaptive", common_share=0.5))
    assert [(h.row_id, h.score) for h in hits] == [("r1", 2.5)]
    (first, counts), (second, search) = client.calls
    assert first == "termvectors" and counts["doc"] == {"body": "kafka team"} and counts["term_statistics"]
    ranking = search["query"]["bool"]["must"][0]
    assert ranking["bool"]["should"] == [{"match": {"body": {"query": "team"}}}]
    assert ranking["bool"]["must"][0]["match"]["body"]["query"] == "kafka"
    client.calls.clear()
    index.search_text(["kafka", "team"], Scope("acme"), 5, TermMatch("adaptive"))  # share 1: no counts asked
    assert [name for name, _ in client.calls] == ["search"]


def test_kafka_positions_keys_and_topic():
    span = kafka.SPAN
    # Three events in the record at offset 41: the last one sits at 42 * SPAN.
    assert [kafka_records.position_of(41, i, 3) for i in range(3)] == [42 * span - 2, 42 * span - 1, 42 * span]
    assert kafka_records.position_of(0, 0, 1) == span and kafka_records.position_of(0, 0, span) == 1  # a full record starts at 1
    assert kafka.offset_after(0) == 0 and kafka.offset_after(42 * span - 2) == 41  # inside the record: read it again
    assert kafka.offset_after(42 * span) == 42  # its last event: the next record
    with pytest.raises(OrgmemError, match=">= 0"):
        kafka.offset_after(-1)
    configs = kafka.topic_configs(32 * 1024 * 1024, 2)
    assert configs["retention.ms"] == "-1" and configs["cleanup.policy"] == "delete"
    assert configs["message.timestamp.type"] == "LogAppendTime" and configs["min.insync.replicas"] == "2"
    assert int(configs["max.message.bytes"]) > 32 * 1024 * 1024
    doc = DocumentObserved(tenant="t", row_id="r9", document=DocumentIn(text="x"))
    run = MaintenanceRunStarted(tenant="t", run_id="run-1", job="refine")
    assert kafka.batch_key([doc, RowArchived(tenant="t", row_id="r9")]) == b"t"

    class Record:
        partition, offset, timestamp = 0, 41, 1_700_000_000_123
        value = kafka.encode_batch([doc, run, RowArchived(tenant="t", row_id="r9")])
        headers = [("format", b"batch-1")]

    logged = kafka.logged_from_record(Record())
    assert [e.position for e in logged] == [42 * span - 2, 42 * span - 1, 42 * span]
    assert [e.event for e in logged[:2]] == [doc, run]
    assert logged[0].appended_at == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    # A checkpoint inside the record keeps only the events after it; one elsewhere keeps them all.
    assert [e.position for e in kafka.logged_from_record(Record(), 42 * span - 2)] == [42 * span - 1, 42 * span]
    assert len(kafka.logged_from_record(Record(), 50 * span)) == 3

    class OldRecord(Record):  # the previous adapter's format: one bare event per record
        value, headers = doc.model_dump_json().encode(), [("type", b"document_observed")]

    with pytest.raises(BackendUnavailable, match="offset 41 has no format header"):
        kafka.logged_from_record(OldRecord())

    class NewerRecord(Record):
        headers = [("format", b"batch-2")]

    with pytest.raises(BackendUnavailable, match="format 'batch-2'"):
        kafka.logged_from_record(NewerRecord())


def test_row_store_redo_record_round_trips_and_bulk_is_idempotent():
    row = random_row(random.Random(1), 3)
    change = RowChange(position=3, at=T0, change="observed", state="active", run_id="run", reason="why")
    mutations = [RowMutation(row, change)]
    skipped = [SkippedDocument("r7", 4, "duplicate_text", "r3")]
    record = json.loads(json.dumps(encode_batch(mutations, skipped, 4)))
    assert decode_batch(record) == (mutations, skipped, 4)
    ops = batch_operations("rows", mutations, skipped)
    # The row's version is the position of its state: ES keeps the higher of two (a replay is a 409).
    assert ops[0] == {"index": {"_index": "rows", "_id": row.row_id, "version": 3, "version_type": "external"}}
    assert ops[2] == {"create": {"_index": "rows-history", "_id": f"{row.row_id}:3"}}
    assert ops[4] == {"create": {"_index": "rows-skipped", "_id": "r7:4"}}
    conflict = {"type": es.VERSION_CONFLICT, "reason": "version conflict, current version [5] is higher"}
    assert es.bulk_failures({"errors": True, "items": [{"create": {"_id": "a", "status": 409, "error": conflict}},
                                                       {"index": {"_id": "b", "status": 400, "error": {"reason": "bad"}}}]},
                            conflicts_ok=True) == ["index b: HTTP 400: bad"]
