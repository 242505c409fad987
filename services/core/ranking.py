"""The read path's ranking once the legs have answered (Mem++ §3.3): weighted RRF over the legs,
the configured selector over the fused pool, then the recency reserve, and then (once the returned
rows' kinds are read) newer versions first.

`Retriever.retrieve` and the benchmark harness's replay both call `rank` and `order_versions`, so
an offline replay ranks exactly as a query does. Pure: rows come in as their ranking fields,
vectors through a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Protocol

import numpy as np

from services.core.fusion import Fused, weighted_rrf
from services.core.reserve import Pick, RecencyKey, with_recency_reserve
from services.core.retrieval_config import RetrievalConfig
from services.core.selection import Pool, VectorsFor, select
from services.core.version_order import versioned, with_reached_versions

LEXICAL_LEG = "lex"  # its BM25 scores feed the coverage selector's thread votes
# The rows the query names by source id (`RetrievalConfig.named_rows`): never fused, they go first.
NAMED_LEG = "named"
PEOPLE_LEG = "people"  # the people rule's leg: rows of the persons a question names

Hits = Sequence[tuple[str, float]]  # one leg's answer: (row id, score), best first


class RankingFields(Protocol):
    """What ranking needs of a row besides its vector (`services.ports.RowHead` has it)."""

    @property
    def thread(self) -> str | None: ...

    @property
    def ingest_position(self) -> int: ...

    @property
    def recency(self) -> RecencyKey: ...


@dataclass(frozen=True)
class RowFields:
    """RankingFields as plain data."""

    thread: str | None
    ingest_position: int
    recency: RecencyKey


@dataclass(frozen=True)
class Fusion:
    legs: dict[str, list[tuple[str, float]]]  # each leg cut to C, rows without fields dropped
    fused: list[Fused]


# The reason of a row that the version order brought in from past the selector's answer.
NEWER_VERSION_REASON = "newer_version"
NAMED_REASON = "named"


@dataclass(frozen=True)
class Ranking:
    picks: list[Pick]  # the answer, in order, each with the reason it was picked
    fusion: Fusion
    # The selector's next rows past the answer, as far as the version order reaches (`version_reach`).
    following: list[str] = field(default_factory=list)


def active_legs(config: RetrievalConfig) -> frozenset[str]:
    """The legs that take part: those of weight above 0. A leg of weight 0 is left out whole, so
    its rows neither fill the fused list nor count as matched for the recency reserve."""
    return frozenset(leg for leg, weight in config.weights.items() if weight > 0)


def with_people_leg(config: RetrievalConfig, named: bool) -> RetrievalConfig:
    """`config` for a question whose people rule named someone (`named`): their leg takes part in
    fusion at `weights.people`, else at `people_weight`; unchanged when nobody was named."""
    weight = config.weights.get(PEOPLE_LEG, config.people_weight)
    if not named or weight <= 0:
        return config
    return replace(config, weights={**config.weights, PEOPLE_LEG: weight})


def fuse(legs: Mapping[str, Hits], fields: Mapping[str, RankingFields], config: RetrievalConfig) -> Fusion:
    """Weighted RRF over each taking-part leg's first C hits. A hit whose row has no ranking
    fields (an index still lists it, the store no longer admits it) is dropped before ranks are
    counted."""
    taking_part = active_legs(config)
    kept = {leg: [(rid, score) for rid, score in hits[: config.candidates] if rid in fields]
            for leg, hits in legs.items() if leg in taking_part}
    ids = {leg: [rid for rid, _ in hits] for leg, hits in kept.items()}
    ingest_order = {rid: fields[rid].ingest_position for leg_ids in ids.values() for rid in leg_ids}
    return Fusion(kept, weighted_rrf(ids, config.weights, config.gamma, ingest_order))


def pool_of(fusion: Fusion, fields: Mapping[str, RankingFields]) -> Pool:
    """The pool a selector orders: the fused rows with their threads, positions and BM25 scores."""
    return Pool.from_fused(fusion.fused, lambda rid: fields[rid].thread, lambda rid: fields[rid].ingest_position,
                           dict(fusion.legs.get(LEXICAL_LEG, [])))


def rank(
    legs: Mapping[str, Hits],
    fields: Mapping[str, RankingFields],
    query: np.ndarray | None,
    vectors_for: VectorsFor,
    config: RetrievalConfig,
    newest: Iterable[str],
    lap: Callable[[str], None] | None = None,
) -> Ranking:
    """The k rows the read path returns: the first k - R in the selector's order, then the
    recency reserve of R (`services.core.reserve`). The version order (`order_versions`) follows
    once the rows' kinds are read.

    `fields` covers every hit and the rows of `newest`: the scope's row ids, most recently
    ingested first, of which the first R that no leg matched fill a reserve short of matched
    rows (it is read only that far). `query` is the query's embedding, None where neither the
    vector leg nor the selector needs it. `lap(stage)` is called after "fuse", "select" and
    "reserve", so a caller can time them."""
    mark = lap or (lambda stage: None)
    fusion = fuse(legs, fields, config)
    mark("fuse")
    ordered, lead_reason = select(pool_of(fusion, fields), query, vectors_for, config)
    mark("select")
    matched = [f.row_id for f in fusion.fused]
    taken = set(matched)
    unmatched = list(islice((rid for rid in newest if rid not in taken), max(config.reserve, 0)))
    recency = {rid: fields[rid].recency for rid in (*matched, *unmatched)}
    picks = with_recency_reserve(ordered, matched, config.k, config.reserve, recency, unmatched, lead_reason)
    mark("reserve")
    picks = with_named_first(picks, legs.get(NAMED_LEG, ()), fields, config)
    return Ranking(picks, fusion, _following(ordered, picks, config))


def with_named_first(picks: Sequence[Pick], named: Hits, fields: Mapping[str, RankingFields],
                     config: RetrievalConfig) -> list[Pick]:
    """The rows the query named by source id (those with ranking fields, k at most) first, then
    the other picks, k in all; `picks` unchanged where `named_rows` is off or nothing was named."""
    first = [rid for rid, _ in named if rid in fields][: config.k] if config.named_rows else []
    if not first:
        return list(picks)
    taken = set(first)
    return ([Pick(rid, NAMED_REASON) for rid in first] + [p for p in picks if p.row_id not in taken])[: config.k]


def _following(ordered: Sequence[str], picks: Sequence[Pick], config: RetrievalConfig) -> list[str]:
    """The rows of the selector's order past `picks` that the version order's reach takes in."""
    if config.version_similarity <= 0 or config.version_reach <= 0:
        return []
    wanted = min(config.version_rows, len(picks)) + config.version_reach - len(picks)
    if wanted <= 0:
        return []
    picked = {p.row_id for p in picks}
    return list(islice((rid for rid in ordered if rid not in picked), wanted))


def version_rows(picks: Sequence[Pick], config: RetrievalConfig, following: Sequence[str] = ()) -> list[str]:
    """The rows whose vectors the version order needs: the first `version_rows` picks, then the
    next `version_reach` rows of the selector's order (the rest of the picks, then `following`,
    `Ranking.following`); none when `version_similarity` is 0 (off)."""
    if config.version_similarity <= 0 or config.version_rows < 1:
        return []
    ids = [p.row_id for p in picks]
    window = ids[: config.version_rows]
    wanted = window + [*ids[len(window):], *following][: config.version_reach]
    return wanted if len(wanted) >= 2 else []  # one row alone has no version to be ordered against


def order_versions(picks: Sequence[Pick], fields: Mapping[str, RankingFields], vectors: np.ndarray,
                   kinds: Mapping[str, str | None], config: RetrievalConfig, following: Sequence[str] = (),
                   asked_for: Collection[str] = frozenset()) -> list[Pick]:
    """`picks` with newer versions first among the first `version_rows`, and a closer newer version
    among the next `version_reach` rows moved up into them (`with_reached_versions`); `vectors`
    come aligned with `version_rows(picks, config, following)`, `kinds` gives each of those rows'
    kind (a chat turn is nobody's version, see `services.core.version_order`). As many picks come
    back as went in: a row brought in from `following` pushes the last pick out. Every pick keeps
    its reason; a row brought in has NEWER_VERSION_REASON.

    `asked_for`: rows the question asks for by who wrote them (the people rule's leg). "What did
    Finn decide" asks for Finn's decision even where a later one replaced it, so those rows are
    nobody's version here: they keep their place, and no row brought in pushes one of them out
    (the version notes still say which version is current)."""
    ids = version_rows(picks, config, following)
    if not ids:
        return list(picks)
    window = min(config.version_rows, len(picks))
    reason = {p.row_id: p.reason for p in picks}
    order = with_reached_versions(ids, window, {rid: fields[rid].recency for rid in ids},
                                  np.asarray(vectors, dtype=np.float32), config.version_similarity,
                                  config.version_reach_similarity,
                                  [versioned(kinds.get(rid)) and rid not in asked_for for rid in ids])
    placed = set(order)
    out = [Pick(rid, reason.get(rid, NEWER_VERSION_REASON)) for rid in order]
    out += [p for p in picks if p.row_id not in placed]
    kept = out[: len(picks)]
    if lost := [p for p in out[len(picks):] if p.row_id in asked_for and p.row_id in reason]:
        # Pushed out by rows brought in (a pick leaves only for one of those): the last of them
        # make way again.
        brought = [p.row_id for p in kept if p.row_id not in reason][-len(lost):]
        kept = ([p for p in kept if p.row_id not in brought] + lost)[: len(picks)]
    return kept
