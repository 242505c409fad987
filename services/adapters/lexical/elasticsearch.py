"""LexicalIndex on Elasticsearch (cluster profile).

Both legs are one `bool` query: the match (BM25 over text and title) or the tag terms rank, and
the scope sits in `filter`, so it limits the candidates before ranking and scores nothing.
Ties are ordered by the index itself (`sort`: score, then the later ingest position, then row
id), so no slack fetch is needed as in the tantivy adapter.

In the cluster profile this index and the row store share one ES index (one document per row);
then the row store writes the documents when it commits a projected batch, and `upsert` here
only validates (`writes=False`). Writing them here, before the row store has committed, would let
the write-path rules read rows of a batch that a crash then replays.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.documents import TURN_KINDS
from schemas.rows import Row
from services.adapters import elasticsearch_common as es
from services.core.scope import Scope
from services.core.term_match import TermMatch
from services.core.text import normalise_tag
from services.errors import OrgmemError
from services.ports import Hit

COMPONENT = "lexical index (Elasticsearch)"


def text_query(terms: Sequence[str], match: TermMatch, row_counts: Sequence[int] | None = None,
               total_rows: int = 0) -> dict | None:
    """The ranking part of the lexical leg; None when no term has anything to match.

    A term without a letter or digit analyses to no token: it is dropped rather than made a
    veto (as in the tantivy adapter). `match` never parses query syntax. A rule that needs some
    but not all terms becomes `minimum_should_match`, a count of the usable terms (each of
    which the analyser keeps as one token: `content_terms` splits at what it would split).
    With `row_counts` (rows holding each usable term, in order, of `total_rows`), common terms
    (`TermMatch.counted_terms`) only add their score to the rows the others match. Chat turns
    match by `match.turn_rule` where it is set."""
    usable = usable_terms(terms)
    if not usable:
        return None
    counted = [True] * len(usable)
    if row_counts is not None:
        counted = match.counted_terms(row_counts, total_rows)
    matching = [t for t, counts in zip(usable, counted, strict=True) if counts]
    scoring = [t for t, counts in zip(usable, counted, strict=True) if not counts]
    rows = _ranking(matching, scoring, match)
    turns = match.turn_rule
    if turns is None:
        return rows
    # Each row matches one branch only (its kind decides), so it scores as under its own rule.
    is_turn = {"terms": {"kind": sorted(TURN_KINDS)}}
    return {"bool": {"should": [
        {"bool": {"must": [rows], "must_not": [is_turn]}},
        {"bool": {"must": [_ranking(matching, scoring, turns)], "filter": [is_turn]}},
    ], "minimum_should_match": 1}}


def _ranking(matching: Sequence[str], scoring: Sequence[str], match: TermMatch) -> dict:
    """Rows with `match.required` of the `matching` terms; `scoring` terms only add their score."""
    required = match.required(len(matching))
    every = match.mode == "all" or required == len(matching) > 1
    body: dict = {"query": " ".join(matching), "operator": "and" if every else "or", "zero_terms_query": "none"}
    if 1 < required < len(matching):
        body["minimum_should_match"] = required
    ranking = {"match": {"body": body}}
    if not scoring:
        return ranking
    return {"bool": {"must": [ranking], "should": [{"match": {"body": {"query": " ".join(scoring)}}}]}}


def usable_terms(terms: Sequence[str]) -> list[str]:
    return [t for t in dict.fromkeys(terms) if any(ch.isalnum() for ch in t)]


def term_row_counts(termvectors: dict, terms: Sequence[str]) -> tuple[list[int], int]:
    """Rows holding each of `terms` and the rows of the field, from a `_termvectors` answer for
    an artificial document of the terms joined by spaces (term i at position i)."""
    field = termvectors.get("term_vectors", {}).get("body", {})
    by_position = {token["position"]: stats.get("doc_freq", 0)
                   for stats in field.get("terms", {}).values() for token in stats.get("tokens", [])}
    return [by_position.get(i, 0) for i in range(len(terms))], field.get("field_statistics", {}).get("doc_count", 0)


def tags_query(candidates: Sequence[str]) -> dict | None:
    tags = sorted({t for t in (normalise_tag(c) for c in candidates) if t})
    if not tags:
        return None
    # `term` (not `terms`) per tag so each matched tag adds its own idf: more and rarer tags rank higher.
    return {"bool": {"should": [{"term": {"tag": tag}} for tag in tags], "minimum_should_match": 1}}


RANK_SORT = [{"_score": {"order": "desc"}}, {"ingest_position": {"order": "desc"}}, {"row_id": {"order": "asc"}}]


def search_body(ranking: dict | None, scope: Scope, limit: int) -> dict | None:
    """The whole search request (without the index), or None when nothing can match."""
    if ranking is None or limit <= 0:
        return None
    query = es.scoped(ranking, scope)
    if query is None:
        return None
    return {"query": query, "sort": RANK_SORT, "size": limit, "source": False, "track_total_hits": False}


def checked_rows(rows: Sequence[object]) -> tuple[list[Row], list[str]]:
    """The last version of each valid row of a batch, and a message per invalid item."""
    latest: dict[str, Row] = {}
    problems = []
    for i, row in enumerate(rows):
        if not isinstance(row, Row):
            problems.append(f"rows[{i}]: expected a Row, got {type(row).__name__}")
            continue
        latest[row.row_id] = row
    return list(latest.values()), problems


class ElasticsearchLexicalIndex:
    def __init__(self, url: str | None = None, index: str = "orgmem-rows", *, client=None, shards: int = 1,
                 replicas: int = 0, refresh: str = "true", writes: bool = True):
        if client is None and not url:
            raise OrgmemError("cluster.es_url: required for the Elasticsearch lexical index")
        self.client = client if client is not None else es.connect(url)
        self.index, self.shards, self.replicas = index, shards, replicas
        self.refresh, self.writes = refresh, writes
        if writes:
            es.ensure_template_and_index(self.client, COMPONENT, index, shards, replicas)

    # -- writes -----------------------------------------------------------------------------

    def upsert(self, rows: Sequence[Row]) -> None:
        valid, problems = checked_rows(rows)
        if self.writes and valid:
            operations: list[dict] = []
            for row in valid:
                try:
                    document = es.row_document(row)
                except (TypeError, ValueError, OverflowError) as exc:
                    problems.append(f"row_id={row.row_id!r}: {exc}")
                    continue
                operations += [{"index": {"_index": self.index, "_id": row.row_id}}, document]
            if operations:
                with es.driver_errors(COMPONENT, "bulk upsert"):
                    response = self.client.bulk(operations=operations, refresh=self.refresh)
                problems += es.bulk_failures(response.body if hasattr(response, "body") else response)
        if problems:
            raise OrgmemError(f"{COMPONENT}: upsert skipped " + "; ".join(problems))

    def reset(self) -> None:
        if not self.writes:
            return  # the row store owns the shared index and empties it
        with es.driver_errors(COMPONENT, "reset"):
            self.client.indices.delete(index=self.index, ignore_unavailable=True)
        es.ensure_template_and_index(self.client, COMPONENT, self.index, self.shards, self.replicas)

    def delete(self, row_ids: Sequence[str], survivors=None) -> None:
        """Erase rows: delete their documents, then expunge the deleted documents from the
        segments (a force merge of segments with deletions), so no segment keeps their terms.
        Where the row store owns the shared index, its `erase` does both."""
        if not self.writes or not row_ids:
            return
        with es.driver_errors(COMPONENT, "delete"):
            self.client.delete_by_query(index=self.index, query={"ids": {"values": list(row_ids)}},
                                        refresh=True, conflicts="proceed")
            self.client.indices.forcemerge(index=self.index, only_expunge_deletes=True)

    def close(self) -> None:
        self.client.close()

    # -- reads ------------------------------------------------------------------------------

    def search_text(self, terms: Sequence[str], scope: Scope, limit: int, match: TermMatch) -> list[Hit]:
        usable = usable_terms(terms)
        if not usable:
            return []
        counts, total = None, 0
        if match.common_share < 1.0:
            # The terms' row counts from the index itself (an artificial document, not stored);
            # one shard's counts where there are several, as the rule needs only their size.
            with es.driver_errors(COMPONENT, "term counts"):
                answer = self.client.termvectors(index=self.index, doc={"body": " ".join(usable)}, fields=["body"],
                                                 term_statistics=True, field_statistics=True, positions=True,
                                                 offsets=False, payloads=False)
            counts, total = term_row_counts(answer.body if hasattr(answer, "body") else answer, usable)
        return self._search(search_body(text_query(usable, match, counts, total), scope, limit), "search_text")

    def search_tags(self, candidates: Sequence[str], scope: Scope, limit: int) -> list[Hit]:
        return self._search(search_body(tags_query(candidates), scope, limit), "search_tags")

    def _search(self, body: dict | None, action: str) -> list[Hit]:
        if body is None:
            return []
        with es.driver_errors(COMPONENT, action):
            response = self.client.search(index=self.index, search_type=es.search_type_for(self.shards), **body)
        # With `sort`, the score is the first sort value (the `_score` field may be null).
        return [Hit(hit["_id"], float(hit["sort"][0])) for hit in response["hits"]["hits"]]
