"""`orgmem query`: ask the memory from the command line, with the options of `POST /v1/query`."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from services.cli.common import parse_time, settings_from

LEGS = ("lex", "tag", "vec")


def parse_weights(value: str) -> dict[str, float]:
    """`lex=1,tag=0,vec=2`: the legs named get these weights, the others keep the preset's."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        leg, sep, number = part.partition("=")
        leg = leg.strip()
        if not sep or leg not in LEGS:
            raise argparse.ArgumentTypeError(f"weights: {part!r} is not LEG=NUMBER with LEG one of {', '.join(LEGS)}")
        try:
            weight = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"weights: {leg}: {number.strip()!r} is not a number") from None
        if not 0 <= weight <= 1000:  # also refuses nan and inf, as the API does
            raise argparse.ArgumentTypeError(f"weights: {leg}: a finite number from 0 to 1000")
        weights[leg] = weight
    if not weights:
        raise argparse.ArgumentTypeError("weights: name at least one leg, e.g. lex=1,tag=0,vec=2")
    return weights


def cmd_query(args: argparse.Namespace) -> int:
    from services.bootstrap import open_memory
    from services.core.caller import Caller
    from services.core.evidence import render_evidence

    with open_memory(settings_from(args)) as memory:
        memory.catch_up()
        config = memory.config_for(args.preset, k=args.k, reserve=args.reserve, candidates=args.candidates,
                                   selector=args.selector, conjunctive=args.conjunctive, weights=args.weights,
                                   lexical_match=args.lexical_match, lexical_turn_match=args.lexical_turn_match)
        scope = memory.scope_for(Caller(), as_of=args.as_of, known_at=args.known_at, kinds=args.kinds,
                                 authors=args.authors, threads=args.threads)
        result = memory.query(args.text, scope, config)
        if args.json:
            print(json.dumps([_as_json(s, result.versions.get(s.row.row_id)) for s in result.selected], indent=1))
        else:
            print(render_evidence([s.row for s in result.selected], versions=result.versions))
    return 0


def _as_json(selected, version) -> dict:
    row = selected.row
    return {"rank": selected.rank, "row_id": row.row_id, "reason": selected.reason,
            "date": row.event_time.isoformat() if row.event_time else None, "author": row.author,
            "kind": row.kind, "thread": row.thread, "leg_ranks": selected.leg_ranks, "fused_score": selected.fused_score,
            "version": {**asdict(version), "contradicted_by": list(version.contradicted_by),
                        "superseded_on": version.superseded_on.isoformat() if version.superseded_on else None}
            if version else None,
            "text": row.text}


def register(command, _subparsers) -> None:
    p = command("query", cmd_query, "ask the memory (the options of POST /v1/query)")
    p.add_argument("text")
    p.add_argument("--as-of", type=parse_time, help="bound on event time; undated rows fail it")
    p.add_argument("--known-at", type=parse_time, help="bound on ingest time: what was known then")
    p.add_argument("--k", type=int, help="rows returned")
    p.add_argument("--reserve", type=int, help="of the k rows, how many go to the most recent matches (default: the preset's)")
    p.add_argument("--candidates", type=int, help="C: rows per leg")
    p.add_argument("--selector", choices=["rrf", "pursuit", "coverage"])
    p.add_argument("--preset")
    p.add_argument("--weights", type=parse_weights, metavar="LEG=W,...",
                   help="leg weights over the preset's, e.g. lex=1,tag=0,vec=2 (a leg of weight 0 does not run)")
    matching = p.add_mutually_exclusive_group()
    matching.add_argument("--conjunctive", dest="conjunctive", action="store_const", const=True,
                          help="the lexical leg matches rows with every query term")
    matching.add_argument("--disjunctive", dest="conjunctive", action="store_const", const=False,
                          help="the lexical leg matches rows with any query term")
    matching.add_argument("--lexical-match", choices=["all", "any", "adaptive"],
                          help="which rows the lexical leg matches: every term, any term, or a share that falls "
                               "with the question's length (the default preset's)")
    p.add_argument("--lexical-turn-match", choices=["all", "any", "adaptive"],
                   help="how chat turns match, where not as every other row (the default preset: any)")
    for name, what in (("kinds", "kind"), ("authors", "author"), ("threads", "thread")):
        p.add_argument(f"--{name}", action="append", metavar=what.upper(),
                       help=f"only rows of this {what}; repeat for several")
    p.add_argument("--json", action="store_true")
