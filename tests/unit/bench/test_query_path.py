"""bench.query_path refuses what it cannot measure before it starts any server, and its summary
takes the overlapping stages out of "outside retrieval"."""

from __future__ import annotations

import pytest

from bench import query_path


@pytest.mark.parametrize("argv", [["--tree", "{tmp}"], ["--rounds", "0"], ["--queries", "0"], []])
def test_a_tree_without_orgmem_a_folder_without_data_or_a_count_under_one_is_refused(argv, tmp_path, monkeypatch,
                                                                                    capsys):
    monkeypatch.setattr(query_path, "one_round", lambda *a: pytest.fail("a server was started"))
    (tmp_path / "data").mkdir()  # no projections folder: not a data folder
    with pytest.raises(SystemExit) as stop:
        query_path.main(["--data", str(tmp_path / "data"), *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert any(reason in err for reason in ("not an orgmem source tree", "at least 1", "not a data folder"))


def test_outside_retrieval_leaves_out_the_stages_that_overlap_the_embedding():
    samples = [(10.0, {"embed": 3.0, "vector": 2.0, "lexical": 4.0, "rows_lexical": 1.0}),
               (12.0, {"embed": 3.0, "vector": 4.0, "lexical": 5.0, "rows_lexical": 1.0})]
    figures = query_path.summary(samples)
    assert figures["outside retrieval"] == pytest.approx(5.0)
    assert figures["p50"] == pytest.approx(11.0) and figures["vector"] == pytest.approx(3.0)
