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
    # k = 1 at the default reserve (3) returns the latest-dated match; with no reserve, the best.
    assert main(["query", "--data", str(data), "expense limit 900 euros", "--k", "1", "--json"]) == 0
    assert [r["reason"] for r in json.loads(capsys.readouterr().out)] == ["reserve"]
    assert main(["query", "--data", str(data), "expense limit 900 euros", "--k", "1", "--reserve", "0", "--json"]) == 0
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
