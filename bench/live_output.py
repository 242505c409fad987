"""What `bench.live` prints in live mode: the table's header and cells, the target lines (each
with the same run's no-ingest figure beside it), the closing summary."""

from __future__ import annotations

from bench import live_report as lr
from bench.live_compare import print_comparison
from bench.live_server import BUILD_RUNNING_METRIC

SLOW_MS = 250.0  # a query over this while a graph build runs misses the live target
LIVE_TARGETS = (("p50", 20.0), ("p95", 50.0))
LIVE_HEADERS = ("rows", "docs sent", "min", "rows/s", "queries", "p50 ms", "p95 ms", "p99 ms", "max ms",
                f">{SLOW_MS:g} ms", "no ingest p50 / p95", "retrieval ms", "versions ms", "vector ms", "graph rows", "exact rows",
                "lag events", "max lag s", "cores: server / children / client", "RSS MiB", "with children MiB",
                "disk MiB")


def live_cells(row: dict) -> list:
    return [row["rows"], row["docs_sent"], row["minutes"], row["rows_per_s"], row["n"], row["p50_ms"], row["p95_ms"],
            row["p99_ms"], row["max_ms"], row["slow"], quiet_cell(row), row["retrieval_p50_ms"], row["versions_p50_ms"],
            row["vector_p50_ms"], row["graph_rows"], row["exact_rows"],
            row["lag_events"], row["max_lag_s"], cores_cell(row), row["rss_mib"], row["tree_rss_mib"], row["disk_mib"]]


def cores_cell(row: dict) -> str:
    return " / ".join("n/a" if (v := row.get(f"{part}_cores")) is None else f"{v:.2f}"
                      for part in ("server", "children", "client"))


def quiet_cell(row: dict) -> str:
    if "quiet_n" not in row:
        return row.get("quiet_error", "n/a")
    return f"{lr.fmt(row['quiet_p50_ms'])} / {lr.fmt(row['quiet_p95_ms'])}"


def quiet_beside(row: dict, name: str) -> str:
    if row.get(f"quiet_{name}_ms") is None:
        return ""
    return f" (same store, same run, nothing ingested: {lr.fmt(row[f'quiet_{name}_ms'])} ms)"


def live_targets(rows: list[dict], queries: list[tuple], samples: list[dict], sample_s: float) -> list[str]:
    last = rows[-1] if rows else {}
    at = f"at {last.get('rows', 0):,} rows (last window; the target is stated for 100,000)"
    lines = [lr.target_line(f"{name} {at}", last.get(f"{name}_ms"), limit) + quiet_beside(last, name)
             for name, limit in LIVE_TARGETS]
    if any(s["building"] is not None for s in samples):
        windows = lr.build_windows([(s["t"], s["building"]) for s in samples], sample_s)
        slow, during = lr.slow_queries([q[:3] for q in queries], SLOW_MS, windows)
        name = f"queries over {SLOW_MS:g} ms during a graph build ({slow} over it in all)"
    else:
        during = lr.slow_queries([q[:3] for q in queries], SLOW_MS, [])[0]
        name = (f"queries over {SLOW_MS:g} ms (no {BUILD_RUNNING_METRIC} in /metrics: every slow query "
                "counts as caused by a build)")
    lines.append(f"{name}: target 0, measured {during}: " + ("met" if during == 0 else f"MISSED by {during}"))
    return lines



def print_live_comparison(preset: str | None, row: dict, rules_ms: float | None = None) -> None:
    """Both sides' figures of one table line, live and (after its quiet window) with nothing ingested."""
    print_comparison(preset, row, rules_ms)
    if row.get("quiet_compared_p50_ms") is not None and row.get("quiet_p50_ms") is not None:
        print(f"  nothing ingested (the quiet window): {preset or 'the server default'} p50 "
              f"{lr.fmt(row['quiet_p50_ms'])}, {row['compared']['preset']} p50 {lr.fmt(row['quiet_compared_p50_ms'])} ms "
              f"(difference {lr.fmt(round(row['quiet_p50_ms'] - row['quiet_compared_p50_ms'], 1))})", flush=True)


def print_summary(report: dict) -> None:
    print(f"\nload average at start {report['load_average_at_start']}, at end {report['load_average_at_end']} "
          f"({report['cpus']} CPUs)")
    if report.get("notice"):
        print(report["notice"])
    if "queries_all" in report:
        q = report["queries_all"]
        print(f"all {q['n']} queries while ingest ran ({report['questions']} questions): p50 {lr.fmt(q['p50_ms'])}, p95 "
              f"{lr.fmt(q['p95_ms'])}, p99 {lr.fmt(q['p99_ms'])}, max {lr.fmt(q['max_ms'])} ms; errors: ingest "
              f"{report['ingest_errors'] or 'none'}, query {report['query_errors'] or 'none'}")
    if other := report.get("compared_all"):
        print(f"the same questions under {other['preset']}, alternating: p50 {lr.fmt(other['p50_ms'])}, p95 "
              f"{lr.fmt(other['p95_ms'])}, p99 {lr.fmt(other['p99_ms'])}, max {lr.fmt(other['max_ms'])} ms")
    burst = report.get("throughput")
    if burst and "error" not in burst:
        print(lr.render_table(("documents/s", f"burst of {burst['documents']:,} fresh documents"), [
            (burst["raw_encoder_docs_per_s"], f"raw encoder ({burst['raw_encoder']})"),
            (burst["pipeline_docs_per_s"], "whole pipeline through HTTP, until the projections hold them "
                                           f"({lr.fmt(burst['server_encoder_processes'])} encoder processes)"),
            (f"{burst['ratio']:.3f}", "ratio")]))
    elif burst:
        print(f"throughput: {burst['error']}")
    print("\ntargets:")
    for line in report["targets"]:
        print("  " + line)


