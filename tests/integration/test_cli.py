"""The command line on a real data folder: JSONL ingest with bad lines, query, stats, rebuild."""

import json

import pytest

from services.cli.main import main

pytestmark = pytest.mark.slow


def test_jsonl_ingest_reports_bad_lines_and_keeps_the_rest(tmp_path, capsys):
    data = tmp_path / "data"
    lines = [
        json.dumps({"text": "Expense limit set to 900 euros per trip.", "author": "cfo@corp.example", "date": "2025-03-01"}),
        "{this is not json",
        json.dumps({"text": "Expense limit raised to 1200 euros per trip.", "author": "coo@corp.example", "date": "2025-09-01"}),
        json.dumps({"author": "no text here"}),
        json.dumps({"text": "Unknown field", "colour": "red"}),
        "",
    ]
    source = tmp_path / "docs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    assert main(["ingest", "--data", str(data), "--jsonl", str(source)]) == 0
    captured = capsys.readouterr()
    assert f"{source}:2:" in captured.err and f"{source}:4: text: Field required" in captured.err
    assert f"{source}:5: colour: Extra inputs are not permitted" in captured.err
    assert "appended 2 documents" in captured.out

    assert main(["query", "--data", str(data), "expense limit per trip", "--as-of", "2025-06-01", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["text"] for r in rows] == ["Expense limit set to 900 euros per trip."]
    # k = 1 at the paper's reserve (3) returns the latest-dated match; with no reserve, the best.
    assert main(["query", "--data", str(data), "expense limit 900 euros", "--k", "1", "--preset", "paper-orgmembench",
                 "--json"]) == 0
    assert [r["reason"] for r in json.loads(capsys.readouterr().out)] == ["reserve"]
    assert main(["query", "--data", str(data), "expense limit 900 euros", "--k", "1", "--reserve", "0",
                 "--preset", "paper-orgmembench", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["reason"], r["text"]) for r in rows] == [("fused", "Expense limit set to 900 euros per trip.")]

    assert main(["rebuild", "--data", str(data)]) == 0
    capsys.readouterr()
    assert main(["stats", "--data", str(data)]) == 0
    stats = json.loads(capsys.readouterr().out)
    # The log holds the two documents and the audited rebuild; the projections have applied it all.
    assert stats["rows"]["active"] == 2 and stats["log_head"] == stats["applied_position"] == 3


def test_a_second_process_cannot_take_the_projections(tmp_path, capsys):
    from services.bootstrap import DataFolderLock
    from services.errors import OrgmemError

    lock = DataFolderLock(tmp_path)
    try:
        with pytest.raises(OrgmemError, match="in use by another orgmem process"):
            DataFolderLock(tmp_path)
    finally:
        lock.release()
    DataFolderLock(tmp_path).release()


def test_query_takes_the_api_options(tmp_path, capsys):
    data = tmp_path / "data"
    docs = [
        {"text": "Travel budget set to 900 euros per trip.", "author": "cfo@corp.example", "date": "2025-03-01",
         "thread": "travel", "kind": "email"},
        {"text": "Travel budget raised to 1200 euros per trip.", "author": "coo@corp.example", "date": "2025-09-03",
         "thread": "travel", "kind": "ticket"},
        {"text": "Budget for the offsite is approved.", "author": "ceo@corp.example", "date": "2025-05-01",
         "thread": "offsite", "kind": "email", "tags": ["travel"]},
    ]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert main(["ingest", "--data", str(data), "--jsonl", str(source)]) == 0
    capsys.readouterr()

    def query(*options):
        assert main(["query", "--data", str(data), "travel budget", "--reserve", "0", "--preset", "paper-orgmembench",
                     "--json", *options]) == 0
        return json.loads(capsys.readouterr().out)

    assert len(query()) == 3
    lexical = query("--weights", "lex=1,tag=0,vec=0")
    assert sorted(r["text"] for r in lexical) == sorted(d["text"] for d in docs[:2])
    assert all(set(r["leg_ranks"]) == {"lex"} for r in lexical)
    tags = query("--weights", "lex=0,vec=0")  # the tag leg alone: thread or tag "travel"
    assert len(tags) == 3 and all(set(r["leg_ranks"]) == {"tag"} for r in tags)
    assert len(query("--weights", "lex=1,tag=0,vec=0", "--disjunctive")) == 3  # "budget" alone matches the offsite
    assert len(query("--weights", "lex=1,tag=0,vec=0", "--conjunctive")) == 2
    assert len(query("--weights", "lex=1,tag=0,vec=0", "--lexical-match", "any")) == 3
    assert len(query("--weights", "lex=1,tag=0,vec=0", "--lexical-match", "adaptive")) == 2  # 2 terms: both needed
    assert len(query("--candidates", "1", "--weights", "lex=1,tag=0,vec=0")) == 1
    assert [r["kind"] for r in query("--kinds", "ticket")] == ["ticket"]
    assert {r["author"] for r in query("--authors", "cfo@corp.example", "--authors", "ceo@corp.example")} == \
        {"cfo@corp.example", "ceo@corp.example"}
    travel = query("--threads", "travel", "--selector", "pursuit")
    assert {r["thread"] for r in travel} == {"travel"} and {r["reason"] for r in travel} == {"pursuit"}
    versions = {r["text"]: r["version"] for r in travel}
    assert versions[docs[0]["text"]]["index"] == 1 and versions[docs[0]["text"]]["count"] == 2
    assert versions[docs[0]["text"]]["superseded_on"].startswith("2025-09-03")

    assert main(["query", "--data", str(data), "travel budget", "--threads", "travel"]) == 0
    assert "version 1 of 2, superseded by r" in capsys.readouterr().out
    assert main(["query", "--data", str(data), "travel budget", "--weights", "lex=0,tag=0,vec=0"]) == 2
    assert "weights: every leg has weight 0" in capsys.readouterr().err
    for bad in ("lex", "lex=x", "bm25=1", "vec=nan", "vec=-1"):
        with pytest.raises(SystemExit):
            main(["query", "--data", str(data), "travel budget", "--weights", bad])
        assert "weights" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["query", "--data", str(data), "x", "--conjunctive", "--disjunctive"])
    capsys.readouterr()
