"""The read path (Mem++ §3.3): scope -> three legs -> weighted RRF -> selection -> reserve.

Adapters run the legs inside the scope; the ranking after them is `services.core.ranking.rank`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from schemas.rows import Row
from services.core.ranking import Fusion, rank
from services.core.reserve import Pick
from services.core.retrieval_config import RetrievalConfig
from services.core.scope import Scope
from services.core.text import content_terms, tag_candidates
from services.ports import Embedder, Hit, LexicalIndex, RowStore, VectorIndex


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
    query_vector: np.ndarray | None = None


class Retriever:
    """lexical_workers: threads that run the lexical and tag legs (and read their rows' ranking
    fields) while the calling thread encodes the query. The encoder and tantivy both release the
    interpreter lock, so on two cores the query embedding, the longest stage, overlaps the
    lexical work instead of preceding it.

    The encoder runs on the calling thread, not the worker: on this 2-core virtual machine a
    woken worker started 0.46 ms (median) after the submit, and a caller waiting for it pays a
    wake-up again. The lexical stage is the shorter one, so its lag is hidden."""

    def __init__(self, rows: RowStore, lexical: LexicalIndex, vectors: VectorIndex, embedder: Embedder,
                 lexical_workers: int = 4):
        self.rows, self.lexical, self.vectors, self.embedder = rows, lexical, vectors, embedder
        self._lexical = ThreadPoolExecutor(max_workers=lexical_workers, thread_name_prefix="orgmem-query-lexical")

    def close(self) -> None:
        self._lexical.shutdown(wait=False, cancel_futures=True)

    def retrieve(self, query: str, scope: Scope, config: RetrievalConfig) -> Retrieval:
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round((now - clock) * 1000, 3)
            clock = now

        if scope.known_at is not None:
            scope = replace(scope, inactive_at_known=self.rows.inactive_at(scope.tenant, scope.known_at))
            lap("known_at")  # the rows inactive at known_at, which every leg's scope needs
        lexical = self._lexical.submit(self._lexical_stage, query, scope, config)
        query_vector = self.embedder.encode([query])[0]
        lap("embed")
        legs, heads, newest, lexical_timings = lexical.result()
        timings.update(lexical_timings)
        lap("lexical_wait")  # what the lexical stage added after the embedding
        legs["vec"] = self.vectors.search(query_vector, scope, config.candidates)
        lap("vector")
        heads.update(self.rows.heads([h.row_id for h in legs["vec"] if h.row_id not in heads]))
        ranking = rank(
            {leg: [(h.row_id, h.score) for h in hits] for leg, hits in legs.items()},
            {**heads, **{head.row_id: head for head in newest}}, query_vector, self._vectors_for, config,
            [head.row_id for head in newest], lap,
        )
        # Whole rows (texts included) only for what is returned: about half of what matched.
        rows = self.rows.get_many([p.row_id for p in ranking.picks])
        lap("rows")
        fusion = ranking.fusion
        return Retrieval(
            selected=self._describe([p for p in ranking.picks if p.row_id in rows], rows, fusion),
            matched=len(fusion.fused),
            leg_sizes={leg: len(hits) for leg, hits in fusion.legs.items()},
            timings_ms=timings,
            legs=fusion.legs,
            query_vector=query_vector,
        )

    def _lexical_stage(self, query: str, scope: Scope, config: RetrievalConfig):
        """The lexical and tag legs, their rows' ranking fields, and the newest rows for the
        reserve's fill: everything of a query that does not need its embedding."""
        started = time.perf_counter()
        legs: dict[str, list[Hit]] = {
            "lex": self.lexical.search_text(content_terms(query), scope, config.candidates, config.conjunctive),
            "tag": self.lexical.search_tags(tag_candidates(query), scope, config.candidates),
        }
        searched = time.perf_counter()
        heads = self.rows.heads([h.row_id for hits in legs.values() for h in hits])
        # C more than the reserve needs, so that enough remain once the vector leg's rows (C at
        # most) are taken out.
        fill = config.reserve + config.candidates if config.reserve > 0 else 0
        newest = self.rows.recent(scope, exclude=list(heads), limit=fill)
        done = time.perf_counter()
        timings = {"lexical": round((searched - started) * 1000, 3), "rows_lexical": round((done - searched) * 1000, 3)}
        return legs, heads, newest, timings

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
