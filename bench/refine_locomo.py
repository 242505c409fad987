"""MemRefine with the rule judge on LoCoMo: realised size, time, pairs judged per second, and
retrieval quality against the uncompressed store.

    .venv/bin/python -m bench.refine_locomo [--budgets 0.7 0.5] [--conversations 10]
                                            [--delete 0.95 --merge 0.9]

Each LoCoMo conversation is one tenant, built once through the write path (the retrieval
harness's loader, `bench.retrieval`) and kept under bench/out/refine-locomo. For each budget
every tenant is refined, the 1,5xx questions of categories 1-4 are asked through `Memory.query`
(the harness's reference configuration: BM25 + vectors, weights 1:2, C = 200, no reserve,
k = 10), and then every run is reverted, which must give back the exact active set (checked).

Scoring a compressed store: a selected row stands for itself and, when it was derived by a
merge, for every turn it was derived from (the merged text holds them). Turn recall @10 = share
of gold turns stood for by the first 10 rows; complete coverage @10 = 1 when every session
holding a gold turn has such a row. "credited" additionally lets the row a delete kept stand for
the turn it replaced (the judge said it held the same facts); "strict" does not.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.retrieval.datasets import load
from bench.retrieval.harness import REFERENCE
from bench.retrieval.store import gold_rows, open_store
from services.adapters.judge import RuleJudge
from services.app.maintenance import MaintenanceService, active_set
from services.core.maintenance import Budget
from services.core.scope import Scope

OUT = Path(__file__).resolve().parent / "out" / "refine-locomo"
K = 10
_KEPT = re.compile(r"less informative than (\S+?)(?:;|$)")


def all_rows(memory, tenant: str):
    """Every row of the tenant, archived ones included (a known_at bound ignores the current state)."""
    return memory.rows_in_scope(Scope(tenant=tenant, known_at=datetime(9999, 1, 1, tzinfo=UTC)), limit=10**7)


def stand_ins(memory, rows, credit_deletes: bool) -> dict[str, set[str]]:
    """row id -> the original rows it stands for (itself; sources of merges, transitively)."""
    covers: dict[str, set[str]] = {r.row_id: {r.row_id} for r in rows}
    derived = [r for r in rows if r.derived_from]
    changed = True
    while changed:  # a merge of merges: fold sources until nothing new is reached
        changed = False
        for row in derived:
            for source in row.derived_from:
                extra = covers.get(source, {source}) - covers[row.row_id]
                if extra:
                    covers[row.row_id] |= extra
                    changed = True
    if credit_deletes:
        for row in rows:
            history = memory.row_history(row.row_id) if row.state == "archived" else []
            if history and (kept := _KEPT.search(history[-1].reason)):
                covers.setdefault(kept.group(1), {kept.group(1)}).update(covers[row.row_id])
    return covers


def evaluate(memory, dataset, questions) -> dict[str, tuple[float, float]]:
    """{"strict"|"credited": (turn recall @K, complete session coverage @K)}, asking each
    question once through Memory.query."""
    config = REFERENCE.with_overrides(k=K)
    covers: dict[str, dict[str, dict[str, set[str]]]] = {"strict": {}, "credited": {}}
    session = {}
    for group in dataset.groups:
        rows = all_rows(memory, group.key)
        covers["strict"][group.key] = stand_ins(memory, rows, False)
        covers["credited"][group.key] = stand_ins(memory, rows, True)
        session.update({r.row_id: r.thread for r in rows})
    sums = {name: [0.0, 0.0] for name in covers}
    for q, gold in questions:
        selected = [s.row.row_id for s in memory.query(q.text, Scope(tenant=q.group), config).selected][:K]
        for name, by_group in covers.items():
            reached = set().union(set(), *(by_group[q.group].get(r, {r}) for r in selected))
            sums[name][0] += sum(1 for g in gold if g in reached) / len(gold)
            sums[name][1] += 1.0 if {session[g] for g in gold} <= {session[r] for r in reached} else 0.0
    return {name: (r / len(questions), c / len(questions)) for name, (r, c) in sums.items()}


def revert_all(service: MaintenanceService, run_ids: list[str]) -> None:
    for run_id in reversed(run_ids):
        service.revert(run_id, requested_by="bench")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.7, 0.5])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--delete", type=float, default=0.95, help="rule judge: delete at cosine >=")
    parser.add_argument("--merge", type=float, default=0.9, help="rule judge: merge at cosine >=")
    parser.add_argument("--neighbours", type=int, default=20)
    args = parser.parse_args()

    dataset = load("locomo").slice(args.conversations)
    OUT.mkdir(parents=True, exist_ok=True)
    memory, lock = open_store(dataset, OUT)
    try:
        judge = RuleJudge(similarity_delete=args.delete, similarity_merge=args.merge)
        service = MaintenanceService(memory, judge, neighbours=args.neighbours)
        # A run left by an interrupted benchmark is undone first: the baseline is the built store.
        leftover = [r.run_id for r in service.runs() if r.job == "refine" and r.status == "finished"]
        if leftover:
            print(f"reverting {len(leftover)} refine runs left by an earlier run of this script", file=sys.stderr)
            revert_all(service, leftover)
        tenants = [g.key for g in dataset.groups]
        baseline = {t: active_set(memory, t) for t in tenants}
        questions = []
        for q in dataset.questions:
            gold = gold_rows(memory, q.group, dataset.source, q.gold)
            if gold:
                questions.append((q, gold))
        print(f"{len(tenants)} conversations, {sum(len(b) for b in baseline.values())} rows, "
              f"{len(questions)} questions (categories 1-4); judge {judge!r}", file=sys.stderr)

        base_recall, base_cov = evaluate(memory, dataset, questions)["strict"]
        table = [("uncompressed", 1.0, "-", "-", "-", base_cov, base_recall, base_cov, base_recall, "-")]
        for budget in args.budgets:
            runs, judged, seconds, start, end, stops = [], 0, 0.0, 0, 0, {}
            for tenant in tenants:
                began = time.perf_counter()
                run = service.refine(tenant, Budget(fraction=budget), requested_by="bench", use_cache=False)
                seconds += time.perf_counter() - began
                runs.append(run.run_id)
                judged += run.summary["pairs_judged"]
                start += run.summary["start_bytes"]
                end += run.summary["realised_bytes"]
                stops[run.summary["stop_reason"]] = stops.get(run.summary["stop_reason"], 0) + 1
                print(f"  {tenant}: {run.summary['realised_bytes'] / max(run.summary['start_bytes'], 1):.3f} "
                      f"{run.summary['decisions']} {run.summary['stop_reason']}", file=sys.stderr)
            scores = evaluate(memory, dataset, questions)
            strict, credited = scores["strict"], scores["credited"]
            table.append((f"budget {budget}", end / start, f"{seconds:.1f}", f"{judged}", f"{judged / seconds:.0f}",
                          strict[1], strict[0], credited[1], credited[0],
                          ", ".join(f"{k} {v}" for k, v in sorted(stops.items()))))
            revert_all(service, runs)
            after = {t: active_set(memory, t) for t in tenants}
            assert after == baseline, "revert did not give back the active set"
    finally:
        memory.close()
        lock.release()

    print(f"\n## MemRefine, rule judge (delete >= {args.delete}, merge >= {args.merge}), LoCoMo, "
          f"{len(questions)} questions, k = {K}\n")
    print("| store | realised size | refine time (s) | pairs judged | pairs/s | coverage@10 strict | "
          "turn recall@10 strict | coverage@10 credited | turn recall@10 credited | stop reasons |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, size, secs, pairs, rate, cov_s, rec_s, cov_c, rec_c, stops in table:
        print(f"| {name} | {size:.3f} | {secs} | {pairs} | {rate} | {cov_s:.3f} | {rec_s:.3f} | {cov_c:.3f} | "
              f"{rec_c:.3f} | {stops} |")
    print("\nEvery run was reverted afterwards; the active set equalled the uncompressed one each time.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
