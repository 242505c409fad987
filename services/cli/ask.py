"""`orgmem ask "question"`: an answer with citations from the local memory, as POST /v1/answer
gives one: the query's rows (an unrestricted caller, as `orgmem query`), rendered with their
version lines, answered by the configured chat model (answer_base_url, answer_model)."""

from __future__ import annotations

import argparse
import json

from services.cli.common import parse_time, settings_from
from services.errors import AnswerNotConfigured


def cmd_ask(args: argparse.Namespace) -> int:
    from services.app.answer import answer_from_evidence
    from services.bootstrap import answer_model_for, open_memory
    from services.core.answer import EvidenceRow
    from services.core.caller import Caller
    from services.core.evidence import render_evidence

    settings = settings_from(args)
    model = answer_model_for(settings)
    if model is None:  # before the memory opens: nothing to read for an answer nobody can give
        raise AnswerNotConfigured("answer_base_url, answer_model: no answer endpoint; set ORGMEM_ANSWER_BASE_URL "
                                  "and ORGMEM_ANSWER_MODEL (an OpenAI-compatible chat-completions endpoint)")
    try:
        with open_memory(settings) as memory:
            memory.catch_up()
            config = memory.config_for(args.preset, k=args.k)
            scope = memory.scope_for(Caller(), as_of=args.as_of, known_at=args.known_at, kinds=args.kinds,
                                     authors=args.authors, threads=args.threads)
            result = memory.query(args.question, scope, config)
        found = [s.row for s in result.selected]
        evidence = render_evidence(found, versions=result.versions)
        rows = [EvidenceRow(row.row_id, row.title, row.event_time) for row in found]
        checked = answer_from_evidence(model, args.question, evidence, rows, settings.answer_max_evidence_chars)
    finally:
        model.close()
    if args.json:
        print(json.dumps({"answer": checked.answer, "citations": [
            {"row_id": c.row_id, "title": c.title, "date": c.date.isoformat() if c.date else None}
            for c in checked.citations], "dropped_citations": checked.dropped_citations,
            "flagged": checked.flagged, "missing": checked.missing, "evidence_rows": len(rows)}, indent=1))
        return 0
    print(checked.answer)
    for cited in checked.citations:
        date = cited.date.date().isoformat() if cited.date else "undated"
        print(f"  [{cited.row_id}] {date} {cited.title or ''}".rstrip())
    if checked.dropped_citations:
        print("flagged: the model cited rows that were not in the evidence: " + ", ".join(checked.dropped_citations))
    for gap in checked.missing:
        print(f"missing: {gap}")
    return 0


def register(command, _subparsers) -> None:
    p = command("ask", cmd_ask, "answer a question from the memory, with citations "
                                "(needs answer_base_url and answer_model)")
    p.add_argument("question")
    p.add_argument("--as-of", type=parse_time, help="bound on event time; undated rows fail it")
    p.add_argument("--known-at", type=parse_time, help="bound on ingest time: what was known then")
    p.add_argument("--k", type=int, help="rows the answer may draw on")
    p.add_argument("--preset")
    for name, what in (("kinds", "kind"), ("authors", "author"), ("threads", "thread")):
        p.add_argument(f"--{name}", action="append", metavar=what.upper(),
                       help=f"only rows of this {what}; repeat for several")
    p.add_argument("--json", action="store_true")
