"""The console's people page (issue 42): Playwright and Debian's headless Chromium against a real
server. A reader sees the persons of rows it may read, finds one by prefix, opens their page and
their rows; a person met only in a private group's rows is not listed, and their guessed page
shows the API's 404."""

from __future__ import annotations

from services.core.people import build
from tests.e2e.test_console import Console, browser, pytestmark, wait_text  # noqa: F401 (browser: the fixture)
from tests.e2e.test_people_routes import DOCS, _system, acme_keys, call, served, write


def test_the_people_page_lists_readable_persons_and_opens_their_rows(browser, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    writer, reader, _board = acme_keys(data)
    with served(data) as (server, memory):
        made = write(server, writer, DOCS)
        ids = made["row_ids"]
        assert call(server, writer, "POST", "/v1/query",
                    json={"q": "pricing", "after": made["position"]}).status_code == 200
        secret = [pid for pid, p in build([r for r in memory.rows_in_scope(memory.scope_for(_system("default")))
                                           if r.acl]).items() if p.display_name == "Vera Secret"]
        console = Console(browser, server.url)
        try:
            page = console.page
            console.open()
            console.log_in(reader)
            page.locator("#q").wait_for()
            page.locator("#nav a[data-page=people]").click()
            wait_text(page, "#people-count", r"^3 people$")
            names = page.locator("#people tbody tr td:nth-child(1)").all_inner_texts()
            assert sorted(names) == ["Dana Lee", "Dana Li", "sam@acme.example"]
            assert "Vera" not in page.locator("body").inner_text()
            console.snap("people")

            page.fill("#people-q", "dana li")
            page.click("#people-form button[type=submit]")
            wait_text(page, "#people-count", r"^1 person$")
            page.locator("#people a", has_text="Dana Li").wait_for()

            page.fill("#people-q", "dana@acme.")  # an address prefix ("dana@" is Dana Li's too)
            page.click("#people-form button[type=submit]")
            page.locator("#people a", has_text="Dana Lee").wait_for()  # the new listing, not the last
            assert page.locator("#people-count").inner_text() == "1 person"
            page.locator("#people a", has_text="Dana Lee").click()
            page.locator("#person-name").wait_for()
            assert page.locator("#person-name").inner_text() == "Dana Lee"
            authored = page.locator("#person-author tbody tr td:nth-child(5)").all_inner_texts()
            assert sorted(authored) == sorted(ids[:2])
            assert "author 2" in page.locator("#person-fields").inner_text()
            console.snap("person")
            page.locator("#person-author a.mono", has_text=ids[1]).click()
            page.locator("#row-text").wait_for()
            assert page.locator("#row-text").inner_text() == DOCS[1]["text"]
            assert console.problems == []

            # A private group's person, guessed: the API's 404, and nothing of theirs on the page.
            assert len(secret) == 1
            console.go(f"#/people/{secret[0]}")
            wait_text(page, "p.error", r"^404")
            assert "Vera" not in page.locator("body").inner_text()
            assert [p for p in console.problems if "404" not in p] == []
        finally:
            console.close()
