"""The web console end to end: Debian's headless Chromium, driven by Playwright, against a real
server (uvicorn around a real memory, the in-process maintenance runner) holding a small
organization ingested through the API.

With ORGMEM_CONSOLE_SCREENSHOTS=<folder> the flow also writes a 1280x800 screenshot of each page
there (`docs/img/console-*.png` are made so).
"""

from __future__ import annotations

import json
import os
import re
from datetime import date
from pathlib import Path

import httpx
import pytest

from tests.conftest import create_key

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright for Python (the test extra)")

OLD = "Remote work policy: every team may work remotely 2 days per week, decided by Maria."
NEW = "Remote work policy: every team may work remotely 3 days per week from July, decided by Maria."
XSS = 'Quarterly payload review <img src=x onerror="window.__xss=1;alert(1)"> <script>window.__xss=2</script>'
ORGANIZATION = [
    {"text": "Kick-off of the hybrid office project; the remote work policy will be reviewed this year.",
     "author": "li", "date": "2025-01-15", "kind": "email", "thread": "hybrid-office"},
    {"text": OLD, "author": "maria", "date": "2025-03-10", "kind": "email", "thread": "remote-work",
     "title": "Remote work policy"},
    {"text": "The on-call rotation for the payments team changes every Monday at 09:00.",
     "author": "kim", "date": "2025-04-01", "kind": "ticket"},
    {"text": "The on-call rotation for the payments team changes every Monday at 09:00!",
     "author": "lee", "date": "2025-04-03", "kind": "ticket"},
    {"text": "Travel expenses above 500 euros need director approval.", "author": "ops", "date": "2025-05-02"},
    {"text": NEW, "author": "maria", "date": "2025-06-16", "kind": "email", "thread": "remote-work",
     "title": "Remote work policy (revised)"},
    {"text": XSS, "author": "mallory", "date": "2025-05-20", "kind": "doc", "thread": "<b>payload</b>",
     "title": '<img src=y onerror="window.__xss=3">'},
]
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--no-first-run"]
SCREENSHOTS = os.environ.get("ORGMEM_CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


class Console:
    """One browser tab on the console; fails the test on any page error or CSP violation."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.page = self.context.new_page()
        self.url = url
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", lambda msg: self.problems.append(f"console {msg.type}: {msg.text}")
                     if msg.type == "error" and "401" not in msg.text and "403" not in msg.text else None)
        self.page.on("dialog", self._dialog)
        self.requests: list[tuple[str, str | None]] = []
        self.page.on("request", lambda r: self.requests.append((r.url, r.headers.get("authorization"))))
        self.page.on("response", lambda r: self.problems.append(f"{r.status} {r.url}")
                     if r.status == 404 else None)
        self.page.set_default_timeout(20_000)

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, hash_: str = "") -> None:
        self.page.goto(f"{self.url}/console{hash_}")

    def log_in(self, key: str) -> None:
        self.page.fill("#api-key", key)
        self.page.click("#login-form button[type=submit]")

    def go(self, hash_: str) -> None:
        self.page.evaluate("h => { location.hash = h; }", hash_)

    def snap(self, name: str) -> None:
        """A page is done: nothing on it reads like a value the code lost; its screenshot, if asked for."""
        shown = self.page.locator("body").inner_text()
        assert not re.search(r"\b(null|undefined|NaN)\b|\[object Object\]", shown), (name, shown)
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SCREENSHOTS) / f"console-{name}.png"))

    def hits(self) -> list[str]:
        return self.page.locator("#results .hit .text").all_text_contents()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser, live_server):
    tab = Console(browser, live_server.url)
    yield tab
    tab.close()


def ingest(server, documents) -> list[str]:
    answer = server.client.post("/v1/documents", json={"documents": documents})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    server.client.post("/v1/query", json={"q": "policy", "after": body["position"]})  # indexed now
    return body["row_ids"]


def day_index(value: str) -> int:
    return date.fromisoformat(value).toordinal() - date(1970, 1, 1).toordinal()


def move_slider(page, to_day: str) -> None:
    """Click the as-of slider's track where the day lies, as a user would."""
    slider = page.locator("#as-of")
    low, high = int(slider.get_attribute("min")), int(slider.get_attribute("max"))
    box = slider.bounding_box()
    fraction = (day_index(to_day) - low) / (high - low)
    page.mouse.click(box["x"] + 8 + fraction * (box["width"] - 16), box["y"] + box["height"] / 2)


def wait_text(page, selector: str, pattern: str, timeout: float = 20_000) -> None:
    page.locator(selector).filter(has_text=re.compile(pattern)).first.wait_for(timeout=timeout)


def test_the_console_pages_against_a_real_server(console, live_server, settings):
    server, page = live_server, console.page
    ids = ingest(server, ORGANIZATION)
    old_id, new_id, xss_id = ids[1], ids[5], ids[6]

    console.open()
    assert page.locator("#login").is_visible() and not page.locator("#nav").is_visible()
    console.log_in(server.token)
    page.locator("#q").wait_for()
    assert page.evaluate("() => sessionStorage.getItem('orgmem.console.key')") == server.token
    assert server.token not in page.url

    # Search now: the revised policy answers; each hit shows date, author, kind, thread and legs.
    page.fill("#q", "remote work policy days per week")
    page.click("form.search button[type=submit]")
    revised = page.locator(f"#results .hit[data-row-id='{new_id}']")
    revised.wait_for()
    header = revised.locator("header").text_content()
    assert "2025-06-16" in header and "maria" in header and "email" in header and "remote-work" in header
    assert re.search(r"lex (#\d+|–)", revised.locator("footer").inner_text())
    assert "vec #" in revised.locator("footer").inner_text()
    assert any("3 days" in t for t in console.hits())
    # The older version says what replaced it: the API's `version` note, or its superseded_by.
    api_hit = next(h for h in server.client.post("/v1/query", json={"q": "remote work policy days per week", "k": 10})
                   .json()["rows"] if h["row_id"] == old_id)
    note = page.locator(f"#results .hit[data-row-id='{old_id}'] .version").inner_text()
    if api_hit.get("version"):
        assert note.startswith("version 1 of 2") and f"superseded by {new_id} on 2025-06-16" in note
    else:
        assert note == f"superseded by {api_hit['superseded_by']}"
    assert page.locator("#as-of").is_enabled()
    assert page.locator("#as-of").get_attribute("min") == str(day_index("2025-01-15"))
    assert page.locator("#as-of-label").inner_text().startswith("now")
    console.snap("search")

    # As of mid-April the revised policy did not exist yet: the older version answers instead.
    with page.expect_response(lambda r: r.url.endswith("/v1/query")) as asked:
        move_slider(page, "2025-04-20")
    # What the console asked and what the server answered, before what the page shows of it.
    body, answer = asked.value.request.post_data_json, asked.value.json()
    assert body.get("as_of", "").startswith("2025-04"), body
    assert not any("3 days" in hit["text"] for hit in answer["rows"]), (body, [
        (hit["row_id"], hit["date"], hit["reason"], hit["text"][:40]) for hit in answer["rows"]])
    wait_text(page, "#search-status", r"as of 2025-04")
    texts = console.hits()
    assert not any("3 days" in t for t in texts), (texts, console.requests[-5:])
    shown = page.locator("#results .hit").evaluate_all("hits => hits.map(h => h.dataset.rowId)")
    assert old_id in shown and new_id not in shown
    assert any("2 days" in t for t in texts)
    console.snap("search-as-of")
    # Known at a time before anything was ingested: nothing was known then.
    page.fill("#known-at", "2001-01-01T00:00")
    wait_text(page, "#search-status", r"known at 2001")
    assert console.hits() == []
    page.click("#known-at-clear")
    page.locator("#results .hit").first.wait_for()

    # The thread's timeline: both versions in date order, and a word diff between them.
    console.go("#/thread/remote-work")
    page.locator("#timeline > li").nth(1).wait_for()
    versions = page.locator("#timeline > li")
    assert [versions.nth(i).get_attribute("data-row-id") for i in range(2)] == [old_id, new_id]
    assert "maria changed" in versions.nth(1).locator(".change").inner_text()
    removed, added = page.locator("#diff del").all_text_contents(), page.locator("#diff ins").all_text_contents()
    assert "2" in removed and "3" in added and "July" in "".join(added) and "Maria" not in "".join(removed + added)
    page.select_option("#diff-from", "1")
    page.select_option("#diff-to", "0")
    assert "2" in page.locator("#diff ins").all_text_contents()
    page.select_option("#diff-from", "0")
    page.select_option("#diff-to", "1")
    console.snap("thread")

    # A row's history, reached from the timeline.
    versions.nth(0).locator(f"a[href='#/row/{old_id}']").first.click()
    page.locator("#history tbody tr").first.wait_for()
    assert page.locator("#row-text").inner_text() == OLD
    assert page.locator("#history tbody tr").first.locator("td").nth(2).inner_text() == "observed"

    # A refine run: started with its settings, watched until finished, its decisions, then reverted.
    before = {rid: server.client.get(f"/v1/rows/{rid}").json()["row"]["state"] for rid in ids}
    console.go("#/runs")
    page.locator("#start-refine").wait_for()
    page.fill("#budget-fraction", "0.7")
    page.click("#start-refine")
    wait_text(page, "#live-status", r"^finished$", timeout=120_000)
    run_id = page.locator("#live-run-id").inner_text()
    assert run_id.startswith("refine-")
    run = server.client.get(f"/v1/admin/maintenance/runs/{run_id}").json()
    assert run["status"] == "finished" and run["params"]["budget_fraction"] == 0.7 and run["events"] >= 1
    page.click(f"[data-decisions='{run_id}']")
    page.locator("#decision-table tbody tr").first.wait_for()
    changes = page.locator("#decision-table tbody tr td:first-child").all_text_contents()
    assert len(changes) == run["events"] and set(changes) <= {"archived", "derived", "superseded"}
    console.snap("maintenance")
    page.click(f"[data-revert='{run_id}']")
    wait_text(page, f"[data-run-status='{run_id}']", r"^reverted$", timeout=120_000)
    assert page.locator("#live-status").inner_text() == "finished"  # the revert run itself
    assert server.client.get(f"/v1/admin/maintenance/runs/{run_id}").json()["status"] == "reverted"
    assert {rid: server.client.get(f"/v1/rows/{rid}").json()["row"]["state"] for rid in ids} == before
    assert page.locator(f"[data-revert='{run_id}']").count() == 0  # a reverted run offers no revert
    # The row the run archived: its history shows the run's decision and the revert's.
    revert_id = page.locator("#live-run-id").inner_text()
    [decision] = server.client.get(f"/v1/admin/maintenance/runs/{run_id}/decisions").json()["decisions"]
    page.click(f"#decision-table a[href='#/row/{decision['row_id']}']")
    page.locator("#history tbody tr").nth(2).wait_for()
    history = [row.locator("td").all_text_contents() for row in page.locator("#history tbody tr").all()]
    assert [(h[2], h[3], h[5]) for h in history] == [("observed", "active", ""), ("archived", "archived", run_id),
                                                      ("restored", "active", revert_id)]
    console.snap("row")
    # From the history to the run that made a change: its status and its decisions.
    page.click(f"#history a[href='#/runs/{run_id}']")
    wait_text(page, "#live-status", r"^reverted$")
    page.locator("#decision-table tbody tr").first.wait_for()

    # A dead letter: a ticket dated past the accepted window, run through the connector route.
    inbox = Path(settings.data_dir) / "inbox" / "default"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "tickets.json").write_text(json.dumps([
        {"key": "OPS-1", "fields": {"summary": "bad date", "created": "9999-12-31T23:00:00-05:00"}}]))
    ran = server.client.post("/v1/connectors/tickets", json={"paths": [str(inbox / "tickets.json")]})
    assert ran.status_code == 200 and len(ran.json()["dead_letters"]) == 1
    console.go("#/dead-letters")
    page.locator("#dead-letters tbody tr").first.wait_for()
    cells = page.locator("#dead-letters tbody tr").first.locator("td").all_text_contents()
    assert cells[1] == "tickets" and cells[2].endswith("tickets.json#OPS-1") and "accepted dates" in cells[3]
    assert page.locator("#dead-letter-count").inner_text().startswith("1 item")
    console.snap("dead-letters")

    # Stats and the indexer's lag.
    console.go("#/stats")
    wait_text(page, "#ready-status", r"^ready$")
    wait_text(page, "#lag", r"^0$")  # the page asks again every 2 s; the connector run's events get indexed
    counts = dict(zip(page.locator("#row-counts tbody td:first-child").all_text_contents(),
                      page.locator("#row-counts tbody td:last-child").all_text_contents(), strict=True))
    assert counts == {k: str(v) for k, v in server.client.get("/v1/stats").json()["rows"].items()}
    console.snap("stats")

    # The hostile document: shown as text on every page, never run.
    console.go("#/search")
    page.fill("#q", "quarterly payload review")
    page.click("form.search button[type=submit]")
    page.locator(f"#results .hit[data-row-id='{xss_id}']").wait_for()
    hit = page.locator(f"#results .hit[data-row-id='{xss_id}']")
    assert hit.locator(".text").inner_text() == XSS
    assert hit.locator(".title").inner_text() == ORGANIZATION[6]["title"]
    assert XSS in page.locator("#evidence").text_content()
    for hash_ in (f"#/row/{xss_id}", "#/thread/" + "%3Cb%3Epayload%3C%2Fb%3E"):
        console.go(hash_)
        page.locator("#row-text, #timeline .text").first.wait_for()
        assert page.locator("#row-text, #timeline .text").first.inner_text() == XSS
        assert page.locator("main img, main script, main b").count() == 0
    page.wait_for_timeout(300)  # an onerror handler would have run by now
    assert page.evaluate("() => window.__xss") is None
    assert console.dialogs == []
    assert console.problems == []
    # Every read went to the HTTP API with the key as a bearer credential, and no URL held the key.
    reads = [(url, auth) for url, auth in console.requests if not url.startswith(f"{server.url}/console")]
    assert reads and all(url.startswith((f"{server.url}/v1/", f"{server.url}/readyz")) for url, _ in reads), reads
    assert all(auth == f"Bearer {server.token}" for _, auth in reads)
    assert not any(server.token in url or server.token.split("_", 2)[2] in url for url, _ in console.requests)


def test_a_wrong_key_shows_the_apis_error_and_a_reader_sees_no_admin_pages(console, live_server, settings):
    page = console.page
    console.open()
    console.log_in("om_0123456789ab_not-a-real-secret")
    wait_text(page, "#login-error", r"401")
    error = page.locator("#login-error").inner_text()
    problem = httpx.get(live_server.url + "/v1/stats",
                        headers={"Authorization": "Bearer om_0123456789ab_not-a-real-secret"}).json()
    assert error == f"401 {problem['title']}: {problem['detail']}"
    assert page.evaluate("() => sessionStorage.getItem('orgmem.console.key')") is None
    assert page.locator("#login").is_visible()
    console.snap("login-error")

    reader = create_key(settings.data_dir, role="reader", principal="rita")
    page.fill("#api-key", reader)
    page.click("#login-form button[type=submit]")
    page.locator("#q").wait_for()
    assert page.locator("#nav a[data-page=search]").is_visible()
    assert not page.locator("#nav a[data-page=runs]").is_visible()
    console.go("#/stats")  # typed in by hand: the API refuses it, and the page says so
    wait_text(page, "main .error", r"^403 ")
    page.click("#logout")
    assert page.locator("#login").is_visible()
    assert page.evaluate("() => sessionStorage.length") == 0
    assert console.problems == []


def test_console_responses_carry_a_strict_csp_and_serve_only_their_files(live_server):
    page = httpx.get(live_server.url + "/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.text), "no inline script"
    assert not re.search(r"\son[a-z]+=", page.text), "no inline handlers"
    script = httpx.get(live_server.url + "/console/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert script.headers["content-security-policy"] == csp
    for name in ("search.js", "diff.js", "app.css"):
        assert httpx.get(live_server.url + f"/console/{name}").status_code == 200
    for bad in ("/console/..%2F..%2Fapp.py", "/console/%2e%2e", "/console/routes", "/console/nope.js"):
        assert httpx.get(live_server.url + bad).status_code == 404, bad
    static = Path(__file__).resolve().parents[2] / "services" / "api" / "console" / "static"
    for path in static.glob("*.js"):  # no way for data to become markup or code
        assert not re.search(r"\.(inner|outer)HTML|insertAdjacentHTML|document\.write|\beval\(|new Function",
                             path.read_text()), path.name
