"""bench.footprint refuses what it cannot measure before it starts any server."""

from __future__ import annotations

import pytest

from bench import footprint


@pytest.mark.parametrize("argv", [["--tree", "{tmp}"], ["--starts", "0"], ["--docs", "-1"]])
def test_a_tree_without_orgmem_or_a_count_under_one_is_refused(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(footprint, "one_start", lambda *a: pytest.fail("a server was started"))
    with pytest.raises(SystemExit) as stop:
        footprint.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert stop.value.code == 2 and ("not an orgmem source tree" in capsys.readouterr().err or "--tree" not in argv)


def test_the_documents_are_distinct_and_dated_in_order():
    docs = footprint.documents(30)
    assert len({d["source_id"] for d in docs}) == 30
    assert [d["date"] for d in docs] == sorted(d["date"] for d in docs)
