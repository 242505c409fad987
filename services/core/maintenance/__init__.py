"""Maintenance policies (Mem++ consolidation, MemRefine): pure planners that turn rows, their
neighbours and a judge's decisions into log events. No I/O; the use cases in services/app/maintenance.py
read the projections, call the judge and append what these return."""

from services.core.maintenance.access import (
    access_key,
    require_same_access,
    row_access,
    same_access,
    shared_acl,
)
from services.core.maintenance.consolidation import (
    Neighbours,
    combined_acl,
    derive_document,
    group_rows,
    is_candidate,
    is_protected,
    latest_row,
    merge_events,
    plan_group,
)
from services.core.maintenance.judging import (
    MERGED_MAX_TOKENS,
    GroupLabel,
    Judge,
    PairDecision,
    clip_tokens,
)
from services.core.maintenance.refine import (
    Budget,
    Candidate,
    RefinePlanner,
    RefineReport,
    inverse_events,
    pair_key,
    row_size_bytes,
)

__all__ = [
    "MERGED_MAX_TOKENS", "Budget", "Candidate", "GroupLabel", "Judge", "Neighbours", "PairDecision",
    "RefinePlanner", "RefineReport", "access_key", "clip_tokens", "combined_acl", "derive_document",
    "group_rows", "inverse_events", "is_candidate", "is_protected", "latest_row", "merge_events",
    "pair_key", "plan_group", "require_same_access", "row_access", "row_size_bytes", "same_access",
    "shared_acl",
]  # fmt: skip
