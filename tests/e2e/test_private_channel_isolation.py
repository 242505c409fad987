"""Private channels from a Slack export, through every read path of a live server (docs/security.md,
"Private channels from sources").

A generated export holds a public channel, two private channels (A, B) and a DM, each message
carrying a marker unique to its conversation. It goes in over `POST /v1/connectors/slack` with an
access map in the request: Slack users to principals, private channel A to the group `plans-a`.
Three principals then read through their own keys: alice (in A and the DM), bob (in B only, and in
a group that is not A's) and pat (public channels only). Every route of the app's route table is
listed here as reading rows (probed for each of them), text-free (probed: no marker for anyone,
the unrestricted admin included), or exempt with the reason; a route added later fails the table
test until it is listed. The same holds for the MCP tools and resources (listed through the MCP
client), the export (the route and `orgmem export --server`) and the console (the /v1 routes its
scripts call, and the pages themselves in Chromium when it is installed).

A probe passes when the markers found in the answer's bytes (in the forms test_erasure's byte scan
looks for) are ones the caller may read, and the one the probe aimed at is found when the caller
may read it: the member of A must see A's marker, or the test could not fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conftest import LiveServer, create_key, free_port
from tests.integration.test_erasure import _forms
from tests.unit.connectors.sources.chat_fixtures import message, slack_export, ts, write_folder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "services" / "api" / "console" / "static"
RUN = uuid.uuid4().hex[:8]
# One marker per conversation, unique to this run; each ends in a digit, which no stemmer cuts.
MARK = {name: f"zqx{RUN}{name}7" for name in ("public", "chana", "chanb", "dma")}
CHANNEL = {"public": "C01", "chana": "G0A", "chanb": "G0B", "dma": "D0A"}
WHO = {"alice": ("alice@corp.example", ("plans-a",)), "bob": ("bob@corp.example", ("plans-b",)),
       "pat": ("pat@corp.example", ())}
VISIBLE = {"alice": {"public", "chana", "dma"}, "bob": {"public", "chanb"}, "pat": {"public"}}
COMMON = "roadmap review"  # in every conversation: a query for it reaches each row the caller may read
DAY = "2024-03-04"
USERS = [{"id": f"U0{i}", "name": n, "profile": {"display_name": n.title()}}
         for i, n in enumerate(("alice", "bob", "pat", "carol", "dave", "erin"), start=1)]
ACCESS_MAP = {"users": {"U01": "alice@corp.example", "U02": "bob@corp.example", "U03": "pat@corp.example",
                        "U04": "carol@corp.example"},  # U05 (dave) is mapped by nobody: his entry grants nobody
              "groups": {"G0A": "plans-a"}}  # channel A by its group; B and the DM by their members


def export_files() -> dict[str, bytes]:
    def talk(name: str, first: str, second: str, mention: str = "") -> list[dict]:
        root = ts(DAY, 10 * len(name))
        return [message(root, first, f"{COMMON}: the plan {MARK[name]} stands{mention}"),
                message(ts(DAY, 10 * len(name) + 5), second, f"agreed, {COMMON} on Friday", thread_ts=root)]

    return slack_export(
        {"general": {DAY: talk("public", "U01", "U03")}, "plans-a": {DAY: talk("chana", "U01", "U04")},
         "plans-b": {DAY: talk("chanb", "U02", "U05", ", ask <@U06>")}, "D0A": {DAY: talk("dma", "U04", "U01")}},
        users=USERS, channels=[{"id": "C01", "name": "general", "members": ["U01", "U02", "U03", "U04"]}],
        groups=[{"id": "G0A", "name": "plans-a", "members": ["U01", "U04"]},
                {"id": "G0B", "name": "plans-b", "members": ["U02", "U04", "U05"]}],
        mpims=[], dms=[{"id": "D0A", "members": ["U01", "U04"]}])


def markers_in(data: bytes) -> set[str]:
    return {name for name, marker in MARK.items() if any(form in data for form in _forms(marker))}


@dataclass
class Probe:
    label: str
    body: bytes
    aim: str | None = None  # the marker this probe asks for ("*": every marker the caller may read;
    # None: no marker at all; "": any the caller may read)


@dataclass
class World:
    server: LiveServer
    app: object
    data: Path
    export: Path
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # who -> {"reader", "admin"} tokens
    rows: dict[str, str] = field(default_factory=dict)  # marker name -> row id
    run_id: str = ""
    report: dict = field(default_factory=dict)

    def get(self, who: str, path: str, kind: str = "reader", **params) -> httpx.Response:
        return self.server.client.get(path, params=params or None, headers=self.bearer(who, kind))

    def post(self, who: str, path: str, body: dict, kind: str = "reader") -> httpx.Response:
        return self.server.client.post(path, json=body, headers=self.bearer(who, kind))

    def bearer(self, who: str, kind: str) -> dict:
        return {"Authorization": f"Bearer {self.server.token if who == 'admin' else self.keys[who][kind]}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    data = tmp_path_factory.mktemp("private") / "data"
    settings = Settings(data_dir=data, indexer_poll_s=0.05, embedder={"encoder_processes": 1},
                        auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})
    export = write_folder(export_files(), data / "inbox" / "default" / "slack-export")
    admin = create_key(data)
    memory, lock = build_memory(settings)
    app = create_app(settings, memory)
    try:
        with LiveServer(app, free_port(), admin) as server:
            w = World(server, app, data, export)
            for who, (principal, groups) in WHO.items():
                w.keys[who] = {"reader": create_key(data, role="reader", principal=principal, groups=groups),
                               # an admin held to the same access lists: the export and run routes need the role
                               "admin": create_key(data, role="admin", principal=principal, groups=groups,
                                                   unrestricted=False)}
            ran = server.client.post("/v1/connectors/slack", json={"paths": [str(export)], "access_map": ACCESS_MAP})
            assert ran.status_code == 200, ran.text
            w.report = ran.json()
            indexed = server.client.post("/v1/query", json={"q": COMMON, "after": w.report["log_position"], "k": 50})
            assert indexed.status_code == 200, indexed.text
            for hit in indexed.json()["rows"]:
                w.rows.update({name: hit["row_id"] for name in markers_in(hit["text"].encode())})
            started = server.client.post("/v1/admin/maintenance/consolidate", json={})
            assert started.status_code == 202, started.text
            w.run_id = started.json()["run_id"]
            wait_run(server, w.run_id)
            yield w
    finally:
        memory.close()
        lock.release()


def wait_run(server: LiveServer, run_id: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.client.get(f"/v1/admin/maintenance/runs/{run_id}").json()["status"] in ("finished", "failed"):
            return
        time.sleep(0.2)
    raise AssertionError(f"maintenance run {run_id} did not finish")


def test_the_export_went_in_with_its_access_lists(world):
    report = world.report
    assert report["documents"] == 4 and report["dead_letters"] == [] and report["unmapped"] == 1  # dave
    assert set(world.rows) == set(MARK), world.rows  # the unrestricted admin reads every conversation
    acl = {name: world.server.client.get(f"/v1/rows/{row}").json()["row"]["acl"] for name, row in world.rows.items()}
    assert acl["public"] == [] and acl["chana"] == ["group:plans-a"]
    assert acl["chanb"] == ["user:bob@corp.example", "user:carol@corp.example", "user:~slack:U05"]
    assert acl["dma"] == ["user:alice@corp.example", "user:carol@corp.example"]
    # The ingest route's own answer: counts and source ids, never a message.
    assert markers_in(json.dumps(report).encode()) == set()


# --- the route table ----------------------------------------------------------------------------
def route_table(app) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves; a mount (MCP) as ("*", path)."""
    try:  # FastAPI nests included routers; this flattens them as its own router does when it matches
        from fastapi.routing import _iter_included_route_candidates as flat
    except ImportError:  # an older FastAPI keeps them flat already
        flat = iter
    table = set()
    for route in flat(app.routes):
        methods = getattr(route, "methods", None) or {"*"}
        kind = type(route).__name__
        table |= {("*" if kind not in ("APIRoute", "Route") else m, route.path) for m in methods if m != "HEAD"}
    return table


RUN_PATHS = "/v1/admin/maintenance"
READS = {("POST", "/v1/query"), ("GET", "/v1/rows/{row_id}"), ("GET", "/v1/threads/{thread_id:path}"),
         ("GET", "/v1/admin/export"), ("GET", "/v1/people"), ("GET", "/v1/people/{person_id}")}
TEXT_FREE = {("GET", "/v1/stats"), ("GET", "/v1/admin/keys"), ("GET", "/v1/connectors/dead-letters"),
             ("GET", "/v1/admin/audit"),  # acts (keys, exports, runs): who, when, what kind, never a row
             ("GET", f"{RUN_PATHS}/runs"), ("GET", f"{RUN_PATHS}/runs/{{run_id}}"),
             ("GET", f"{RUN_PATHS}/runs/{{run_id}}/decisions")}
ELSEWHERE = {("*", "/mcp"): "the MCP tools and resources: test_every_mcp_tool_and_resource"}
EXEMPT = {
    ("POST", "/v1/documents"): "a write: answers row ids and a log position",
    ("POST", "/v1/answer"): "POST /v1/query's retrieval, then a configured model (501 here); its prompt and "
                            "citations hold only the caller's rows: tests/e2e/test_answer_api.py",
    ("POST", "/v1/connectors/{kind}"): "the ingest itself (run by the fixture); its report is checked to hold no marker",
    ("POST", "/v1/admin/keys"): "creates a key; answers the key",
    ("DELETE", "/v1/admin/keys/{key_id}"): "revokes a key; answers the key",
    ("POST", f"{RUN_PATHS}/consolidate"): "starts a run (the fixture does); answers its id",
    ("POST", f"{RUN_PATHS}/refine"): "starts a run; answers its id",
    ("POST", f"{RUN_PATHS}/runs/{{run_id}}/revert"): "starts a revert; answers its id",
    ("POST", "/v1/admin/projection-holds"): "holds the projector for a backup; answers positions",
    ("DELETE", "/v1/admin/projection-holds/{hold_id}"): "releases a hold",
    ("POST", "/v1/admin/erasures"): "destroys rows (an unrestricted admin only); answers ids and counts",
    ("GET", "/healthz"): "liveness, no row", ("GET", "/readyz"): "positions and lags, no row",
    ("GET", "/metrics"): "counters by route, no row",
    ("GET", "/openapi.json"): "the API's description", ("GET", "/docs"): "the API's description",
    ("GET", "/docs/oauth2-redirect"): "the API's description", ("GET", "/redoc"): "the API's description",
    ("GET", "/console"): "a static page: its data comes from the /v1 routes its scripts call (test_the_console_*)",
    ("GET", "/console/"): "a redirect to /console", ("GET", "/console/{name}"): "the console's static files",
}


def test_every_route_is_probed_or_exempt_with_a_reason(world):
    table = route_table(world.app)
    listed = READS | TEXT_FREE | set(ELSEWHERE) | set(EXEMPT)
    assert table - listed == set(), "routes nobody checked for private-channel isolation: add a probe or a reason"
    assert listed - table == set(), "listed routes the app no longer has"
    schema = world.server.client.get("/openapi.json").json()["paths"]
    # The table's flattening must not miss what the schema lists (a FastAPI upgrade could change it).
    assert {(m.upper(), p) for p, ops in schema.items() for m in ops} <= {(m, re.sub(r":\w+}", "}", p))
                                                                         for m, p in table}
    assert set(PROBES) == READS | TEXT_FREE


# --- the probes, one per route ------------------------------------------------------------------
def _query(w: World, who: str, kind: str) -> list[Probe]:
    probes = []
    for name, marker in MARK.items():
        answer = w.post(who, "/v1/query", {"q": marker, "k": 20}, kind)
        assert answer.status_code == 200, answer.text
        if name not in VISIBLE[who]:
            # Not its text, nor that something matched: the lexical leg counts nothing hidden.
            assert answer.json()["leg_sizes"].get("lex", 0) == 0, (who, name, answer.json()["leg_sizes"])
        probes.append(Probe(f"query {name}", answer.content, name))
    for selector in ("rrf", "pursuit"):
        answer = w.post(who, "/v1/query", {"q": COMMON, "k": 50, "selector": selector, "show_supersession": True}, kind)
        probes.append(Probe(f"query common ({selector})", answer.content, "*"))
    return probes


def _row(w: World, who: str, kind: str) -> list[Probe]:
    probes = []
    for name, row in w.rows.items():
        answer = w.get(who, f"/v1/rows/{row}", kind)
        assert answer.status_code == (200 if name in VISIBLE[who] else 404), (who, name, answer.status_code)
        probes.append(Probe(f"row {name}", answer.content, name))
    return probes


def _thread(w: World, who: str, kind: str) -> list[Probe]:
    return [Probe(f"thread {name}", w.get(who, f"/v1/threads/{CHANNEL[name]}", kind).content, name) for name in MARK]


def _export(w: World, who: str, kind: str) -> list[Probe]:
    answer = w.get(who, "/v1/admin/export", "admin", format="jsonl")
    assert answer.status_code == 200, answer.text
    return [Probe("export route", answer.content, "*")]


# Who wrote in which conversation (export_files): dave writes only in private channel B.
AUTHORS = {"public": {"Alice", "Pat"}, "chana": {"Alice", "Carol"}, "chanb": {"Bob", "Dave"}, "dma": {"Carol", "Alice"}}
# And who is @-mentioned where: erin only in private channel B (the people directory's `mentioned`).
MENTIONED = {"chanb": {"Erin"}}
NAMED = {name: AUTHORS[name] | MENTIONED.get(name, set()) for name in AUTHORS}


def _names(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {alias for person in answer.json()["people"] for alias in [person["display_name"], *person["aliases"]]}


def _people(w: World, who: str, kind: str) -> list[Probe]:
    answer = w.get(who, "/v1/people", kind, limit=500)
    may_know = set().union(*(NAMED[name] for name in VISIBLE[who]))
    # Nobody is listed who wrote or was mentioned only where the caller may not read (pat never
    # learns of Dave or Erin).
    assert {n for n in _names(answer) if n in set().union(*NAMED.values())} == may_know, (who, _names(answer))
    return [Probe("people", answer.content, None)]  # names and counts: no message text


def _person(w: World, who: str, kind: str) -> list[Probe]:
    everyone = w.get("admin", "/v1/people", "admin", limit=500).json()["people"]
    probes = []
    for person in everyone:
        names = {person["display_name"], *person["aliases"]}
        visible = any(names & NAMED[name] for name in VISIBLE[who])
        answer = w.get(who, f"/v1/people/{person['person_id']}", kind)
        assert answer.status_code == (200 if visible else 404), (who, sorted(names), answer.status_code)
        if visible and "Erin" in names:  # never wrote: her page holds the thread that mentions her
            assert list(answer.json()["rows"]) == ["author", "mentioned"], answer.text
            assert [r["row_id"] for r in answer.json()["rows"]["mentioned"]] == [w.rows["chanb"]]
        probes.append(Probe(f"person {person['display_name']}", answer.content, ""))  # its rows' titles: leaks only
    assert len(everyone) >= 5
    return probes


def _text_free(path: str) -> Callable[[World, str, str], list[Probe]]:
    def probe(w: World, who: str, kind: str) -> list[Probe]:
        answer = w.get(who, path.replace("{run_id}", w.run_id), kind)
        if who == "admin" or kind == "admin" and "dead-letters" not in path:
            assert answer.status_code == 200, (who, kind, path, answer.text)
        return [Probe(path, answer.content, None)]
    return probe


PROBES: dict[tuple[str, str], Callable[[World, str, str], list[Probe]]] = {
    ("POST", "/v1/query"): _query, ("GET", "/v1/rows/{row_id}"): _row,
    ("GET", "/v1/threads/{thread_id:path}"): _thread, ("GET", "/v1/admin/export"): _export,
    ("GET", "/v1/people"): _people, ("GET", "/v1/people/{person_id}"): _person,
    **{route: _text_free(route[1]) for route in TEXT_FREE},
}


def judge(who: str, probes: list[Probe]) -> list[str]:
    """What went wrong: a marker the caller may not read, or the one it may read missing."""
    wrong = []
    for probe in probes:
        found = markers_in(probe.body)
        if leaked := found - VISIBLE.get(who, set(MARK)):
            wrong.append(f"{who} {probe.label}: sees {sorted(leaked)}")
        if probe.aim == "*" and found != VISIBLE[who]:
            wrong.append(f"{who} {probe.label}: found {sorted(found)}, may read {sorted(VISIBLE[who])}")
        elif probe.aim and probe.aim != "*" and probe.aim in VISIBLE[who] and probe.aim not in found:
            wrong.append(f"{who} {probe.label}: its own {probe.aim} is missing")
        if probe.aim is None and found:
            wrong.append(f"{who} {probe.label}: a text-free route answered {sorted(found)}")
    return wrong


def test_every_read_route_shows_a_private_channel_to_its_members_only(world):
    wrong, count = [], 0
    for route in sorted(READS | TEXT_FREE):
        for who in WHO:
            for kind in ("reader", "admin"):  # a reader key, and an admin key held to the same access lists
                probes = PROBES[route](world, who, kind)
                count += len(probes)
                wrong += judge(who, probes)
    for route in sorted(TEXT_FREE):  # not even the unrestricted admin finds a message there
        for probe in PROBES[route](world, "admin", "admin"):
            if markers_in(probe.body):
                wrong.append(f"admin {probe.label}: a text-free route holds a marker")
    assert wrong == [], wrong
    assert count > 100


def test_orgmem_export_over_the_server_holds_the_callers_rows_only(world, tmp_path):
    for who in WHO:
        out = tmp_path / f"{who}.jsonl"
        done = subprocess.run([sys.executable, "-m", "services.cli", "export", "--server", world.server.url,
                               "--key", world.keys[who]["admin"], "--out", str(out)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert judge(who, [Probe("orgmem export", out.read_bytes(), "*")]) == []
        assert len(out.read_text().splitlines()) >= len(VISIBLE[who])


# --- MCP ----------------------------------------------------------------------------------------
MCP_EXEMPT = {"add_documents": "a write (the writer role): answers row ids and a position",
              "answer": "POST /v1/answer (exempt in the route table): tests/e2e/test_answer_api.py"}
WINDOW = {"since": "2024-01-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"}


def _tool_bytes(result) -> bytes:
    """What a tool answered; what_changed echoes its question (`q`, the marker asked for), left out."""
    if result.is_error:
        return " ".join(getattr(b, "text", "") for b in result.content).encode()
    return json.dumps({k: v for k, v in result.structured_content.items() if k != "q"}).encode()


async def mcp_probes(w: World, who: str) -> tuple[set[str], set[str], list[Probe]]:
    token = w.keys[who]["reader"]
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(w.server.url + "/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
        probes = []

        async def call(label: str, tool: str, args: dict, aim: str | None) -> None:
            probes.append(Probe(f"mcp {label}", _tool_bytes(await session.call_tool(tool, args)), aim))

        async def resource(label: str, uri: str, aim: str) -> None:
            try:
                body = " ".join(getattr(c, "text", "") for c in (await session.read_resource(uri)).contents)
            except Exception as exc:  # a hidden row is an error, whose text is scanned too
                body = str(exc)
            probes.append(Probe(f"mcp resource {label}", body.encode(), aim))

        await call("search_memory common", "search_memory", {"q": COMMON, "k": 50}, "*")
        await call("what_changed common", "what_changed", {**WINDOW, "q": COMMON, "k": 50}, "*")
        listed = json.loads(_tool_bytes(await session.call_tool("find_people", {"limit": 500})))
        names = {n for p in listed["people"] for n in [p["display_name"], *p["aliases"]]}
        may_know = set().union(*(NAMED[name] for name in VISIBLE[who]))
        # Nobody is listed who wrote or was mentioned only where the caller may not read.
        assert {n for n in names if n in set().union(*NAMED.values())} == may_know, (who, names)
        probes.append(Probe("mcp find_people", json.dumps(listed).encode(), None))
        for name, marker in MARK.items():
            row, channel = w.rows[name], CHANNEL[name]
            await call(f"search_memory {name}", "search_memory", {"q": marker}, name)
            await call(f"get_document {name}", "get_document", {"row_id": row}, name)
            await call(f"get_thread_versions {name}", "get_thread_versions", {"thread": channel}, name)
            await call(f"what_changed thread {name}", "what_changed", {**WINDOW, "thread": channel}, name)
            await call(f"what_changed q {name}", "what_changed", {**WINDOW, "q": marker}, name)
            await resource(f"row {name}", f"orgmem://rows/{row}", name)
            await resource(f"thread {name}", f"orgmem://threads/{channel}", name)
        return tools, templates, probes


MCP_PROBED = {"search_memory", "get_document", "get_thread_versions", "what_changed", "find_people"}
MCP_TEMPLATES = {"orgmem://rows/{row_id}", "orgmem://threads/{thread_id}"}


def test_every_mcp_tool_and_resource(world):
    wrong = []
    for who in WHO:
        tools, templates, probes = anyio.run(mcp_probes, world, who)
        assert tools == MCP_PROBED | set(MCP_EXEMPT), "an MCP tool nobody checked for private-channel isolation"
        assert templates == MCP_TEMPLATES, "an MCP resource nobody checked for private-channel isolation"
        wrong += judge(who, probes)
        assert len(probes) == 3 + 7 * len(MARK)
    assert wrong == [], wrong


# --- the console --------------------------------------------------------------------------------
def console_calls() -> set[tuple[str, str]]:
    """(method, path) of each API call the console's scripts make: `get(...)`/`post(...)` of a
    literal path, a script's `const NAME = "/v1/..."` put in for `${NAME}`, any other `${...}` as "{}"."""
    found = set()
    for script in STATIC.glob("*.js"):
        text = script.read_text(encoding="utf-8")
        constants = dict(re.findall(r"const (\w+) = \"(/[^\"]*)\"", text))
        for method, literal in re.findall(r"\b(get|post)\(\s*[\"'`]((?:/|\$\{\w+\})[^\"'`?]*)", text):
            path = re.sub(r"\$\{(\w+)\}", lambda m: constants.get(m.group(1), "{}"), literal)
            found.add((method.upper(), re.sub(r"\$\{[^}]*\}", "{}", path)))
    return found


def reaches(call: tuple[str, str], routes) -> bool:
    """Whether a call may land on one of these routes: segment by segment, a route's parameter or
    the call's "{}" (a value the script fills in) matches any segment."""
    method, parts = call[0], call[1].split("/")
    for m, path in routes:
        template = path.split("/")
        if m == method and len(template) == len(parts) and all(
                t == c or t.startswith("{") or c == "{}" for t, c in zip(template, parts, strict=True)):
            return True
    return False


def test_the_console_calls_only_probed_routes():
    calls = console_calls()
    assert {("POST", "/v1/query"), ("GET", "/v1/threads/{}"), ("GET", "/v1/admin/maintenance/runs")} <= calls, calls
    unknown = {c for c in calls if not reaches(c, READS | TEXT_FREE | set(EXEMPT))}
    assert unknown == set(), "the console calls routes that the table here does not list"
    # What it reads is probed: a GET under /v1 reaches only routes that read rows or hold no text.
    unprobed = {c for c in calls if c[0] == "GET" and c[1].startswith("/v1/") and not reaches(c, READS | TEXT_FREE)}
    assert unprobed == set(), "the console reads routes that no probe here covers"


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_console_pages_show_a_private_channel_to_its_members_only(world):
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright for Python")
    wrong = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            for who in WHO:
                context = browser.new_context()
                page = context.new_page()
                page.set_default_timeout(20_000)
                page.goto(f"{world.server.url}/console")
                page.fill("#api-key", world.keys[who]["reader"])
                page.click("#login-form button[type=submit]")
                page.locator("#q").wait_for()
                page.fill("#q", COMMON)
                with page.expect_response(lambda r: r.url.endswith("/v1/query")):
                    page.click("form.search button[type=submit]")
                page.locator("#results .hit").first.wait_for()
                page.wait_for_timeout(300)  # the answer is drawn after it arrives
                wrong += judge(who, [Probe("console search", page.content().encode(), "*")])
                for name in MARK:
                    with page.expect_response(lambda r: "/v1/threads/" in r.url):
                        page.evaluate("h => { location.hash = h; }", f"#/thread/{CHANNEL[name]}")
                    page.wait_for_timeout(300)
                    wrong += judge(who, [Probe(f"console thread {name}", page.content().encode(), name)])
                context.close()
        finally:
            browser.close()
    assert wrong == [], wrong


# --- the access map over the API: hostile maps are refused, naming the field ----------------------
def _big_map() -> dict:
    """Over 500,000 entries, about 10 MB of JSON: more entries than a map may hold."""
    return {"users": {f"U{i:07d}": f"u{i}@c.io" for i in range(500_001)}}


@pytest.mark.parametrize(("access_map", "named"), [
    ({"users": {"U01": {"principal": "alice@corp.example"}}}, "users.U01"),  # an object where a string belongs
    ({"users": {"U01": ["alice@corp.example"]}}, "users.U01"),
    ({"users": {"U01": "~slack:U01"}}, "users.U01"),  # the prefix of the entries that grant nobody
    ({"groups": {"G0A": "~"}}, "groups.G0A"),
    ({"users": {"U01": "alice@corp.example\nadmin"}}, "users.U01"),
    ({"users": {"U01": "a" * 129}}, "users.U01"),
    ({"users": {"U01": ""}}, "users.U01"),
    ({"users": {"x" * 257: "alice@corp.example"}}, "users"),
    ({"users": ["U01"]}, "'users'"),
    ({"users": None}, "'users'"),
    ({"admins": {"U01": "alice@corp.example"}}, "access_map"),
    ("big", "'users' has 500001 entries"),
])
def test_a_hostile_access_map_is_refused_naming_the_field(world, access_map, named):
    access_map = _big_map() if access_map == "big" else access_map
    body = json.dumps({"paths": [str(world.export)], "access_map": access_map})
    if named.endswith("entries"):
        assert len(body) > 10_000_000
    head = world.server.client.get("/readyz").json()["log_head"]
    answer = world.server.client.post("/v1/connectors/slack", content=body,
                                      headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text[:500]
    detail = answer.json()["detail"]
    assert detail.startswith("access_map") and named in detail, detail
    assert len(answer.content) < 2000  # the map is not echoed back
    assert world.server.client.get("/readyz").json()["log_head"] == head  # nothing was read in

