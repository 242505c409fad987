"""RowStore contract, export side: `page` walks every row once in (ingest position, row id) order,
per tenant or for all, and `histories` reads many rows' histories at once. Every adapter."""

from tests.contract.test_row_store import make_row, observed, store  # noqa: F401  (`store` is the fixture)


def _fill(store):  # noqa: F811
    rows = [make_row(i, tenant="t" if i % 3 else "u") for i in range(1, 13)]
    # Two rows at one ingest position (a batch's derived rows may share one): the row id orders them.
    rows.append(make_row(99, row_id="r0-same-position", ingest_position=4))
    store.apply([observed(r) for r in rows], [], 20)
    archived = rows[0].model_copy(update={"state": "archived"})
    store.apply([observed(archived, "archived", position=21)], [], 21)
    return rows


def test_pages_visit_every_row_of_a_tenant_once_in_order(store):  # noqa: F811
    rows = _fill(store)
    for tenant, size in ((t, n) for t in ("t", "u", None) for n in (1, 2, 3)):  # pages that split position 4
        want = sorted((r for r in rows if tenant is None or r.tenant == tenant),
                      key=lambda r: (r.ingest_position, r.row_id))
        seen, after = [], None
        while page := store.page(tenant, after, size):
            assert len(page) <= size
            seen += page
            after = (page[-1].ingest_position, page[-1].row_id)
        assert [r.row_id for r in seen] == [r.row_id for r in want]
    assert store.page("nobody", None, 10) == []
    assert store.page("t", (10_000, ""), 10) == []
    assert next(r for r in store.page("t", None, 100) if r.row_id == "r1").state == "archived"


def test_histories_of_many_rows_at_once(store):  # noqa: F811
    rows = _fill(store)
    histories = store.histories([r.row_id for r in rows] + ["missing"])
    assert "missing" not in histories and set(histories) == {r.row_id for r in rows}
    assert [h.change for h in histories["r1"]] == ["observed", "archived"]
    assert histories["r1"] == store.history("r1")
    assert store.histories([]) == {}
