"""The queries of the tantivy lexical index: the schema they address, the analysis of query
terms, the text and tag rankings and the scope as a non-scoring filter. Query building only;
the index, its searcher and its writes are in `tantivy.py`.

Times are indexed as integer microseconds since the epoch (UTC) rather than tantivy dates:
tantivy truncates indexed dates to whole seconds, which would make `event_time <= as_of`
disagree with `services.core.scope.admits` inside a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import get_args

import tantivy

from schemas.documents import TURN_KINDS, DocumentKind
from services.core.scope import Scope
from services.core.term_match import TermMatch

RAW_FIELDS = ("row_id", "tenant", "acl", "state", "kind", "author", "thread")
TEXT_FIELDS = ("text", "title")
# A tie on the k-th tag score is resolved by naming the tag subset that scores it; with more
# matched tags than this the subsets are not enumerated and the whole tie is read instead.
MAX_SUBSET_TAGS = 8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Every kind a row can have that is not a chat turn (`schemas.rows.Row.kind` is a DocumentKind).
DOCUMENT_KINDS = tuple(kind for kind in get_args(DocumentKind) if kind not in TURN_KINDS)


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for name in RAW_FIELDS:
        builder.add_text_field(name, stored=name == "row_id", tokenizer_name="raw", index_option="basic")
    for name in TEXT_FIELDS:
        # Positions are kept so a query term that analyses to several tokens matches as a phrase.
        builder.add_text_field(name, tokenizer_name="en_stem", index_option="position")
    builder.add_text_field("tag", tokenizer_name="raw", index_option="basic")
    for name in ("event_time", "ingested_at", "ingest_position"):
        builder.add_integer_field(name, indexed=True, fast=True)
    return builder.build()


def micros(field: str, value: datetime) -> int:
    if not isinstance(value, datetime):
        raise TypeError(f"{field}: expected a datetime, got {type(value).__name__}")
    # Naive datetimes are UTC, as in schemas.documents; floor division of timedeltas is exact.
    return ((value if value.tzinfo else value.replace(tzinfo=UTC)) - _EPOCH) // timedelta(microseconds=1)


def _rows_with(searcher: tantivy.Searcher, tokens: tuple[str, ...]) -> int:
    """About how many rows contain a term: the larger of its text and title counts (a phrase:
    its rarest token's), counting deleted rows not yet merged away."""
    return min(max(searcher.doc_freq(name, token) for name in TEXT_FIELDS) for token in tokens)


def _holds_any(searcher: tantivy.Searcher, kinds) -> bool:
    """Whether the index holds a row of one of these kinds (deleted rows not yet merged away count)."""
    return any(searcher.doc_freq("kind", kind) for kind in kinds)


def _query_analyzer() -> tantivy.TextAnalyzer:
    """The same chain as tantivy's built-in `en_stem`, to analyse query terms exactly as the
    `text` and `title` fields were analysed at index time."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


class Queries:
    """Builds the index's queries against one schema."""

    def __init__(self, index_schema: tantivy.Schema):
        self._schema = index_schema
        self._analyzer = _query_analyzer()

    def text(self, terms: Sequence[str], match: TermMatch, searcher: tantivy.Searcher) -> tantivy.Query | None:
        """BM25 over text and title, each term one clause; a row must match `match.required(n)`
        of the n clauses that count (`TermMatch.counted_terms`: the others, common terms, only add
        their score to the rows matched). Chat turns match by `match.turn_rule` where it is set and
        the index holds turns. None when no term has an indexable token."""
        token_lists: list[tuple[str, ...]] = []
        for term in terms:
            tokens = tuple(self._analyzer.analyze(term))
            # A term with no indexable token (punctuation, over-long) can match nothing; it is
            # dropped rather than turning a conjunctive query into an empty one. Terms that stem
            # alike are one clause, so they count once towards the required number.
            if tokens and tokens not in token_lists:
                token_lists.append(tokens)
        if not token_lists:
            return None
        counted = [True] * len(token_lists)
        if match.common_share < 1.0:
            counted = match.counted_terms([_rows_with(searcher, t) for t in token_lists], searcher.num_docs)
        clauses = [self._term_clause(tokens) for tokens in token_lists]
        matching = [clause for clause, counts in zip(clauses, counted, strict=True) if counts]
        scoring = [clause for clause, counts in zip(clauses, counted, strict=True) if not counts]
        rows = self._ranking(matching, scoring, match)
        turns = match.turn_rule
        if turns is None or not _holds_any(searcher, TURN_KINDS):
            return rows
        if not _holds_any(searcher, DOCUMENT_KINDS):  # every row is a turn: one rule, one query
            return self._ranking(matching, scoring, turns)
        # Each row matches one branch only (its kind decides), so it scores as under its own rule.
        Occur, Query = tantivy.Occur, tantivy.Query
        is_turn = Query.term_set_query(self._schema, "kind", sorted(TURN_KINDS))
        return Query.boolean_query([
            (Occur.Should, Query.boolean_query([(Occur.Must, rows), (Occur.MustNot, is_turn)])),
            (Occur.Should, Query.boolean_query([(Occur.Must, self._ranking(matching, scoring, turns)),
                                                (Occur.Must, Query.const_score_query(is_turn, 0.0))])),
        ])

    @staticmethod
    def _ranking(matching: list[tantivy.Query], scoring: list[tantivy.Query], match: TermMatch) -> tantivy.Query:
        """Rows with `match.required` of the `matching` clauses; `scoring` clauses only add their score."""
        required = match.required(len(matching))
        Occur = tantivy.Occur
        if required == len(matching):
            ranking = tantivy.Query.boolean_query([(Occur.Must, clause) for clause in matching])
        else:
            # A matched clause adds its BM25 score either way: the rule only removes rows, it never reorders them.
            ranking = tantivy.Query.boolean_query([(Occur.Should, clause) for clause in matching],
                                                  minimum_number_should_match=required if required > 1 else None)
        if not scoring:
            return ranking
        # Beside a required clause an optional one is only looked up in the rows that clause
        # matches, so a common term's postings are not walked.
        return tantivy.Query.boolean_query([(Occur.Must, ranking)] + [(Occur.Should, clause) for clause in scoring])

    def _term_clause(self, tokens: tuple[str, ...]) -> tantivy.Query:
        per_field = []
        for name in TEXT_FIELDS:
            if len(tokens) == 1:
                per_field.append(tantivy.Query.term_query(self._schema, name, tokens[0]))
            else:
                per_field.append(tantivy.Query.phrase_query(self._schema, name, list(tokens)))
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_field])

    def tags(self, idf_of: dict[str, float]) -> tantivy.Query:
        """Each matched tag adds its idf (constant scores: no length normalisation, so a row with
        many participants does not rank below a row matching fewer of the query's tags)."""
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.const_score_query(self.tag(tag), idf)) for tag, idf in idf_of.items()]
        )

    def tag(self, tag: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, "tag", tag)

    def tag_subset(self, idf_of: dict[str, float], score: float) -> tantivy.Query | None:
        """The rows whose tag score is exactly `score`: those matching one subset of the query's
        tags and none of the others. None when no single subset sums to it (then the caller
        falls back to reading the whole tie)."""
        tags = list(idf_of)
        if len(tags) > MAX_SUBSET_TAGS:
            return None
        subsets = [
            chosen for size in range(1, len(tags) + 1) for chosen in combinations(tags, size)
            if math.isclose(sum(idf_of[t] for t in chosen), score, rel_tol=1e-5)  # tantivy sums in f32
        ]
        if len(subsets) != 1:
            return None
        occur = tantivy.Occur
        return tantivy.Query.boolean_query(
            [(occur.Must if tag in subsets[0] else occur.MustNot, self.tag(tag)) for tag in tags]
        )

    def scope_filter(self, scope: Scope) -> tantivy.Query:
        """The scope as one zero-scoring query (mirrors services.core.scope.admits)."""
        schema, Query, Occur = self._schema, tantivy.Query, tantivy.Occur
        must = [Query.term_query(schema, "tenant", scope.tenant)]
        must_not: list[tantivy.Query] = []

        def one_of(field: str, values) -> tantivy.Query:
            values = sorted(values)
            return Query.term_set_query(schema, field, values) if values else Query.empty_query()

        def at_most(field: str, bound: datetime) -> tantivy.Query:
            return Query.range_query(
                schema, field, tantivy.FieldType.Integer, upper_bound=micros(field, bound)
            )

        def at_least(field: str, bound: datetime) -> tantivy.Query:
            return Query.range_query(
                schema, field, tantivy.FieldType.Integer, lower_bound=micros(field, bound)
            )

        readers = scope.reader_tokens()
        if readers is not None:
            must.append(one_of("acl", readers))
        if scope.as_of is not None:
            must.append(at_most("event_time", scope.as_of))  # rows without event_time fail
        if scope.since is not None:
            must.append(at_least("event_time", scope.since))
        if scope.known_at is not None:
            must.append(at_most("ingested_at", scope.known_at))
            if scope.inactive_at_known:
                must_not.append(one_of("row_id", scope.inactive_at_known))
        else:
            must.append(Query.term_query(schema, "state", "active"))
        for field, values in (("kind", scope.kinds), ("author", scope.authors), ("thread", scope.threads)):
            if values is not None:
                must.append(one_of(field, values))
        combined = Query.boolean_query(
            [(Occur.Must, q) for q in must] + [(Occur.MustNot, q) for q in must_not]
        )
        return Query.const_score_query(combined, 0.0)
