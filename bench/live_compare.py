"""Two presets asked the same questions by one client, in one run, each pair's first alternating:
the default read path's cost against another preset's, measured on the same host, store and
server warmth (`bench.live`, live and at scale). Issue 18 asks the default's p50 at 100k rows
within COMPARE_P50_MS of the paper preset's."""

from __future__ import annotations

from collections.abc import Iterator

import httpx

from bench import live_report as lr
from bench import live_server as ls

COMPARE_P50_MS = 3.0  # the default read path's p50 may exceed the compared preset's by this much


def query_figures(queries: list[tuple]) -> dict:
    ok = [q for q in queries if q[3] == 200]
    return {**lr.latency_summary([q[2] for q in ok]), "errors": len(queries) - len(ok),
            "embed_p50_ms": ls.stage_p50(ok, "embed"), "vector_p50_ms": ls.stage_p50(ok, "vector"),
            "stage_p50_ms": {stage: ls.stage_p50(ok, stage) for stage in sorted({s for q in ok for s in q[4]})}}


def paired_queries(reader: httpx.Client, asked: Iterator[str], n: int, preset: str | None, other: str) -> tuple[list, dict]:
    """Each of n questions asked under both presets, the first of the pair alternating, so that
    both see the same questions, the same host and the same warmth of the server's caches.
    Returns `preset`'s queries and `other`'s figures."""
    mine, theirs = [], []
    for i in range(n):
        question = next(asked)
        first, second = (preset, other) if i % 2 == 0 else (other, preset)
        answers = {first: ls.timed_query(reader, question, first), second: ls.timed_query(reader, question, second)}
        mine.append(answers[preset])
        theirs.append(answers[other])
    return mine, {"preset": other, **query_figures(theirs)}


def stage_line(figures: dict) -> str:
    """The read path's stage medians of `query_figures`, slowest first."""
    stages = sorted(figures["stage_p50_ms"].items(), key=lambda item: -(item[1] or 0))
    return ", ".join(f"{name} {ms}" for name, ms in stages)


def compare_targets(preset: str | None, row: dict, rules_ms: float | None = None) -> list[str]:
    """The compared side's target: another preset's p50 within COMPARE_P50_MS below the default's;
    with rules_ms, the rules on (the compared side) at most that much above the rules off."""
    other = row.get("compared")
    if not other or row["p50_ms"] is None or other["p50_ms"] is None:
        return []
    if rules_ms is not None:
        name = f"p50 with {other['preset']} minus without at {row['rows']:,} rows"
        return [lr.target_line(name, round(other["p50_ms"] - row["p50_ms"], 1), rules_ms)]
    name = f"p50 of {preset or 'the server default'} minus {other['preset']}'s at {row['rows']:,} rows"
    return [lr.target_line(name, round(row["p50_ms"] - other["p50_ms"], 1), COMPARE_P50_MS)]


def print_comparison(preset: str | None, row: dict, rules_ms: float | None = None) -> None:
    other = row["compared"]
    mine = preset or "the server's default"
    # Counted per side: a live run stops mid-pair, so the two may differ by one.
    counts = f"{row['n']}" if other.get("n", row["n"]) == row["n"] else f"{row['n']} and {other['n']}"
    print(f"  the same questions ({counts}) under both, alternating: {mine} p50 {lr.fmt(row['p50_ms'])} / p95 "
          f"{lr.fmt(row['p95_ms'])} ms, {other['preset']} p50 {lr.fmt(other['p50_ms'])} / p95 "
          f"{lr.fmt(other['p95_ms'])} ms", flush=True)
    print(f"  {other['preset']} stage p50 ms: " + stage_line(other), flush=True)
    for line in compare_targets(preset, row, rules_ms):
        print("  " + line, flush=True)
