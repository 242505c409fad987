"""`orgmem maintenance consolidate|refine|runs|revert`: maintenance runs on a data folder.

The command opens the data folder itself (as the server would), so it refuses while a server
holds it; against a running server use the admin API instead. The judge comes from the
settings: a model when ORGMEM_JUDGE_BASE_URL and ORGMEM_JUDGE_MODEL are set, else the rule judge.
"""

from __future__ import annotations

import json
import sys

from services.cli.common import settings_from


def _print_progress(progress: dict) -> None:
    parts = ", ".join(f"{k}={v}" for k, v in progress.items() if not isinstance(v, dict))
    print(f"  {parts}", file=sys.stderr)


def _show(run: dict) -> int:
    print(json.dumps(run, indent=1, default=str))
    return 0 if run["status"] in ("finished", "reverted") else 1


def _run(args, job: str, params: dict) -> int:
    from services.app.task_runner import run_job
    from services.bootstrap import maintenance_for, open_memory

    settings = settings_from(args)
    with open_memory(settings) as memory:
        service = maintenance_for(settings, memory, owns_runs=settings.profile == "embedded")
        try:
            return _show(run_job(service, job, args.tenant, params, args.requested_by, progress=_print_progress).view())
        finally:
            service.close()


def cmd_consolidate(args) -> int:
    return _run(args, "consolidate", {"tau": args.tau, "max_calls": args.max_calls})


def cmd_refine(args) -> int:
    return _run(args, "refine", {"budget_fraction": args.budget, "budget_bytes": args.budget_bytes,
                                 "max_calls": args.max_calls, "min_similarity": args.min_similarity,
                                 "use_cache": not args.no_cache})


def cmd_revert(args) -> int:
    args.tenant = None  # the run names its tenant
    return _run(args, "revert", {"reverts": args.run})


def cmd_runs(args) -> int:
    from services.bootstrap import maintenance_for, open_memory

    settings = settings_from(args)
    with open_memory(settings) as memory:
        service = maintenance_for(settings, memory, owns_runs=settings.profile == "embedded")
        found = [run.view() for run in service.runs(args.tenant)]
        service.close()
    if args.json:
        print(json.dumps(found, indent=1, default=str))
        return 0
    print(f"{'run':<40} {'job':<12} {'tenant':<12} {'status':<9} {'events':>6}  judge / summary")
    for run in found:
        summary = run["summary"]
        brief = summary.get("stop_reason") or summary.get("error") or summary.get("reverts") or ""
        extra = f" reverted by {run['reverted_by']}" if run["reverted_by"] else ""
        print(f"{run['run_id']:<40} {run['job']:<12} {run['tenant']:<12} {run['status']:<9} {run['events']:>6}  "
              f"{run['judge'] or '-'} {brief}{extra}")
    return 0


def register(command, sub) -> None:
    group = sub.add_parser("maintenance", help="consolidation and MemRefine runs: start, list, revert")
    jobs = group.add_subparsers(dest="maintenance_command", required=True)

    def job(name, handler, help_):
        p = jobs.add_parser(name, help=help_)
        p.add_argument("--data", default=None, help="data folder (default ./orgmem-data or ORGMEM_DATA_DIR)")
        p.add_argument("--requested-by", default="cli", help="who asked, recorded with the run")
        p.set_defaults(handler=handler)
        return p

    p = job("consolidate", cmd_consolidate, "link versions of a fact, merge restatements (Mem++ Algorithm 2)")
    p.add_argument("--tenant", default="default")
    p.add_argument("--tau", type=float, default=0.85, help="cosine to a group's first row (default 0.85)")
    p.add_argument("--max-calls", type=int, default=None, help="at most this many groups judged")
    p = job("refine", cmd_refine, "MemRefine: bring the tenant's active rows within a storage budget")
    p.add_argument("--tenant", default="default")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=float, help="fraction of the current active size, e.g. 0.7")
    budget.add_argument("--budget-bytes", type=int, help="absolute size in bytes (JSON of the rows)")
    p.add_argument("--max-calls", type=int, default=None, help="at most this many pairs judged")
    p.add_argument("--min-similarity", type=float, default=0.0, help="never propose pairs below this cosine")
    p.add_argument("--no-cache", action="store_true", help="judge again pairs an earlier run preserved")
    p = job("runs", cmd_runs, "list runs with status, judge and result")
    p.add_argument("--tenant", default=None, help="only this tenant's runs")
    p.add_argument("--json", action="store_true")
    p = job("revert", cmd_revert, "undo a run by appending inverse events (the active set returns to before it)")
    p.add_argument("run", help="the run id")
