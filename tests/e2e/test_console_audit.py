"""The console's stats page links to the audit trail (issue 41): Playwright and Debian's headless
Chromium against a real server; the page shows the tenant's acts as GET /v1/admin/audit gives
them, and a kind picked narrows it."""

from __future__ import annotations

# Its marks too: slow, and skipped without Chromium (and without Playwright, at import).
from tests.e2e.test_console import Console, browser, pytestmark, wait_text  # noqa: F401 (browser: the fixture)


def test_the_stats_page_links_to_the_audit_trail(browser, live_server):  # noqa: F811
    made = live_server.client.post("/v1/admin/keys", json={"principal": "bot", "role": "reader"})
    assert made.status_code == 201
    assert live_server.client.get("/v1/admin/export").status_code == 200
    console = Console(browser, live_server.url)
    try:
        page = console.page
        console.open()
        console.log_in(live_server.token)
        page.locator("#q").wait_for()
        console.go("#/stats")
        page.locator("#audit-link").click()
        page.locator("#audit tbody tr").first.wait_for()
        assert page.evaluate("() => location.hash") == "#/audit"
        api = live_server.client.get("/v1/admin/audit", params={"limit": 500}).json()["entries"]
        shown = [cells.split("\t") for cells in page.locator("#audit tbody tr").all_inner_texts()]
        assert [row[2] for row in shown] == [e["action"] for e in api] == ["export", "export.started", "key.created"]
        assert shown[2][3] == api[2]["actor"] and "principal bot" in shown[2][4]
        assert page.locator("#audit-count").inner_text() == "3 acts"
        page.select_option("#audit-kind", "key")
        wait_text(page, "#audit-count", r"^1 act$")
        assert page.evaluate("() => location.hash") == "#/audit/key"
        assert page.locator("#audit tbody tr td:nth-child(3)").all_inner_texts() == ["key.created"]
        asked = [url for url, _ in console.requests if "/v1/admin/audit" in url]
        assert "since=" in asked[-1] and "kind=key" in asked[-1]  # the last 30 days by default
        with page.expect_request(lambda r: "/v1/admin/audit" in r.url) as again:
            page.select_option("#audit-period", "")  # all time: no since
        assert "since=" not in again.value.url and "kind=key" in again.value.url
        wait_text(page, "#audit-count", r"^1 act$")
        console.snap("audit")
        assert console.problems == []
    finally:
        console.close()
