"""People and time in the question, measured end to end: evidence recall@10 with and without the rules.

For each seed, the synthetic organisation (as the retrieval harness builds it: 24 decision
threads, 40 percent filler) is read by orgmem's connectors and ingested into a fresh data folder;
its questions are asked through `POST /v1/query` of the real app (in process, over ASGI) twice:
as they are, and with `people_rules` / `time_rules`. Questions come from each thread's record
(`GeneratedOrg.threads`), not from the generator's question list, so the harness datasets do not
change:

- person: "What did <who> decide about the <topic>?", <who> the decider's full name, first name
  or address in turn; gold = the thread's decisions that person wrote.
- time: "What was decided about the <topic> in <Month Year>?" or "... last month?" (reference
  time ten days into the next month); gold = the thread's records dated in that month.

Tuning: the threads of the first half of each seed choose the people leg's weight; the second half
is reported. Run: `python -m bench.people --seeds 1 2 3 4`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date, timedelta
from pathlib import Path

from bench.retrieval.synthetic_org import FILLER, THREADS, connector_documents
from schemas.documents import DocumentIn
from services.core.write_rules import row_id_for
from services.demo.cast import PEOPLE
from services.demo.synthetic_org import generate

K = 10
WEIGHTS = (0.5, 1.0, 2.0, 4.0)


def _row(ref: dict) -> str:
    return row_id_for("default", DocumentIn(text="x", source=ref["source"], source_id=ref["source_id"]))


def _records(thread: dict) -> list[dict]:
    out = []
    for v in thread["versions"]:
        out.append(v)
        if v.get("because"):
            out += [v["because"]["recommendation"], v["because"]["trigger"]]
    out += [r for r in (thread["correction"], thread["contradiction"], thread["stale"]) if r]
    return out


def questions_of(org) -> list[dict]:
    """Person and time questions over each thread, with gold row ids and the tuning half."""
    out = []
    emails = {p.name: p.email for p in PEOPLE}
    half = len(org.threads) // 2
    for n, thread in enumerate(org.threads):
        split = "tune" if n < half else "held-out"
        authors = sorted({v["author"] for v in thread["versions"]})
        for i, who in enumerate(authors):
            form = (who, who.split()[0], emails.get(who, who))[(n + i) % 3]
            gold = [_row(v) for v in thread["versions"] if v["author"] == who]
            out.append({"kind": "person", "form": ("full name", "first name", "address")[(n + i) % 3],
                        "q": f"What did {form} decide about the {thread['title']}?", "gold": gold, "half": split})
        months = sorted({r["date"][:7] for r in thread["versions"]})
        for j, month in enumerate(months):
            first = date.fromisoformat(month + "-01")
            gold = [_row(r) for r in _records(thread) if r["date"].startswith(month)]
            if (n + j) % 2:
                q = f"What was decided about the {thread['title']} in {first:%B %Y}?"
                reference = None
            else:
                q = f"What was decided about the {thread['title']} last month?"
                reference = ((first + timedelta(days=32)).replace(day=10)).isoformat() + "T12:00:00Z"
            out.append({"kind": "time", "form": "absolute" if reference is None else "relative", "q": q,
                        "gold": gold, "half": split, "reference_time": reference})
    return out


TIMES: dict[str, list[float]] = defaultdict(list)  # "<kind> without|with" -> ms per query, in process


def ask(client, q: dict, rules: bool, weight: float | None = None) -> list[str]:
    body = {"q": q["q"], "k": K}
    if weight is not None:
        body["weights"] = {"people": weight}
    if rules:
        body.update(people_rules=q["kind"] == "person", time_rules=q["kind"] == "time")
        if q.get("reference_time"):
            body["reference_time"] = q["reference_time"]
    started = time.perf_counter()
    response = client.post("/v1/query", json=body)
    TIMES[f"{q['kind']} {'with' if rules else 'without'}"].append((time.perf_counter() - started) * 1000)
    response.raise_for_status()
    return [row["row_id"] for row in response.json()["rows"]]


def recall(found: list[str], gold: list[str]) -> float:
    return len(set(found[:K]) & set(gold)) / len(gold) if gold else 1.0


def measure_seed(seed: int, work: Path, weights=WEIGHTS, log=sys.stderr) -> list[dict]:
    from fastapi.testclient import TestClient

    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    org = generate(work / f"source-{seed}", seed=seed, threads=THREADS, filler=FILLER)
    docs = connector_documents(org)
    settings = Settings(data_dir=work / f"data-{seed}", auth={"enabled": False}, embedder={"encoder_processes": 1})
    memory, lock = build_memory(settings)
    started = time.perf_counter()
    try:
        memory.ingest(docs)
        memory.catch_up()
        print(f"seed {seed}: {len(docs)} documents ingested in {time.perf_counter() - started:.1f} s", file=log)
        questions = questions_of(org)
        results = []
        with TestClient(create_app(settings, memory)) as client:
            for q in questions:
                row = {**q, "seed": seed, "without": recall(ask(client, q, False), q["gold"])}
                for w in weights if q["kind"] == "person" else (None,):
                    row[f"with-{w}"] = recall(ask(client, q, True, w), q["gold"])
                results.append(row)
        return results
    finally:
        memory.close()
        lock.release()


def summarise(results: list[dict], weights=WEIGHTS) -> str:
    tune = [r for r in results if r["half"] == "tune" and r["kind"] == "person"]
    best = max(weights, key=lambda w: sum(r[f"with-{w}"] for r in tune)) if tune else weights[0]
    lines = [f"people leg weight chosen on the tuning half: {best:g} "
             f"(tuning recall@{K} per weight: " + ", ".join(
                 f"{w:g}: {sum(r[f'with-{w}'] for r in tune) / max(len(tune), 1):.3f}" for w in weights) + ")", "",
             f"| held-out questions | n | recall@{K} without rules | with rules | gain (points) |", "|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r["half"] == "held-out":
            groups[f"{r['kind']}: {r['form']}"].append(r)
            groups[r["kind"]].append(r)
            groups["all"].append(r)
    for name in sorted(groups, key=lambda g: (g == "all", ":" not in g, g)):
        rows = groups[name]
        key = f"with-{best}" if name.startswith("person") else "with-None"
        if name == "all":
            with_rules = sum(r[f"with-{best}"] if r["kind"] == "person" else r["with-None"] for r in rows) / len(rows)
        else:
            with_rules = sum(r[key] for r in rows) / len(rows)
        without = sum(r["without"] for r in rows) / len(rows)
        lines.append(f"| {name} | {len(rows)} | {without:.3f} | {with_rules:.3f} | {100 * (with_rules - without):+.1f} |")
    lines += ["", "| query time, in process over ASGI (ms) | p50 | p95 | n |", "|---|---|---|---|"]
    for name, times in sorted(TIMES.items()):
        ordered = sorted(times)
        lines.append(f"| {name} rules | {ordered[len(ordered) // 2]:.2f} | {ordered[int(len(ordered) * 0.95)]:.2f} "
                     f"| {len(ordered)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.people", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="orgmem-people-") as work:
        for seed in args.seeds:
            results += measure_seed(seed, Path(work))
    print(f"seeds {', '.join(map(str, args.seeds))}")
    print(summarise(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
