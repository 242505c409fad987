"""Lexical legs under other term-match rules than the cached candidates' disjunctive one.

A minimum-should-match rule changes which rows the lexical leg returns, not only their order,
so it cannot be replayed from the disjunctive leg: each rule's leg is fetched through the read
path (`Memory.query`, lexical leg alone, in the question's scope) and cached next to the
candidates. The replay then swaps it in for "lex" (`legs_for`).
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterable
from pathlib import Path

from bench.retrieval.datasets import Dataset
from bench.retrieval.rules import question_scope
from bench.retrieval.store import Candidates, QuestionCandidates, fingerprint, open_store, rules_tag
from services.core.retrieval_config import RetrievalConfig

FETCHED_RULE = "any"  # the rule of the cached candidates' own lexical leg
_PREFIX = "lex:"  # legs of other rules sit in QuestionCandidates.legs under "lex:<rule key>"


def rule_key(config: RetrievalConfig) -> str:
    """Names the lexical rows a config's term-match rule returns ("all", "any", "adaptive-2-0.15-0.3",
    "adaptive-2-0.25-0.3-common-0.05", "adaptive-2-0.25-0.3-common-0.5-turns-any")."""
    match = config.term_match
    key = match.mode if match.mode != "adaptive" else (
        f"adaptive-{match.all_up_to}-{match.share_step:g}-{match.share_floor:g}")
    key = key if match.common_share == 1.0 else f"{key}-common-{match.common_share:g}"
    return key if match.turn_rule is None else f"{key}-turns-{match.turns}"


def legs_for(q: QuestionCandidates, config: RetrievalConfig) -> dict[str, list[tuple[str, float]]]:
    """The question's legs as the read path would fetch them under `config`'s term-match rule."""
    legs = {leg: hits for leg, hits in q.legs.items() if not leg.startswith(_PREFIX)}
    key = rule_key(config)
    if key != FETCHED_RULE:
        if _PREFIX + key not in q.legs:
            raise ValueError(f"lexical rule {key!r}: its leg was not fetched (attach_lexical_legs)")
        legs["lex"] = q.legs[_PREFIX + key]
    return legs


def attach_lexical_legs(cands: Candidates, dataset: Dataset, folder: Path, configs: Iterable[RetrievalConfig],
                        log=sys.stderr) -> None:
    """Add to each cached question the lexical leg of every other rule among `configs` (fetched
    once per rule and dataset, then read from `folder`)."""
    wanted = {rule_key(c): c for c in configs if rule_key(c) != FETCHED_RULE}
    missing = {}
    for key, config in wanted.items():
        path = Path(folder) / (f"lexical-C{cands.candidates}-{key}{rules_tag(cands.rules)}-{fingerprint(dataset)}-"
                               f"{cands.questions_digest}.pkl")
        if path.exists():
            with open(path, "rb") as handle:
                _attach(cands, key, pickle.load(handle))
        else:
            missing[key] = (path, config)
    if not missing:
        return
    questions = {q.qid: q for q in dataset.questions}
    memory, lock = open_store(dataset, folder, log)
    try:
        for key, (path, config) in missing.items():
            print(f"{dataset.name}: fetching the lexical leg under {key}", file=log)
            lexical_only = config.with_overrides(candidates=cands.candidates, k=0, reserve=0, selector="rrf",
                                                 weights={"lex": 1.0, "tag": 0.0, "vec": 0.0})
            fetched = {}
            for q in cands.questions:
                asked = questions[q.qid]
                scope, _ = question_scope(memory, asked, cands.rules)  # the people leg is not this rule's
                fetched[q.qid] = memory.query(asked.text, scope, lexical_only).legs.get("lex", [])
            with open(path, "wb") as handle:
                pickle.dump(fetched, handle)
            _attach(cands, key, fetched)
    finally:
        memory.close()
        lock.release()


def _attach(cands: Candidates, key: str, fetched: dict[str, list[tuple[str, float]]]) -> None:
    for q in cands.questions:
        q.legs[_PREFIX + key] = fetched[q.qid]
