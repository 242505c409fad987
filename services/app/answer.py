"""The answer use case: the evidence one query retrieved for a caller, put to the chat model, and its
reply checked (services.core.answer). Logs say how many rows went and came back, never a text."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.core.answer import (
    RESPONSE_FORMAT,
    SYSTEM,
    CheckedAnswer,
    EvidenceRow,
    build_prompt,
    check_reply,
    no_evidence,
)
from services.errors import Invalid
from services.ports import ChatModel

log = logging.getLogger(__name__)


def answer_from_evidence(model: ChatModel, question: str, evidence: str, rows: Sequence[EvidenceRow],
                         max_evidence_chars: int) -> CheckedAnswer:
    """`rows` are the query's rows in rank order and `evidence` their rendering; only their ids may
    be cited. No rows: the model is not asked. Evidence over `max_evidence_chars` is refused, not
    cut: a cut would hide rows, or the later versions that settle a fact, from the model."""
    if not rows:
        return no_evidence(question)
    if len(evidence) > max_evidence_chars:
        raise Invalid(f"k: the evidence of {len(rows)} rows is {len(evidence)} characters, over "
                      f"answer_max_evidence_chars ({max_evidence_chars}); ask with a smaller k")
    checked = check_reply(model.complete(SYSTEM, build_prompt(question, evidence, rows), RESPONSE_FORMAT), rows)
    log.info("answer: %d evidence rows, %d cited, %d citations dropped, %d gaps", len(rows),
             len(checked.citations), len(checked.dropped_citations), len(checked.missing))
    return checked
