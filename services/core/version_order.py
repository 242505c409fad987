"""Newer versions first: among the returned rows, a row that restates another, later, goes above it.

An organisation's record holds a rule several times: set in a mail, revised in a meeting, reversed
in a ticket comment, each in other words and often in another thread. All of them match a question
about the rule about equally, so the fused order puts the version in force above the versions it
replaced about as often as not (docs/retrieval.md, "Version order"). The scope already leaves out
what was written after `as_of` or ingested after `known_at`, so among the rows returned the newest
restatement is the one that held at the asked date.

Two returned rows are taken as versions of one statement when their embeddings are at least
`similarity` apart in cosine (their threads do not matter: versions cross channels) and neither is
a chat turn (`UNVERSIONED_KINDS`). The order
then changes as little as that requires: rows are taken in the selector's order, and before a row
is placed, every not yet placed newer version of it is placed (newer versions of those first), so
a newer version moves up to its oldest version's slot instead of that version falling below every
row between them. Which rows are returned does not change, only their order, and only among the
first rows (`version_rows` of the config: each costs a vector read on the read path).

The reach (`with_reached_versions`) is the one exception: a closer, later restatement among the
next few rows of the selector's order, returned or not, comes in among the first rows, and the
caller keeps as many rows as it had. Pure: ids, recency keys and vectors in, the new order out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from schemas.documents import TURN_KINDS
from services.core.reserve import RecencyKey


# A chat turn answers the turn before it; a later turn on the same subject goes on talking, it does
# not replace it (on LoCoMo, reordering turns so cost a third of MRR@10; docs/retrieval.md).
UNVERSIONED_KINDS = TURN_KINDS


# A row this close to a row already taken is a copy of it (the same mail in two mailboxes, a
# forward), not a newer version: the reach does not bring it in, it would only repeat that row.
COPY_SIMILARITY = 0.99


def versioned(kind: str | None) -> bool:
    """Whether a row of this kind can be a version of another (a row of unknown kind can)."""
    return kind not in UNVERSIONED_KINDS


def newer_versions_first(row_ids: Sequence[str], recency: Mapping[str, RecencyKey], vectors: np.ndarray,
                         similarity: float, linkable: Sequence[bool] | None = None) -> list[str]:
    """`row_ids` (best first) reordered so that of any two rows whose unit `vectors` (aligned with
    `row_ids`) have a cosine of at least `similarity`, the later by `recency` comes first.
    `linkable` (aligned): False for a row that is nobody's version (it keeps its place among
    the rest). A similarity above 1 links no rows (the order is kept)."""
    n = len(row_ids)
    if len(set(row_ids)) != n:
        raise ValueError("row_ids: a row is listed twice")
    if vectors.shape[0] != n:
        raise ValueError(f"vectors: expected one per row ({n}), got {vectors.shape[0]}")
    if linkable is not None and len(linkable) != n:
        raise ValueError(f"linkable: expected one per row ({n}), got {len(linkable)}")
    if n < 2:
        return list(row_ids)
    cosines = vectors @ vectors.T
    keys = [recency[rid] for rid in row_ids]
    can = list(linkable) if linkable is not None else [True] * n
    # newer[i]: the rows that restate row i later, in the selector's order.
    newer = [[j for j in range(n) if j != i and can[i] and can[j] and cosines[i, j] >= similarity and keys[j] > keys[i]]
             for i in range(n)]
    placed = [False] * n
    out: list[str] = []
    for first in range(n):
        # Depth first without recursion: a row is placed once every newer version of it is.
        stack = [first] if not placed[first] else []
        while stack:
            i = stack[-1]
            placed[i] = True  # claimed: rows on the stack are ever newer, so none is pushed twice
            waiting = next((j for j in newer[i] if not placed[j]), None)
            if waiting is None:
                stack.pop()
                out.append(row_ids[i])
            else:
                stack.append(waiting)
    return out


def with_reached_versions(row_ids: Sequence[str], window: int, recency: Mapping[str, RecencyKey], vectors: np.ndarray,
                          similarity: float, reach_similarity: float, linkable: Sequence[bool] | None = None) -> list[str]:
    """The first `window` of `row_ids` in `newer_versions_first` order, with the rows after them
    (the reach) that restate one of them later at a cosine of at least `reach_similarity` taken
    in, so that such a row moves up above the version it restates; the reach's other rows follow
    in their order. A caller that keeps as many rows as it had pushes its last rows out: the
    version in force of a statement whose older version made the first rows comes in even when
    the selector ranked it just past them (docs/retrieval.md, "The reach")."""
    n = len(row_ids)
    if not 0 <= window <= n:
        raise ValueError(f"window: expected 0..{n} rows, got {window}")
    if vectors.shape[0] != n:
        raise ValueError(f"vectors: expected one per row ({n}), got {vectors.shape[0]}")
    can = list(linkable) if linkable is not None else [True] * n
    if linkable is not None and len(can) != n:
        raise ValueError(f"linkable: expected one per row ({n}), got {len(can)}")
    cosines = vectors @ vectors.T if n else np.zeros((0, 0))
    keys = [recency[rid] for rid in row_ids]
    head = list(range(window))
    reached: list[int] = []
    for j in range(window, n):
        restates = can[j] and any(can[i] and cosines[i, j] >= reach_similarity and keys[j] > keys[i] for i in range(window))
        if restates and not any(cosines[i, j] >= COPY_SIMILARITY for i in head):
            head.append(j)
            reached.append(j)
    ordered = newer_versions_first([row_ids[i] for i in head], {row_ids[i]: keys[i] for i in head},
                                   vectors[head], similarity, [can[i] for i in head])
    taken = set(reached)
    return ordered + [row_ids[j] for j in range(window, n) if j not in taken]
