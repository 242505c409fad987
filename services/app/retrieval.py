"""The read path (Mem++ §3.3): scope -> three legs -> weighted RRF -> selection -> reserve.

Adapters run the legs inside the scope; the ranking after them is `services.core.ranking.rank`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from schemas.rows import Row
from services.app.tracing import Stage, record_query
from services.core.ranking import (
    NAMED_LEG,
    PEOPLE_LEG,
    Fusion,
    active_legs,
    order_versions,
    rank,
    version_rows,
    with_people_leg,
)
from services.core.reserve import Pick
from services.core.retrieval_config import RetrievalConfig, weights_problem
from services.core.scope import Scope
from services.core.term_match import TermMatch
from services.core.text import content_terms, named_source_ids, tag_candidates
from services.core.versions import Version, versions, wanted
from services.errors import Invalid
from services.ports import Embedder, Hit, LexicalIndex, RowReader, RowStore, VectorIndex


# Rows a query's named source ids may bring in: one id names a row per source.
NAMED_ROWS = 20
# The people rule's leg (services.core.people_mentions): rows written by the persons the question names.
# Any term, and every term counts: a term too common to require across the store may be the one
# that tells apart the person's own rows. Measured against "all" and "adaptive" on seeds 5-8 of
# bench.people (docs/people.md): "any" 0.987, "adaptive" 0.971, "all" 0.929 (no gain) recall@10.
PEOPLE_MATCH = TermMatch("any", common_share=1.0)


@dataclass(frozen=True)
class PeopleLeg:
    aliases: frozenset[str]  # every alias string of the persons named (row.author is one of them)
    query: str  # the question less the words that named them


@dataclass(frozen=True)
class Selected:
    rank: int
    row: Row
    reason: str
    fused_score: float
    leg_ranks: dict[str, int]
    leg_scores: dict[str, float]


@dataclass
class Retrieval:
    selected: list[Selected]
    matched: int  # distinct rows any leg returned
    leg_sizes: dict[str, int]
    timings_ms: dict[str, float] = field(default_factory=dict)
    legs: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # leg -> (row id, score), as ranked
    query_vector: np.ndarray | None = None  # None when no stage needed it (no vector leg, no pursuit)
    versions: dict[str, Version] = field(default_factory=dict)  # row id -> its version in the caller's view


class Retriever:
    """lexical_workers: threads that run the lexical and tag legs (and read their rows' ranking
    fields) while the calling thread encodes the query. The encoder and tantivy both release the
    interpreter lock, so on two cores the query embedding, the longest stage, overlaps the
    lexical work instead of preceding it.

    The encoder runs on the calling thread, not the worker: on this 2-core virtual machine a
    woken worker started 0.46 ms (median) after the submit, and a caller waiting for it pays a
    wake-up again. The lexical stage is the shorter one, so its lag is hidden."""

    def __init__(self, rows: RowStore, lexical: LexicalIndex, vectors: VectorIndex, embedder: Embedder,
                 lexical_workers: int = 4, tracer=None):
        self.rows, self.lexical, self.vectors, self.embedder = rows, lexical, vectors, embedder
        self.tracer = tracer  # OpenTelemetry's, or None: tracing off (services.app.tracing)
        self._lexical = ThreadPoolExecutor(max_workers=lexical_workers, thread_name_prefix="orgmem-query-lexical")

    def close(self) -> None:
        self._lexical.shutdown(wait=False, cancel_futures=True)

    def retrieve(self, query: str, scope: Scope, config: RetrievalConfig, people: PeopleLeg | None = None) -> Retrieval:
        if problem := weights_problem(config.weights):
            raise Invalid(problem)
        config = with_people_leg(config, people is not None and bool(people.aliases))
        if PEOPLE_LEG not in active_legs(config):
            people = None
        timings: dict[str, float] = {}
        clock = started = time.perf_counter()
        stages: list[Stage] | None = [] if self.tracer is not None else None  # kept for spans only

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round((now - clock) * 1000, 3)
            if stages is not None:
                stages.append((name, clock, now))
            clock = now

        if scope.known_at is not None:
            scope = replace(scope, inactive_at_known=self.rows.inactive_at(scope.tenant, scope.known_at))
            lap("known_at")  # the rows inactive at known_at, which every leg's scope needs
        lexical = self._lexical.submit(self._lexical_stage, query, scope, config, stages, people)
        taking_part = active_legs(config)  # a leg of weight 0 is not run at all
        query_vector = None
        if "vec" in taking_part or config.selector == "pursuit":
            query_vector = self.embedder.encode([query])[0]
            lap("embed")
        # The vector leg before waiting for the lexical stage: Qdrant Edge's search releases the
        # interpreter lock, so a lexical stage that outlasts the embedding finishes meanwhile.
        vector_hits = self.vectors.search(query_vector, scope, config.candidates) if "vec" in taking_part else None
        if vector_hits is not None:
            lap("vector")
        legs, heads, newest, lexical_timings = lexical.result()
        timings.update(lexical_timings)
        lap("lexical_wait")  # what the lexical stage added after the embedding and the vector leg
        if vector_hits is not None:
            legs["vec"] = vector_hits
            heads.update(self.rows.heads([h.row_id for h in vector_hits if h.row_id not in heads]))
        fields = {**heads, **{head.row_id: head for head in newest}}
        ranked_legs = {leg: [(h.row_id, h.score) for h in hits] for leg, hits in legs.items()}
        ranking = rank(
            ranked_legs, fields, query_vector, self._vectors_for, config, [head.row_id for head in newest], lap,
        )
        # The version order's vectors are read while the rows are, on the worker.
        wanted_vectors = version_rows(ranking.picks, config, ranking.following)
        vectors = self._lexical.submit(self._vectors_for, wanted_vectors) if wanted_vectors else None
        # Whole rows (texts included) only for what is returned, and for the few rows past it that
        # the version order may bring in (their kinds): about half of what matched.
        rows = self.rows.get_many([p.row_id for p in ranking.picks] + ranking.following)
        lap("rows")
        picks = ranking.picks
        if vectors is not None:
            kinds = {rid: row.kind for rid, row in rows.items()}
            asked_for = {h.row_id for h in legs.get(PEOPLE_LEG, ())}  # the named persons' rows
            picks = order_versions(picks, fields, vectors.result(), kinds, config, ranking.following, asked_for)
            lap("version_order")
        if ranking.following:
            rows = {p.row_id: rows[p.row_id] for p in picks if p.row_id in rows}
        found_versions = versions_in_view(self.rows, list(rows.values()), scope)
        lap("versions")
        fusion = ranking.fusion
        if stages is not None:
            self._trace(query, scope, config, started, stages, legs, fusion, rows)
        return Retrieval(
            selected=self._describe([p for p in picks if p.row_id in rows], rows, fusion),
            matched=len(fusion.fused),
            leg_sizes={leg: len(hits) for leg, hits in fusion.legs.items()},
            timings_ms=timings,
            # The named rows too, so that the benchmark harness replays them (they are never fused).
            legs={**fusion.legs, **({NAMED_LEG: ranked_legs[NAMED_LEG]} if NAMED_LEG in ranked_legs else {})},
            query_vector=query_vector,
            versions=found_versions,
        )

    def _lexical_stage(self, query: str, scope: Scope, config: RetrievalConfig, stages: list[Stage] | None = None,
                       people: PeopleLeg | None = None):
        """The lexical and tag legs, their rows' ranking fields, and the newest rows for the
        reserve's fill: everything of a query that does not need its embedding."""
        started = time.perf_counter()
        taking_part = active_legs(config)
        legs: dict[str, list[Hit]] = {}
        if "lex" in taking_part:
            legs["lex"] = self.lexical.search_text(content_terms(query), scope, config.candidates, config.term_match)
        if "tag" in taking_part:
            legs["tag"] = self.lexical.search_tags(tag_candidates(query), scope, config.candidates)
        if people is not None:
            legs[PEOPLE_LEG] = self._people_leg(people, scope, config)
        named = self.rows.named(scope, named_source_ids(query), NAMED_ROWS) if config.named_rows else []
        searched = time.perf_counter()
        heads = self.rows.heads([h.row_id for hits in legs.values() for h in hits])
        if named:  # the lookup read their ranking fields already
            legs[NAMED_LEG] = [Hit(head.row_id, 1.0) for head in named]
            heads.update((head.row_id, head) for head in named)
        # C more than the reserve needs, so that enough remain once the vector leg's rows (C at
        # most) are taken out.
        fill = config.reserve + config.candidates if config.reserve > 0 else 0
        newest = self.rows.recent(scope, exclude=list(heads), limit=fill)
        done = time.perf_counter()
        timings = {"lexical": round((searched - started) * 1000, 3), "rows_lexical": round((done - searched) * 1000, 3)}
        if stages is not None:
            stages.extend((("lexical", started, searched), ("rows_lexical", searched, done)))
        return legs, heads, newest, timings

    def _people_leg(self, people: PeopleLeg, scope: Scope, config: RetrievalConfig) -> list[Hit]:
        """The persons' own rows that match the rest of the question (any of its terms: a name
        already narrowed them), or, for a question of nothing but names, their newest rows."""
        authors = people.aliases if scope.authors is None else people.aliases & scope.authors
        theirs = replace(scope, authors=frozenset(authors))
        terms = content_terms(people.query)
        if terms:
            return self.lexical.search_text(terms, theirs, config.candidates, PEOPLE_MATCH)
        return [Hit(head.row_id, 1.0) for head in self.rows.recent(theirs, exclude=[], limit=config.candidates)]

    def _trace(self, query: str, scope: Scope, config: RetrievalConfig, started: float, stages: list[Stage],
               legs: dict[str, list[Hit]], fusion: Fusion, rows: dict[str, Row]) -> None:
        """The query's spans: sizes and settings only, the query's length but never its text."""
        hits = {f"orgmem.hits.{leg}": len(found) for leg, found in legs.items()}
        record_query(self.tracer, scope.tenant, started, stages, {
            "orgmem.query.chars": len(query), "orgmem.k": config.k, "orgmem.candidates": config.candidates,
            "orgmem.selector": config.selector, "orgmem.matched": len(fusion.fused), "orgmem.returned": len(rows),
            **hits,
        }, {
            "lexical": {k: v for k, v in hits.items() if k != "orgmem.hits.vec"},
            "vector": {k: v for k, v in hits.items() if k == "orgmem.hits.vec"},
            "fuse": {"orgmem.fused": len(fusion.fused)},
            "select": {"orgmem.k": config.k}, "reserve": {"orgmem.reserve": config.reserve},
            "rows": {"orgmem.rows": len(rows)},
        })

    def _vectors_for(self, row_ids) -> np.ndarray:
        stored = self.vectors.vectors(list(row_ids))
        # A row the vector index has not caught up with yet gets a zero vector: it contributes
        # nothing to a reconstruction, so a selector passes it over instead of failing the query.
        dim = next((len(v) for v in stored.values()), self.embedder.dim)
        return np.stack([stored.get(rid, np.zeros(dim, dtype=np.float32)) for rid in row_ids]) if row_ids else np.zeros((0, dim))

    @staticmethod
    def _describe(picks: list[Pick], rows: dict[str, Row], fusion: Fusion) -> list[Selected]:
        by_id = {f.row_id: f for f in fusion.fused}
        leg_scores = {leg: dict(hits) for leg, hits in fusion.legs.items()}
        out = []
        for position, pick in enumerate(picks, start=1):
            f = by_id.get(pick.row_id)
            out.append(Selected(
                rank=position, row=rows[pick.row_id], reason=pick.reason,
                fused_score=f.score if f else 0.0, leg_ranks=dict(f.ranks) if f else {},
                leg_scores={leg: s[pick.row_id] for leg, s in leg_scores.items() if pick.row_id in s},
            ))
        return out


def versions_in_view(rows: RowReader, found: list[Row], scope: Scope) -> dict[str, Version]:
    """Each row's version of its thread in the view of `scope` (`services.core.versions`), from
    one read of the row store for all their threads."""
    if not found:
        return {}
    threads, row_ids = wanted(found)
    fields = rows.versions_of(scope.tenant, threads, row_ids, scope.known_at)
    return versions([row.row_id for row in found], fields, scope)
