"""orgmem's MCP server through the SDK's own client, over both transports, against real servers:
Streamable HTTP at /mcp of the live API (tests/conftest.py's live_server) and stdio by spawning
`python -m services.cli mcp`. Two tenants share a thread id and words; tenant B's rows carry a
codename that must never reach tenant A's reader through any tool or resource."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from schemas.events import RowSuperseded
from tests.conftest import LiveServer, create_key, free_port

pytestmark = pytest.mark.slow  # real servers with the sentence encoder, and spawned processes

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"search_memory", "get_document", "get_thread_versions", "what_changed", "add_documents", "answer", "find_people"}
SECRET = "ZEBRAFISH"  # only in tenant globex's rows
POLICY = [  # tenant acme, one thread, three versions
    ("2025-03-10", "maria@acme.example", "Remote work policy: every team may work remotely two days per week."),
    ("2025-06-16", "devon@acme.example", "Remote work policy update: from July remote work is allowed three days per week."),
    ("2025-09-22", "priya@acme.example", "Remote work policy reversed: from October everyone is back in the office."),
]
GLOBEX = [
    {"text": f"Remote work policy at globex: codename {SECRET}, four days remote.", "author": "eve@globex.example",
     "date": "2025-06-20", "kind": "email", "thread": "remote-work"},
    {"text": f"Launch plan {SECRET} for the remote work pilot.", "author": "eve@globex.example",
     "date": "2025-04-02", "kind": "doc"},
]
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}
PRIVATE = {"text": "Remote work exception for bob only: five days remote while relocating.",
           "author": "hr@acme.example", "date": "2025-05-01", "kind": "email", "acl": ["bob@acme.example"]}


def acme_documents() -> list[dict]:
    return [{"text": t, "author": a, "date": d, "kind": "email", "thread": "remote-work", "title": "Remote work"}
            for d, a, t in POLICY] + [PRIVATE]


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return " ".join(block.text for block in result.content)


@asynccontextmanager
async def http_session(url: str, token: str):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(url + "/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(*args: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "services.cli", "mcp", *args], cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def ingest(url: str, token: str, documents: list[dict]) -> dict:
    response = httpx.post(url + "/v1/documents", json={"documents": documents},
                          headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def wait_indexed(memory, position: int) -> None:
    assert memory.wait_for(position, 30)


# --- what every transport must hold ---------------------------------------------------------
async def check_reader_of_acme(session: ClientSession, acme_ids: list[str], globex_ids: list[str], private_id: str):
    """A reader of tenant acme (principal alice): every tool answers from acme's rows it may read,
    and nothing of globex or of bob's private row comes back, whatever is asked."""
    march, june, september = acme_ids
    assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS

    found = structured(await session.call_tool("search_memory", {"q": "remote work policy", "k": 10}))
    ids = {row["row_id"] for row in found["rows"]}
    assert {march, june, september} <= ids
    assert not ids & {*globex_ids, private_id}
    row = next(r for r in found["rows"] if r["row_id"] == june)
    assert row["date"].startswith("2025-06-16") and row["author"] == "devon@acme.example"
    assert row["kind"] == "email" and row["thread"] == "remote-work" and row["title"] == "Remote work"
    assert "three days" in row["text"] and "leg_ranks" not in row
    assert row["version"]["index"] == 2 and row["version"]["superseded_by"] == september  # QueryHit passed through
    assert SECRET not in json.dumps(structured(await session.call_tool("search_memory", {"q": SECRET})))

    july = structured(await session.call_tool("search_memory", {"q": "remote work policy", "as_of": "2025-07-01"}))
    assert {r["row_id"] for r in july["rows"]} & set(acme_ids) == {march, june}

    document = structured(await session.call_tool("get_document", {"row_id": june}))
    assert document["row"]["row_id"] == june and document["history"][0]["change"] == "observed"
    for guessed in (*globex_ids, private_id):  # another tenant's id, a row the access list hides
        assert "Not found" in error_text(await session.call_tool("get_document", {"row_id": guessed}))

    people = structured(await session.call_tool("find_people", {"limit": 500}))["people"]
    aliases = {a for p in people for a in p["aliases"]}
    assert "devon@acme.example" in aliases and not any("globex" in a for a in aliases)
    devon = next(p for p in people if "devon@acme.example" in p["aliases"])
    one = structured(await session.call_tool("find_people", {"person_id": devon["person_id"]}))
    assert june in {r["row_id"] for r in one["rows"]["author"]}
    assert "Not found" in error_text(await session.call_tool("find_people", {"person_id": "p_not_a_person"}))

    versions = structured(await session.call_tool("get_thread_versions", {"thread": "remote-work"}))["versions"]
    assert [v["row_id"] for v in versions] == [march, june, september]
    assert [v["version"] for v in versions] == [1, 2, 3] and versions[0]["superseded_by"] == june
    assert versions[0]["superseded_by_author"] == "devon@acme.example"
    assert versions[-1]["latest"] and versions[-1]["superseded_by"] is None and SECRET not in json.dumps(versions)

    changed = structured(await session.call_tool("what_changed", {"thread": "remote-work", "since": "2025-06-01",
                                                                  "until": "2025-10-01"}))
    added = [c for c in changed["changes"] if c["change"] == "added"]
    assert [c["row_id"] for c in added] == [june, september] and added[0]["supersedes"] == march
    superseded = {(c["row_id"], c["superseded_by"]) for c in changed["changes"] if c["change"] == "superseded"}
    assert superseded == {(march, june), (june, september)}
    around = structured(await session.call_tool("what_changed", {"q": "remote work", "since": "2025-01-01",
                                                                 "until": "2026-01-01"}))
    assert {c["row_id"] for c in around["changes"]} >= {march, june, september}
    assert not {c["row_id"] for c in around["changes"]} & {*globex_ids, private_id}
    assert SECRET not in json.dumps(around)

    row_resource = await session.read_resource(f"orgmem://rows/{june}")
    assert json.loads(row_resource.contents[0].text)["row"]["row_id"] == june
    thread_resource = await session.read_resource("orgmem://threads/remote-work")
    assert SECRET not in thread_resource.contents[0].text
    assert [v["row_id"] for v in json.loads(thread_resource.contents[0].text)["versions"]] == [march, june, september]
    for guessed in globex_ids:
        try:
            await session.read_resource(f"orgmem://rows/{guessed}")
            raise AssertionError("another tenant's row was read as a resource")
        except MCPError as exc:
            assert "not found" in str(exc).lower() and SECRET not in str(exc)

    refused = error_text(await session.call_tool("add_documents", {"documents": [{"text": "a reader writes"}]}))
    assert "writer role" in refused and "reader" in refused


async def check_bad_arguments(session: ClientSession):
    """Hostile arguments answer tool errors naming the field, and the session keeps working."""
    far = error_text(await session.call_tool("search_memory", {"q": "policy", "as_of": "9999-01-01"}))
    assert "as_of" in far and "9000" in far
    huge = error_text(await session.call_tool("search_memory", {"q": "policy", "k": 10**9}))
    assert "k: at most" in huge
    wrong_type = error_text(await session.call_tool("search_memory", {"q": {"an": "object"}}))
    assert "\nq\n" in wrong_type and "valid string" in wrong_type  # the SDK's check of the input schema
    empty = error_text(await session.call_tool("search_memory", {"q": ""}))
    assert "Invalid request: q:" in empty  # QueryRequest's own bounds
    not_a_list = error_text(await session.call_tool("add_documents", {"documents": "text"}))
    assert "documents" in not_a_list and "valid list" in not_a_list
    window = error_text(await session.call_tool("what_changed", {"since": "2025-09-01", "until": "2025-01-01",
                                                                "thread": "remote-work"}))
    assert "since: must be before until" in window
    both = error_text(await session.call_tool("what_changed", {"since": "2025-01-01", "until": "2025-02-01"}))
    assert "give exactly one" in both
    unknown = error_text(await session.call_tool("get_thread_versions", {"thread": "no-such-thread"}))
    assert "Not found" in unknown
    ok = structured(await session.call_tool("search_memory", {"q": "remote work policy", "k": 3}))
    assert len(ok["rows"]) == 3


# --- Streamable HTTP at /mcp ----------------------------------------------------------------
def test_mcp_over_http(live_server, memory, settings):
    data = settings.data_dir
    acme_writer, globex_writer = create_key(data, "writer", "acme", "ops@acme.example"), \
        create_key(data, "writer", "globex", "ops@globex.example")
    alice = create_key(data, "reader", "acme", "alice@acme.example")
    acme = ingest(live_server.url, acme_writer, acme_documents())
    globex = ingest(live_server.url, globex_writer, GLOBEX)
    wait_indexed(memory, globex["position"])
    acme_ids, private_id = acme["row_ids"][:3], acme["row_ids"][3]

    async def scenario():
        async with http_session(live_server.url, alice) as session:
            await check_reader_of_acme(session, acme_ids, globex["row_ids"], private_id)
            await check_bad_arguments(session)
        async with http_session(live_server.url, acme_writer) as session:
            added = structured(await session.call_tool("add_documents", {"documents": [
                {"text": "Remote work policy addendum: Fridays are remote for everyone.", "author": "ops@acme.example",
                 "date": "2025-10-03", "kind": "doc", "thread": "remote-work"}]}))
            found = structured(await session.call_tool("search_memory", {"q": "Fridays remote addendum",
                                                                         "after": added["position"]}))
            assert added["row_ids"][0] in {r["row_id"] for r in found["rows"]}
            dated = error_text(await session.call_tool("add_documents", {"documents": [{"text": "x", "date": "9999-01-01"}]}))
            assert "documents.0.date" in dated

    anyio.run(scenario)


def test_mcp_http_supersession_shows_in_versions_and_changes(live_server, memory, settings):
    writer = create_key(settings.data_dir, "writer", "acme", "ops@acme.example")
    reader = create_key(settings.data_dir, "reader", "acme", "alice@acme.example")
    march, june, _ = ingest(live_server.url, writer, acme_documents()[:3])["row_ids"]
    logged = memory.append([RowSuperseded(tenant="acme", row_id=march, superseded_by=june, reason="conflict")])
    wait_indexed(memory, logged[-1].position)

    async def scenario():
        async with http_session(live_server.url, reader) as session:
            versions = structured(await session.call_tool("get_thread_versions", {"thread": "remote-work"}))["versions"]
            assert versions[0]["contradicted_by"] == june and versions[0]["contradicted_by_author"] == "devon@acme.example"
            assert versions[1]["contradicts"] == [march] and versions[2]["contradicts"] == []
            changed = structured(await session.call_tool("what_changed", {"thread": "remote-work",
                                                                          "since": "2025-06-01", "until": "2025-07-01"}))
            kinds = {(c["change"], c["row_id"]) for c in changed["changes"]}
            assert kinds == {("added", june), ("superseded", march), ("contradicted", march)}
            judged = next(c for c in changed["changes"] if c["change"] == "contradicted")
            assert judged["contradicted_by"] == june and judged["on"].startswith("2025-06-16")
            assert judged["reason"] == "conflict"
            document = structured(await session.call_tool("get_document", {"row_id": march}))
            assert [h["change"] for h in document["history"]] == ["observed", "superseded"]

    anyio.run(scenario)


def test_mcp_http_refuses_missing_and_bad_credentials(live_server):
    initialize, headers = INITIALIZE, ACCEPT
    missing = httpx.post(live_server.url + "/mcp", json=initialize, headers=headers)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["type"].endswith("/unauthorized")
    bad = httpx.post(live_server.url + "/mcp", json=initialize, headers={**headers, "Authorization": "Bearer om_nope"})
    assert bad.status_code == 401
    admitted = httpx.post(live_server.url + "/mcp", json=initialize, headers={**headers, **live_server.headers})
    assert admitted.status_code == 200 and admitted.json()["result"]["serverInfo"]["name"] == "orgmem"
    assert admitted.headers["cache-control"] == "no-store" and missing.headers["cache-control"] == "no-store"
    metrics = httpx.get(live_server.url + "/metrics").text  # counted under its own route, like the API's
    assert 'route="/mcp",status="401"' in metrics and 'route="/mcp",status="200"' in metrics


def test_mcp_http_applies_the_per_key_rate_limit(tmp_path):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05,
                        auth={"enabled": True, "rate_limit": "3/minute", "failed_auth_limit": ""})
    memory, lock = build_memory(settings)
    try:
        limited, other = (create_key(settings.data_dir, "reader", "acme", f"{name}@acme.example") for name in ("a", "b"))
        with LiveServer(create_app(settings, memory), free_port(), limited) as server:
            def initialize(token: str) -> httpx.Response:
                return httpx.post(server.url + "/mcp", json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"})

            answers = [initialize(limited) for _ in range(4)]
            assert [a.status_code for a in answers] == [200, 200, 200, 429]
            assert int(answers[-1].headers["retry-after"]) >= 1 and "rate limit" in answers[-1].json()["detail"]
            assert initialize(other).status_code == 200  # the limit is the key's, not the endpoint's
    finally:
        memory.close()
        lock.release()


# --- stdio ------------------------------------------------------------------------------------
def _stdio_data(tmp_path: Path) -> tuple[Path, list[str], list[str], str]:
    """A data folder with both tenants' rows, closed again so that the spawned server can own it."""
    from schemas.documents import DocumentIn
    from services.bootstrap import build_memory
    from services.core.caller import Caller
    from services.settings import Settings

    data = tmp_path / "stdio-data"
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        acme = memory.ingest([DocumentIn(**d) for d in acme_documents()], Caller(tenant="acme"))
        globex = memory.ingest([DocumentIn(**d) for d in GLOBEX], Caller(tenant="globex"))
        memory.catch_up()
    finally:
        memory.close()
        lock.release()
    return data, acme.row_ids[:3], globex.row_ids, acme.row_ids[3]


def test_mcp_over_stdio(tmp_path):
    data, acme_ids, globex_ids, private_id = _stdio_data(tmp_path)
    alice = create_key(data, "reader", "acme", "alice@acme.example")

    async def scenario():
        async with stdio_session("--data", str(data), "--key", alice) as session:
            await check_reader_of_acme(session, acme_ids, globex_ids, private_id)
            await check_bad_arguments(session)

    anyio.run(scenario)


def test_mcp_stdio_principal_writes_and_stdout_carries_only_the_protocol(tmp_path):
    """A local writer principal adds a document; every line the process writes to stdout, from
    start to exit, is a JSON-RPC message (logs and library output go to stderr)."""
    data, *_ = _stdio_data(tmp_path)
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add_documents", "arguments": {
            "documents": [{"text": "Desk booking opens on Mondays.", "author": "carol@acme.example", "date": "2025-11-03"}]}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search_memory",
                                                                      "arguments": {"q": SECRET}}},
    ]
    command = [sys.executable, "-m", "services.cli", "mcp", "--data", str(data), "--principal", "carol@acme.example",
               "--tenant", "acme", "--role", "writer"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT)
    answers, stray = {}, []
    try:
        for message in messages:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            while "id" in message and message["id"] not in answers:
                line = process.stdout.readline()
                assert line, process.stderr.read()[-2000:]
                try:
                    answer = json.loads(line)  # a stray print fails here
                except ValueError:
                    stray.append(line)
                    continue
                assert answer["jsonrpc"] == "2.0"
                answers[answer.get("id")] = answer
        process.stdin.close()
        assert process.wait(timeout=60) == 0
        stray += [line for line in process.stdout.read().splitlines() if line.strip()]
    finally:
        process.kill()
        process.wait()
    assert stray == []
    added = answers[2]["result"]
    assert not added.get("isError") and added["structuredContent"]["row_ids"]
    assert SECRET not in json.dumps(answers[3])


def test_mcp_stdio_refuses_a_bad_key_and_missing_caller(tmp_path):
    data, *_ = _stdio_data(tmp_path)
    base = [sys.executable, "-m", "services.cli", "mcp", "--data", str(data)]
    bad = subprocess.run([*base, "--key", "om_000000000000_nope"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, input="")
    assert bad.returncode == 2 and "--key" in bad.stderr and bad.stdout == ""
    nobody = subprocess.run(base, capture_output=True, text=True, cwd=ROOT, timeout=120, input="")
    assert nobody.returncode == 2 and "--principal" in nobody.stderr and nobody.stdout == ""
    admin = subprocess.run([*base, "--principal", "x@acme.example", "--tenant", "acme", "--role", "admin"],
                           capture_output=True, text=True, cwd=ROOT, timeout=120, input="")
    assert admin.returncode == 2 and admin.stdout == ""
