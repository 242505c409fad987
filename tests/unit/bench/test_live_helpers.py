"""The pure helpers of the live benchmark (bench/live.py): percentiles, targets, the table, pacing,
Prometheus text, ingest lag, slow queries during builds, the mixed stream and the 1M rows' vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import live_report as lr
from bench.live_corpus import as_pass, document_stream, interleave
from schemas.documents import DocumentIn


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))  # 1..100
    assert lr.percentile(values, 50) == 50
    assert lr.percentile(values, 95) == 95
    assert lr.percentile(values, 99) == 99
    assert lr.percentile(values, 100) == 100
    assert lr.percentile([7.0], 99) == 7.0
    assert lr.percentile([], 50) is None
    assert lr.percentile([3, 1, 2], 50) == 2  # order of the input does not matter


def test_latency_summary_rounds_and_handles_empty():
    summary = lr.latency_summary([10.04, 20.06, 30.0, 400.0])
    assert summary == {"n": 4, "p50_ms": 20.1, "p95_ms": 400.0, "p99_ms": 400.0, "max_ms": 400.0}
    assert lr.latency_summary([]) == {"n": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}


def test_verdict_says_by_how_much_a_target_is_missed():
    assert lr.verdict(19.9, 20) == "met"
    assert lr.verdict(20.0, 20) == "met"
    assert lr.verdict(23.3, 20) == "MISSED by 3.3 ms"
    assert lr.verdict(None, 20) == "n/a"
    line = lr.target_line("p95 at 100,000 rows", 61.0, 50)
    assert "target <= 50 ms" in line and "measured 61 ms" in line and line.endswith("MISSED by 11.0 ms")


def test_table_aligns_columns_and_prints_missing_figures_as_na():
    text = lr.render_table(("rows", "p50 ms", "graph rows"), [(10_000, 12.345, None), (100_000, 9.0, 5)])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1  # every line as wide
    assert lines[2].split() == ["10,000", "12.3", "n/a"]
    assert lines[3].split() == ["100,000", "9.0", "5"]
    assert set(lines[1].replace(" ", "")) == {"-"}


class FakeClock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_pacer_sends_batches_at_the_rate():
    clock = FakeClock()
    pacer = lr.Pacer(rate=20, batch=10, clock=clock, sleep=clock.sleep)  # a batch every 0.5 s
    sent_at = []
    for _ in range(5):
        pacer.wait()
        sent_at.append(clock.now)
        clock.now += 0.1  # the request itself
    assert sent_at == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])


def test_pacer_catches_up_a_slow_request_but_never_bursts_more_than_its_backlog():
    clock = FakeClock()
    pacer = lr.Pacer(rate=10, batch=1, clock=clock, sleep=clock.sleep, max_backlog_s=1.0)  # every 0.1 s
    pacer.wait()
    clock.now += 5.0  # one request took 5 s: 49 batches are overdue
    immediate = 0
    while True:
        before = clock.now
        pacer.wait()
        if clock.now > before:
            break
        immediate += 1
    assert immediate == 11  # one backlog second of batches (and the one due now), not 49


def test_pacer_refuses_a_zero_rate():
    with pytest.raises(ValueError):
        lr.Pacer(rate=0, batch=10)


METRICS = """# HELP orgmem_rows Rows by state
# TYPE orgmem_rows gauge
orgmem_rows{state="active"} 1200.0
orgmem_rows{state="archived"} 3.0
orgmem_vector_graph_rows 1000.0
orgmem_http_request_seconds_bucket{le="0.01",route="/v1/query"} 5.0
garbage line without value x
"""


def test_metrics_are_parsed_and_summed_over_labels():
    parsed = lr.parse_metrics(METRICS)
    assert lr.metric(parsed, "orgmem_vector_graph_rows") == 1000.0
    assert lr.metric(parsed, "orgmem_rows") == 1203.0
    assert lr.metric(parsed, "orgmem_vector_exact_rows") is None  # absent: printed as n/a
    assert lr.metric(parsed, "orgmem_row") is None  # a prefix of another name is not that metric


def test_ack_log_lag_in_events_and_seconds():
    acks = lr.AckLog()
    assert acks.lag(applied=0, now=5.0) == (0, 0.0)
    acks.record(10, when=1.0)
    acks.record(20, when=2.0)
    acks.record(30, when=3.0)
    assert acks.lag(applied=30, now=9.0) == (0, 0.0)
    assert acks.lag(applied=15, now=4.5) == (15, 2.5)  # position 20, acknowledged at 2.0, is the oldest unapplied
    assert acks.lag(applied=0, now=4.0) == (30, 3.0)


def test_slow_queries_are_attributed_to_builds_only_when_they_overlap_one():
    samples = [(10.0, 0), (11.0, 1), (12.0, 1), (13.0, 0), (20.0, None)]
    windows = lr.build_windows(samples, slack_s=1.0)
    assert windows == [(10.0, 12.0), (11.0, 13.0)]
    queries = [(11.5, 11.9, 400.0),  # slow, during the build
               (2.0, 2.3, 300.0),  # slow, long before it
               (12.0, 12.01, 10.0)]  # fast, during it
    assert lr.slow_queries(queries, 250.0, windows) == (2, 1)
    assert lr.slow_queries(queries, 250.0, []) == (2, 0)


def test_disk_and_rss_of_real_files_and_this_process(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(b"x" * 100_000)
    assert lr.disk_bytes(tmp_path) >= 100_000
    assert lr.disk_bytes(tmp_path / "missing") == 0
    import os

    own = lr.rss_bytes(os.getpid())
    assert own is not None and own > 10 * 2**20
    assert lr.tree_rss_bytes(os.getpid()) >= own
    assert lr.rss_bytes(2**22 + 12345) is None  # no such process


def test_cpu_time_of_a_process_and_of_its_children_living_and_ended():
    import os
    import subprocess
    import sys

    before = lr.tree_cpu_seconds(os.getpid())
    # A child that names itself with a space and a ")" (the command name /proc/PID/stat's fields
    # are parsed around), spins for 0.3 s of CPU, then waits to be killed.
    code = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'odd ) name', 0, 0, 0); t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\nprint('spun', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spun"
        assert Path(f"/proc/{child.pid}/comm").read_text().strip() == "odd ) name"
        own, _ = lr.cpu_seconds(child.pid)
        assert own >= 0.25
        assert lr.tree_cpu_seconds(os.getpid())[1] - before[1] >= 0.25  # a living child counts
    finally:
        child.kill()
        child.wait()
    assert lr.tree_cpu_seconds(os.getpid())[1] - before[1] >= 0.25  # and one waited for, too
    assert lr.cpu_seconds(child.pid) is None and lr.tree_cpu_seconds(2**22 + 12345) is None
    assert lr.cores(10.0, 11.5, 3.0) == 0.5
    assert lr.cores(None, 1.0, 3.0) is None and lr.cores(1.0, 2.0, 0.0) is None


def test_interleave_spreads_each_source_over_the_whole():
    big, small = [f"b{i}" for i in range(9)], ["s0", "s1", "s2"]
    mixed = interleave([big, small])
    assert sorted(mixed) == sorted(big + small)
    positions = [mixed.index(s) for s in small]
    assert positions[0] < 4 and 4 <= positions[1] <= 7 and positions[2] >= 8  # one per third
    assert [m for m in mixed if m.startswith("b")] == big  # each source keeps its order


def test_later_passes_are_distinct_documents_with_the_same_words():
    doc = DocumentIn(text="the budget moved", author="ann", source="locomo", source_id="c1:D1:1", thread="s1")
    assert as_pass(doc, 0) is doc
    again = as_pass(doc, 2)
    assert again.text == "[pass 2] the budget moved"
    assert again.source_id != doc.source_id and again.thread != doc.thread and again.author == "ann"
    stream = document_stream([doc, doc.model_copy(update={"source_id": "c1:D1:2"})])
    first_five = [next(stream) for _ in range(5)]
    assert len({d.source_id for d in first_five}) == 5
    assert first_five[4].text.startswith("[pass 2] ")


def test_the_stream_never_claims_a_connector_source():
    from services.core.write_rules import is_connector_source

    mail = DocumentIn(text="hello", source="email", source_id="<a@b>")
    (posted,) = [next(document_stream([mail]))]
    assert posted.source == "bench-email" and not is_connector_source(posted.source)
    assert posted.source_id == mail.source_id


def test_perturbed_vectors_are_deterministic_unit_and_close_to_their_base():
    from bench.live_store import perturbed

    rng = np.random.default_rng(0)
    base = rng.standard_normal(384).astype(np.float32)
    base /= np.linalg.norm(base)
    one, same, other_row, other_seed = perturbed(base, 17, 5), perturbed(base, 17, 5), perturbed(base, 17, 6), \
        perturbed(base, 18, 5)
    assert np.array_equal(one, same)
    assert not np.array_equal(one, other_row) and not np.array_equal(one, other_seed)
    assert one.dtype == np.float32 and abs(float(np.linalg.norm(one)) - 1) < 1e-5
    assert 0.95 < float(one @ base) < 0.9999  # near its base, not equal to it


def test_the_1m_base_keeps_one_document_per_text_and_author_and_copies_stay_distinct():
    from bench.live_store import Base, distinct_texts, row_document

    docs = [DocumentIn(text="ok", author="Ann", source="jira", source_id="A-1", thread="A-1"),
            DocumentIn(text=" ok ", author="ann ", source="jira", source_id="A-2"),  # a repeat: stored once
            DocumentIn(text="ok", author="bob", source="jira", source_id="B-1")]
    kept = distinct_texts(docs)
    assert [d.source_id for d in kept] == ["A-1", "B-1"]
    base = Base(kept, np.zeros((2, 4), dtype=np.float32), [])
    rows = [row_document(base, i) for i in range(4)]
    assert len({(d.author.lower(), d.text) for d in rows}) == 4 and len({d.source_id for d in rows}) == 4
    assert rows[2].text == "[copy 1] ok" and rows[2].thread == "A-1#copy1"


def test_paired_queries_ask_each_question_under_both_presets_first_in_turn():
    import httpx

    from bench.live_compare import compare_targets, paired_queries

    asked = []

    def answer(request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(request.content)
        asked.append((body["q"], body.get("preset")))
        return httpx.Response(200, json={"timings_ms": {"embed": 1.0 if body.get("preset") else 2.0}})

    client = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://bench")
    mine, theirs = paired_queries(client, iter(["q1", "q2", "q3"]), 3, None, "paper-orgmembench")
    assert asked == [("q1", None), ("q1", "paper-orgmembench"), ("q2", "paper-orgmembench"), ("q2", None),
                     ("q3", None), ("q3", "paper-orgmembench")]
    assert [q[4]["embed"] for q in mine] == [2.0, 2.0, 2.0]  # each side keeps its own answers
    assert theirs["preset"] == "paper-orgmembench" and theirs["n"] == 3 and theirs["embed_p50_ms"] == 1.0
    row = {"rows": 100_000, "p50_ms": 24.0, "compared": {**theirs, "p50_ms": 20.5}}
    assert compare_targets(None, row)[0].endswith("MISSED by 0.5 ms")
    assert compare_targets(None, {**row, "compared": None}) == []
    # With the rules as the compared side, the target is their cost: on minus off, at most 2 ms.
    rules = {"rows": 100_000, "p50_ms": 20.0, "compared": {"preset": "people_rules + time_rules", "p50_ms": 22.5}}
    assert compare_targets(None, rules, 2.0)[0].startswith("p50 with people_rules + time_rules minus without")
    assert compare_targets(None, rules, 2.0)[0].endswith("MISSED by 0.5 ms")
    assert compare_targets(None, {**rules, "compared": {**rules["compared"], "p50_ms": 21.0}}, 2.0)[0].endswith("met")


def test_settling_asks_again_when_the_server_drops_a_connection_and_stops_when_it_exits():
    import subprocess

    import httpx

    from bench.live_server import EXACT_ROWS_METRIC, GRAPH_ROWS_METRIC
    from bench.live_store import settle

    calls = {"readyz": 0}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readyz":
            calls["readyz"] += 1
            if calls["readyz"] == 1:  # the first answer is lost, as under a long interpreter stall
                raise httpx.ReadError("Connection reset by peer", request=request)
            return httpx.Response(200, json={"status": "ready", "log_head": 5, "applied_position": 5})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=f"{GRAPH_ROWS_METRIC} 10\n{EXACT_ROWS_METRIC} 0\n")
        return httpx.Response(200, json={"rows": {"active": 10}})

    client = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://bench")
    server = subprocess.Popen(["sleep", "30"])
    try:
        now, _ = settle(client, server, exact_max=0, timeout_s=30)
        assert calls["readyz"] == 2 and now["status"] == "ready" and now["graph_rows"] == 10
        server.kill()
        server.wait()
        calls["readyz"] = 0
        with pytest.raises(RuntimeError, match="exited"):
            settle(client, server, exact_max=0, timeout_s=30)
    finally:
        server.kill()
        server.wait()


def test_queries_of_a_quiet_window_are_kept_out_of_the_live_figures():
    queries = [(0.0, 0.1, 10.0), (4.9, 5.2, 11.0), (6.0, 6.1, 12.0), (9.9, 10.1, 13.0), (12.0, 12.1, 14.0)]
    # A pause from 5 to 10 s: a query that overlaps it at either edge is not a live one.
    assert [q[2] for q in lr.outside(queries, [(5.0, 10.0)])] == [10.0, 14.0]
    assert lr.outside(queries, []) == queries


def test_targets_print_the_same_runs_figure_with_nothing_ingested_beside_the_live_one():
    from bench.live_output import live_targets, quiet_cell

    row = {"rows": 100_000, "p50_ms": 25.6, "p95_ms": 51.7, "quiet_n": 900, "quiet_p50_ms": 12.0,
           "quiet_p95_ms": 16.5}
    p50, p95, slow = live_targets([row], [(0.0, 0.3, 300.0)], [{"t": 0.0, "building": 0.0}], 1.0)
    assert p50.endswith("MISSED by 5.6 ms (same store, same run, nothing ingested: 12.0 ms)")
    assert p95.endswith("MISSED by 1.7 ms (same store, same run, nothing ingested: 16.5 ms)")
    assert slow.endswith("measured 0: met") and "(1 over it in all)" in slow  # outside any build
    assert quiet_cell(row) == "12.0 / 16.5"
    assert quiet_cell({"quiet_error": "the projections did not settle"}) == "the projections did not settle"
    unpaused = live_targets([{"rows": 10, "p50_ms": 5.0, "p95_ms": 9.0}], [], [], 1.0)
    assert unpaused[0].endswith(": met") and unpaused[1].endswith(": met")


@pytest.mark.parametrize("quiet", ["-5", "nan", "soon"])
def test_a_quiet_window_of_negative_or_no_length_is_refused_before_any_server_starts(quiet, capsys):
    from bench.live import main

    with pytest.raises(SystemExit) as exit_:
        main(["--minutes", "1", "--quiet-s", quiet])
    assert exit_.value.code == 2 and "--quiet-s" in capsys.readouterr().err


def _query_loop(args, stop_after: int, answer_for):
    """A LiveRun of the questions q1, q2 whose reader is answered by `answer_for(body)` until
    `stop_after` queries were asked; (run, asked bodies) once its query loop has stopped."""
    import json
    import threading
    from types import SimpleNamespace

    import httpx

    from bench.live import LiveRun

    asked = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body)
        if len(asked) >= stop_after:
            run.stop.set()
        return httpx.Response(200, json=answer_for(body))

    run = LiveRun(args, SimpleNamespace(url="http://bench"), {"writer": "w", "reader": "r", "admin": "a"},
                  iter([]), ["q1", "q2"])
    run.reader = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://bench")
    worker = threading.Thread(target=run.query_loop)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive()
    return run, asked


def test_a_live_run_asks_each_question_under_both_presets_and_keeps_their_answers_apart(capsys):
    from types import SimpleNamespace

    from bench.live_output import print_live_comparison

    args = SimpleNamespace(preset=None, compare_preset="paper-orgmembench", compare_rules=False, warmup=1, rows=10)
    run, bodies = _query_loop(args, 8, lambda body: {"timings_ms": {"embed": 1.0 if body.get("preset") else 2.0}})
    asked = [(body["q"], body.get("preset")) for body in bodies]
    # The pair's first alternates; the first pair is the warm-up, kept by neither side.
    assert asked == [("q1", None), ("q1", "paper-orgmembench"), ("q2", "paper-orgmembench"), ("q2", None),
                     ("q1", None), ("q1", "paper-orgmembench"), ("q2", "paper-orgmembench"), ("q2", None)]
    assert [q[4]["embed"] for q in run.queries] == [2.0, 2.0, 2.0]
    assert [q[4]["embed"] for q in run.compared] == [1.0, 1.0, 1.0]
    compared = run.compared_figures(run.compared)
    assert compared["preset"] == "paper-orgmembench" and compared["n"] == 3
    row = {"rows": 100_000, "n": 3, "p50_ms": 24.0, "p95_ms": 30.0, "compared": {**compared, "p50_ms": 20.0},
           "quiet_p50_ms": 18.0, "quiet_compared_p50_ms": 16.5}
    print_live_comparison(None, row)
    out = capsys.readouterr().out
    assert "MISSED by 1.0 ms" in out and "nothing ingested (the quiet window)" in out and "(difference 1.5)" in out
    assert "the same questions (3) under both" in out
    print_live_comparison(None, {**row, "n": 4})  # stopped mid-pair: each side's own count
    assert "the same questions (4 and 3) under both" in capsys.readouterr().out
    args.compare_preset = None
    assert run.compared_figures(run.compared) is None


@pytest.mark.parametrize("flag", ["--preset", "--compare-preset"])
def test_an_unknown_preset_is_refused_before_any_server_starts(flag, capsys):
    from bench.live import main

    with pytest.raises(SystemExit) as exit_:
        main(["--minutes", "1", flag, "paper-orgmembench'; DROP"])
    assert exit_.value.code == 2 and f"{flag}: unknown preset" in capsys.readouterr().err


def test_with_compare_rules_each_question_is_also_asked_with_the_rules_on():
    from types import SimpleNamespace

    args = SimpleNamespace(preset=None, compare_preset=None, compare_rules=True, warmup=0, rows=10)
    run, bodies = _query_loop(args, 4, lambda body: {"timings_ms": {"embed": 3.0 if body.get("people_rules") else 2.0}})
    asked = [(body["q"], body.get("people_rules", False), body.get("time_rules", False)) for body in bodies]
    assert asked == [("q1", False, False), ("q1", True, True), ("q2", True, True), ("q2", False, False)]
    assert [q[4]["embed"] for q in run.compared] == [3.0, 3.0]
    assert run.compared_figures(run.compared)["preset"] == "people_rules + time_rules"
