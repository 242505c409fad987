"""The speed a live server has: query latency while it ingests, its memory and disk, to 1M rows.

    .venv/bin/python -m bench.live [--rows 100000 | --minutes M] [--rate 20] [--batch 10] [--every 10000]
    .venv/bin/python -m bench.live --scale 1m [--rows 1000000] [--every 100000] [--data DIR] [--optimize]

A script, not a timed test (issue 17). `orgmem serve` runs as a process on a fresh data folder under
/tmp with its default settings (ORGMEM_* variables of this shell reach it), except a per-key rate
limit that admits the run's own clients (RATE_LIMIT: the limiter stays on the request path).

Live (default): one client ingests the mixed stream of bench/live_corpus.py (LoCoMo, QMSum, BEAM,
Enron, the synthetic organisation) through POST /v1/documents at --rate documents/s, --batch per
request, until --rows documents are sent (or --minutes pass); another sends the LoCoMo questions
to POST /v1/query one after the other (the server embeds each). The run ends when the projections
hold every acknowledged document. Every --every rows a line: query p50/p95/p99 since the last line
(client side, embedding included), queries over 250 ms, vector rows in the graph and searched
exactly (/metrics; the names are constants at the top of bench/live_server.py), ingest lag
(acknowledged log position against the projections' checkpoint: events now, the longest wait in
seconds since the last line), the server's RSS and the data folder's disk. After each line, ingest
pauses: once the projections hold every acknowledged document and no graph build runs,
the queries of the next --quiet-s seconds are the same run's baseline (same server, store and
questions, nothing ingested), printed beside the live figures; then ingest resumes. Then the pipeline's
throughput on a burst of fresh documents, beside one raw encoder's on the same texts in this
process, and the targets. With --compare-preset each question is asked under both presets, the
pair's first alternating, and each line also prints the other preset's figures, live and in the
quiet window, and the difference of the p50s (issue 18's bar: at most 3 ms). Figures and per-line details (embed and vector stage medians, RSS with
child processes, graph builds) go to --out as JSON.

--scale 1m: the store is built at the adapter level (bench/live_store.py: it measures latency and
memory, not quality); at every --every rows the real server is started on it and measures query
p50/p95/p99 (the organisation's questions, embedding included), RSS and disk.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench import live_report as lr
from bench.live_burst import throughput
from bench.live_compare import compare_targets, query_figures
from bench.live_output import (
    LIVE_HEADERS,
    SLOW_MS,
    live_cells,
    live_targets,
    print_live_comparison,
    print_summary,
)
from bench.live_server import (
    Server,
    client,
    create_keys,
    disk_parts,
    sample,
    stage_p50,
    stages_line,
    stages_of,
    timed_query,
)

OUT = Path(__file__).resolve().parent / "out" / "live"
RULES = {"people_rules": True, "time_rules": True}
RULES_LABEL = "people_rules + time_rules"
RULES_P50_MS = 2.0  # issue 42: the rules on may cost at most this much p50
WORK = Path(tempfile.gettempdir()) / "orgmem-live"  # extracted Enron mail, generated organisations, base vectors


class LiveRun:
    """Three clients of one server: the paced ingester, the sequential querier and a sampler of its
    state, until the rows or minutes run out; a table line every `every` rows."""

    def __init__(self, args, server: Server, keys: dict[str, str], stream, questions: list[str]):
        self.args, self.server, self.stream, self.questions = args, server, stream, questions
        self.writer, self.reader, self.admin = (client(server.url, keys[r]) for r in ("writer", "reader", "admin"))
        self.stop = threading.Event()
        self.paused, self.ingest_idle = threading.Event(), threading.Event()  # the quiet windows
        self.paused_spans: list[tuple[float, float]] = []  # (pause, quiet window's end): no live figure
        self.acks, self.queries, self.samples = lr.AckLog(), [], []
        self.compared: list[tuple] = []  # --compare-preset's answers to the same questions
        self.sent, self.ingest_errors, self.query_errors = 0, {}, {}
        self.last_ingest_error = ""
        self.budget = args.rows  # documents the ingester may send
        self.lock = threading.Lock()
        self.began = time.monotonic()

    def _error(self, errors: dict, what) -> None:
        with self.lock:
            errors[str(what)] = errors.get(str(what), 0) + 1

    def ingest_loop(self) -> None:
        pacer = lr.Pacer(self.args.rate, self.args.batch)
        while not self.stop.is_set():
            if self.paused.is_set():
                self.ingest_idle.set()
                time.sleep(0.1)
                continue
            self.ingest_idle.clear()
            if self.sent >= self.budget:
                time.sleep(0.2)
                continue
            pacer.wait()
            docs = [next(self.stream) for _ in range(min(self.args.batch, self.budget - self.sent))]
            try:
                response = self.writer.post("/v1/documents", json={
                    "documents": [d.model_dump(mode="json", exclude_defaults=True) for d in docs]})
            except httpx.HTTPError as exc:
                self._error(self.ingest_errors, type(exc).__name__)
                time.sleep(1)
                continue
            if response.status_code == 200:
                with self.lock:
                    self.acks.record(response.json()["position"], time.monotonic())
                    self.sent += len(docs)
            else:
                self._error(self.ingest_errors, response.status_code)
                self.last_ingest_error = response.text[:500]
                time.sleep(float(response.headers.get("Retry-After", 1)))

    def query_loop(self) -> None:
        """The questions one after the other; with --compare-preset each under both presets, the
        pair's first alternating (as `live_compare.paired_queries`), each preset's answers kept apart."""
        asks = [(self.args.preset, None, self.queries)]
        if self.args.compare_preset:
            asks.append((self.args.compare_preset, None, self.compared))
        elif self.args.compare_rules:  # the same preset, with the question's people and time read
            asks.append((self.args.preset, RULES, self.compared))
        for n, question in enumerate(itertools.cycle(self.questions)):
            for preset, extra, kept in asks if n % 2 == 0 else asks[::-1]:
                if self.stop.is_set():
                    return
                self._ask(question, preset, extra, kept, keep=n >= self.args.warmup)

    def _ask(self, question: str, preset: str | None, extra: dict | None, kept: list, keep: bool) -> None:
        try:
            query = timed_query(self.reader, question, preset, extra)
        except httpx.HTTPError as exc:
            self._error(self.query_errors, type(exc).__name__)
            time.sleep(1)
            return
        if query[3] != 200:
            self._error(self.query_errors, query[3])
            time.sleep(0.1)
        elif keep:
            with self.lock:
                kept.append(query)

    def compared_figures(self, queries: list[tuple]) -> dict | None:
        label = self.args.compare_preset or (RULES_LABEL if self.args.compare_rules else None)
        return {"preset": label, **query_figures(queries)} if label else None

    def sample_loop(self) -> None:
        while not self.stop.is_set():
            try:
                now = sample(self.admin, self.server.proc.pid)
            except httpx.HTTPError:
                self.stop.wait(self.args.sample_s)
                continue
            with self.lock:
                now["lag_events"], now["lag_s"] = self.acks.lag(now["applied"], now["t"])
            self.samples.append(now)
            self.stop.wait(self.args.sample_s)

    def acknowledged(self) -> int:
        with self.lock:
            return self.acks.acks[-1][0] if self.acks.acks else 0

    def quiet_window(self) -> dict:
        """Ingest paused; once a sample taken after the pause shows the projections holding every
        acknowledged document and no graph build running, the queries of the next quiet_s seconds:
        what this store answers with nothing ingested, measured in the same run as the live figures."""
        paused = time.monotonic()
        self.paused.set()
        try:
            deadline = paused + self.args.catch_up_s
            while True:
                if time.monotonic() > deadline or self.server.proc.poll() is not None:
                    self.paused_spans.append((paused, time.monotonic()))  # no live figure either
                    return {"quiet_error": "the projections did not settle"}
                time.sleep(0.5)
                last = self.samples[-1]
                if (self.ingest_idle.is_set() and last["t"] > paused
                        and last["applied"] >= self.acknowledged() and not last["building"]):
                    break
            began = time.monotonic()
            self.stop.wait(self.args.quiet_s)
            ended = time.monotonic()
        finally:
            self.paused.clear()
        self.paused_spans.append((paused, ended))
        with self.lock:
            window = [q for q in self.queries if q[0] >= began and q[1] <= ended]
            compared = self.compared_figures([q for q in self.compared if q[0] >= began and q[1] <= ended])
        summary = lr.latency_summary([q[2] for q in window])
        return {"quiet_n": summary["n"], "quiet_p50_ms": summary["p50_ms"], "quiet_p95_ms": summary["p95_ms"],
                "quiet_retrieval_p50_ms": stage_p50(window, None), "quiet_settle_s": round(began - paused, 1),
                "quiet_compared_p50_ms": compared and compared["p50_ms"], "quiet_stages_ms": stages_of(window)}

    def live_queries(self, queries: list[tuple] | None = None) -> list[tuple]:
        """The queries (default: --preset's) sent while ingest ran (none from a pause to the end
        of its quiet window)."""
        with self.lock:
            return lr.outside(self.queries if queries is None else queries, self.paused_spans)

    def report_row(self, since: float, last: dict, previous: dict | None, paused_s: float) -> dict:
        with self.lock:
            window = [q for q in self.queries if q[0] >= since]  # `since`: after the last quiet window
            compared = self.compared_figures([q for q in self.compared if q[0] >= since])
            sent = self.sent
        samples = [s for s in self.samples if s["t"] >= since]
        first = samples[0] if samples else last  # CPU per window: from its first sample to its last
        windows = lr.build_windows([(s["t"], s["building"]) for s in self.samples], self.args.sample_s)
        slow, slow_building = lr.slow_queries([q[:3] for q in window], SLOW_MS, windows)
        span = last["t"] - (previous["t"] if previous else self.began) - paused_s
        rows_added = last["rows"] - (previous["rows"] if previous else 0)
        return {"rows": last["rows"], "docs_sent": sent, "minutes": round((last["t"] - self.began) / 60, 1),
                "rows_per_s": round(rows_added / span, 1) if span > 0 else None,
                **lr.latency_summary([q[2] for q in window]), "slow": slow, "slow_during_build": slow_building,
                "embed_p50_ms": stage_p50(window, "embed"), "vector_p50_ms": stage_p50(window, "vector"),
                "retrieval_p50_ms": stage_p50(window, None), "versions_p50_ms": stage_p50(window, "versions"),
                "stages_ms": stages_of(window),
                "graph_rows": last["graph_rows"], "exact_rows": last["exact_rows"], "builds": last["builds"],
                "last_build_s": last["last_build_s"], "lag_events": last["lag_events"], "lag_s": last["lag_s"],
                "max_lag_s": max(s["lag_s"] for s in samples) if samples else None,
                **{f"{part}_cores": lr.cores(first.get(f"cpu_{part}"), last.get(f"cpu_{part}"), last["t"] - first["t"])
                   for part in ("server", "children", "client")},
                "rss_mib": lr.mib(last["rss"]), "tree_rss_mib": lr.mib(last["tree_rss"]),
                "disk_mib": disk_parts(self.args.data)["total"], "compared": compared}

    def run(self) -> list[dict]:
        threads = [threading.Thread(target=f, daemon=True)
                   for f in (self.sample_loop, self.ingest_loop, self.query_loop)]
        self.began = time.monotonic()
        for t in threads:
            t.start()
        rows_out, since, previous, next_at, paused_s = [], self.began, None, self.args.every, 0.0
        print(lr.render_table(LIVE_HEADERS, []), flush=True)
        while True:
            time.sleep(0.5)
            if self.server.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.server.log.read_text()[-2000:]}")
            failed = sum(self.ingest_errors.values())
            if failed >= 20 and failed * self.args.batch > self.sent:
                raise RuntimeError(f"ingest fails more often than not ({self.ingest_errors}): {self.last_ingest_error}")
            if not self.samples:
                continue
            last = self.samples[-1]
            out_of_time = bool(self.args.minutes) and last["t"] - self.began >= self.args.minutes * 60
            # Ingest stops at --rows documents; the run ends once the projections hold that many rows.
            caught_up = self.sent >= self.budget and last["applied"] >= self.acknowledged()
            if caught_up and last["rows"] < self.args.rows:
                # Repeats (the same email in two mailboxes, a repeated turn) made no row: send as
                # many more documents as rows are missing.
                self.budget += self.args.rows - last["rows"]
            done = last["rows"] >= self.args.rows or out_of_time
            if last["rows"] >= next_at or done:
                row = self.report_row(since, last, previous, paused_s)
                since, previous, next_at = last["t"], last, (last["rows"] // self.args.every + 1) * self.args.every
                if self.args.quiet_s:
                    row.update(self.quiet_window())
                    since = self.paused_spans[-1][1]
                    paused_s = since - last["t"]
                rows_out.append(row)
                print(lr.render_table(LIVE_HEADERS, [live_cells(row)]).splitlines()[-1], flush=True)
                print(stages_line(row), flush=True)
                if row["compared"]:
                    print_live_comparison(self.args.preset, row, RULES_P50_MS if self.args.compare_rules else None)
            if done:
                break
        self.stop.set()
        for t in threads:
            t.join(timeout=120)
        return rows_out


def run_live(args) -> dict:
    from bench.live_corpus import document_stream, interleave, load_sources, query_questions

    sources = load_sources(args.work)
    print("stream: " + ", ".join(f"{name} {len(docs):,}" for name, docs in sources.items())
          + " documents per pass", file=sys.stderr, flush=True)
    source_name, questions = query_questions(args.work)
    args.data = Path(tempfile.mkdtemp(prefix="data-", dir=args.work))
    keys = create_keys(args.data)
    server = Server(args.data)
    try:
        run = LiveRun(args, server, keys, document_stream(interleave(list(sources.values()))), questions)
        rows = run.run()
        burst = throughput(run, args.throughput_docs, args.catch_up_s) if args.throughput_docs else None
    finally:
        server.stop()
    return {"rows": rows, "throughput": burst, "questions": source_name, "queries_all": lr.latency_summary(
        [q[2] for q in run.live_queries()]), "ingest_errors": run.ingest_errors, "query_errors": run.query_errors,
        "compared_all": run.compared_figures(run.live_queries(run.compared)),
        "targets": live_targets(rows, run.queries, run.samples, args.sample_s)
        + (compare_targets(args.preset, rows[-1], RULES_P50_MS if args.compare_rules else None) if rows else []),
        "sources": {name: len(docs) for name, docs in sources.items()}, "data": str(args.data)}


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def not_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("live", "1m"), default="live")
    parser.add_argument("--rows", type=positive(int), help="stop at this many rows (100000 live, 1000000 at 1m)")
    parser.add_argument("--minutes", type=positive(float), help="live: stop after this long")
    parser.add_argument("--every", type=positive(int), help="a table line every N rows (10000 live, 100000 at 1m)")
    parser.add_argument("--rate", type=positive(float), default=20.0, help="live: documents/s ingested")
    parser.add_argument("--batch", type=positive(int), default=10, help="live: documents per ingest request")
    parser.add_argument("--preset", help="retrieval preset of the queries (default: the server's)")
    parser.add_argument("--warmup", type=int, default=5, help="first queries left out of the figures")
    parser.add_argument("--sample-s", type=positive(float), default=1.0, help="live: seconds between state samples")
    parser.add_argument("--throughput-docs", type=int, default=1000,
                        help="live: fresh documents of the closing throughput burst (0: none)")
    parser.add_argument("--quiet-s", type=not_negative, default=30.0,
                        help="live: seconds of queries with ingest paused after each line (0: no pause)")
    parser.add_argument("--catch-up-s", type=positive(float), default=1800.0)
    parser.add_argument("--work", type=Path, default=WORK, help=f"scratch folder, kept between runs (default {WORK})")
    parser.add_argument("--keep", action="store_true", help="live: keep the data folder")
    parser.add_argument("--data", type=Path, help="1m: the store (default WORK/store-1m; a rerun resumes it)")
    parser.add_argument("--optimize", action="store_true",
                        help="1m: build the vector graph offline (as `orgmem optimize`) before each measurement")
    parser.add_argument("--queries", type=positive(int), default=200, help="1m: queries per measurement")
    parser.add_argument("--compare-preset", metavar="PRESET",
                        help="also ask each question under this preset, alternating with --preset's, and print both")
    parser.add_argument("--compare-rules", action="store_true",
                        help="live: also ask each question with people_rules and time_rules on, alternating, "
                             "and print both (issue 42's cost of the rules)")
    parser.add_argument("--settle-exact", type=int, default=10_000,
                        help="1m: wait until at most this many rows are searched exactly (where /metrics says)")
    parser.add_argument("--graph-wait", type=float, default=1800.0, help="1m: longest wait for that, seconds")
    parser.add_argument("--base-seeds", type=positive(int), default=3, help="1m: organisations in the base")
    parser.add_argument("--seed", type=int, default=17, help="1m: seed of the vectors' noise")
    parser.add_argument("--out", type=Path, help="JSON report (default bench/out/live/<scale>.json)")
    args = parser.parse_args(argv)
    from services.core.retrieval_config import PRESETS

    if args.compare_rules and args.compare_preset:
        parser.error("--compare-rules and --compare-preset: give one")
    for flag, name in (("--preset", args.preset), ("--compare-preset", args.compare_preset)):
        if name is not None and name not in PRESETS:  # else every query of that side is a 422, silently
            parser.error(f"{flag}: unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    # A plain SIGTERM would skip the `finally` blocks that stop the server and remove its folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scale = args.scale == "1m"
    args.rows = args.rows or (1_000_000 if scale else 100_000)
    args.every = args.every or (100_000 if scale else 10_000)
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    load = os.getloadavg()
    if scale:
        from bench.live_store import run_scale

        report = run_scale(args)
    else:
        try:
            report = run_live(args)
        finally:
            if not args.keep and args.data is not None:
                shutil.rmtree(args.data, ignore_errors=True)
    report = {"scale": args.scale, "started": started.isoformat(timespec="seconds"), "cpus": os.cpu_count(),
              "load_average_at_start": [round(v, 2) for v in load], "load_average_at_end":
              [round(v, 2) for v in os.getloadavg()], "args": {k: str(v) for k, v in vars(args).items()}, **report}
    print_summary(report)
    out = args.out or OUT / f"{args.scale}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
