"""Abuse of authentication and capacity over real HTTP, each test replaying an attack of the
hardening review (issue 16) against a server run with the options `orgmem serve` uses:

- a flood of bad credentials from one address locked out every OIDC user and every key not
  verified since the restart; now failures count per address and per credential, and a
  credential that verifies is never refused;
- a spoofed X-Forwarded-For from loopback dodged the per-address limit; now forwarded headers
  count only from configured proxies;
- 45 queries waiting on `after` held every worker thread, so another user waited 14 s; now the
  wait holds no thread, and each key has a cap on requests in flight;
- an OIDC role claim that is an object answered 500; a key in a query string reached the access
  log; a principal named like a group read the group's rows; slow headers and bodies held
  connections forever.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from tests.conftest import LiveServer, create_key, free_port
from tests.e2e.test_authz_matrix import jwks_server

ISSUER, AUDIENCE = "https://idp.test.example", "orgmem"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


class ServedAsInProduction(LiveServer):
    """LiveServer with uvicorn's options from `orgmem serve` (no proxy headers, timeouts, limits)."""

    def __init__(self, app, settings, token, log_level="warning"):
        import uvicorn

        from services.api.middleware import server_options

        port = free_port()
        super().__init__(app, port, token)
        options = {**server_options(settings), "host": "127.0.0.1", "port": port, "log_level": log_level}
        self.server = uvicorn.Server(uvicorn.Config(app, **options))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.state = app.state.orgmem


@contextmanager
def serve(tmp_path, log_level="warning", limits=None, **auth):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05,
                        auth={"rate_limit": "", "failed_auth_limit": "", **auth}, limits=limits or {})
    admin = create_key(settings.data_dir)
    memory, lock = build_memory(settings)
    try:
        with ServedAsInProduction(create_app(settings, memory), settings, admin, log_level) as server:
            server.settings, server.memory = settings, memory
            yield server
    finally:
        memory.close()
        lock.release()


def bad_key(i: int) -> str:
    return f"om_{i:012x}_" + "B" * 43


# --- finding 7: the failed-credential limiter ---------------------------------------------------
@pytest.fixture(scope="module")
def signer():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def oidc_token(key, **claims) -> str:
    import jwt

    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "olga", "exp": now + 300, "iat": now,
            "orgmem_tenant": "default", "groups": ["finance"], "orgmem_role": "reader", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="RS256", headers={"kid": "k1"})


def test_a_flood_of_bad_credentials_locks_out_no_valid_key_or_oidc_user(tmp_path, signer):
    from cryptography.hazmat.primitives.asymmetric import rsa

    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with jwks_server(signer.public_key(), "k1") as jwks_url, \
            serve(tmp_path, failed_auth_limit="30/minute", oidc_issuer=ISSUER, oidc_audience=AUDIENCE,
                  oidc_jwks_url=jwks_url) as server:
        def query(token, body=None):
            return server.client.post("/v1/query", json=body or {"q": "x"}, headers=bearer(token))

        # Low finding: an OIDC role claim that is an object (or a number) is refused, never a 500.
        for role in ({"admin": True}, 7, True):
            answer = query(oidc_token(signer, orgmem_role=role))
            assert answer.status_code == 401 and "orgmem_role" in answer.json()["detail"], f"{role!r}: {answer.text}"
            assert answer.headers["content-type"].startswith("application/problem+json")
        assert query(oidc_token(signer, orgmem_role=[{"admin": True}, 3])).status_code == 200  # names no role: the default

        made = server.client.post("/v1/documents", json={"documents": [
            {"text": "Finance only: the 2026 budget is frozen.", "acl": ["finance"]}]}).json()

        # Keys made after the start: this server has never verified them (nothing cached).
        fresh = create_key(server.settings.data_dir, role="reader", principal="rita@corp.example")
        attacked = create_key(server.settings.data_dir, role="reader", principal="walt@corp.example")
        attacked_id = attacked.split("_")[1]
        flood = [bad_key(i) for i in range(20)] + [f"om_{attacked_id}_" + "C" * 43] * 10 + \
            [oidc_token(forger)] * 5 + ["garbage"] * 5
        statuses = [query(token).status_code for token in flood]  # 3 failures above + 40 here, limit 30
        assert set(statuses[:25]) == {401} and set(statuses[-5:]) == {429}, statuses  # the limit still holds
        limited = query("garbage")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert "address" in limited.json()["detail"]

        # Every credential that verifies answers, from the same address, mid-flood: a key never
        # verified before, the very key whose id was attacked, and OIDC users.
        for token in (fresh, attacked, oidc_token(signer), oidc_token(signer, sub="other@corp.example")):
            assert query(token).status_code == 200, query(token).text
        # Low finding: a token with `sub: finance` is a user called finance, not the finance group.
        ask = {"q": "budget frozen", "after": made["position"]}
        assert [r["row_id"] for r in query(oidc_token(signer), ask).json()["rows"]] == made["row_ids"]
        assert query(oidc_token(signer, sub="finance", groups=[]), ask).json()["rows"] == []


def test_forwarded_headers_count_only_from_configured_proxies(tmp_path):
    # By default a spoofed X-Forwarded-For from loopback is ignored: the peer is the address.
    with serve(tmp_path / "default", failed_auth_limit="5/minute", failed_auth_credential_limit="1000/minute") as server:
        statuses = [server.client.post("/v1/query", json={"q": "x"}, headers={
            **bearer(bad_key(i)), "X-Forwarded-For": f"203.0.113.{i}", "Forwarded": f"for=198.51.100.{i}"}).status_code
            for i in range(10)]
        assert statuses[:4] == [401] * 4 and set(statuses[-4:]) == {429}, statuses

    # Behind a configured proxy the client is the nearest hop the proxy saw: the attacker's own
    # left-hand entries prove nothing, and the per-credential bucket still catches a spread attack.
    with serve(tmp_path / "proxied", failed_auth_limit="3/minute", failed_auth_credential_limit="5/minute",
               trusted_proxies=["127.0.0.0/8"]) as server:
        def attempt(token, forwarded):
            return server.client.post("/v1/query", json={"q": "x"},
                                      headers={**bearer(token), "X-Forwarded-For": forwarded}).status_code

        spoofed = [attempt(bad_key(100 + i), f"10.9.9.{i}, 203.0.113.7") for i in range(5)]
        assert spoofed[:3] == [401] * 3 and set(spoofed[3:]) == {429}  # one client, whatever it claims
        assert attempt(bad_key(200), "203.0.113.8") == 401  # another client has its own budget
        victim = create_key(server.settings.data_dir, role="reader", principal="vic@corp.example")
        victim_id = victim.split("_")[1]
        spread = [attempt(f"om_{victim_id}_" + "D" * 43, f"198.51.100.{i}") for i in range(8)]
        assert spread[:5] == [401] * 5 and set(spread[5:]) == {429}, spread  # per credential, across addresses
        assert attempt(victim, "198.51.100.1") == 200  # the attacked key still works
        assert server.client.post("/v1/query", json={"q": "x"}, headers=bearer(victim)).status_code == 200


def test_client_address_behind_trusted_proxies():
    from starlette.requests import Request

    from services.api.auth import TrustedProxies

    def client(peer, trusted, **headers):
        scope = {"type": "http", "client": (peer, 1234), "headers": [(k.replace("_", "-").encode(), v.encode())
                                                                    for k, v in headers.items()]}
        return TrustedProxies(trusted).client(Request(scope))

    assert client("127.0.0.1", [], x_forwarded_for="1.2.3.4") == "127.0.0.1"
    assert client("10.0.0.5", ["10.0.0.0/8"], x_forwarded_for="6.6.6.6, 1.2.3.4") == "1.2.3.4"
    assert client("10.0.0.5", ["10.0.0.0/8"], x_forwarded_for="1.2.3.4, 10.0.0.9") == "1.2.3.4"
    assert client("10.0.0.5", ["10.0.0.0/8"], forwarded='for="[2001:db8::1]:4711";proto=https') == "2001:db8::1"
    assert client("10.0.0.5", ["10.0.0.0/8"]) == "10.0.0.5"
    assert client("192.0.2.1", ["10.0.0.0/8"], x_forwarded_for="1.2.3.4") == "192.0.2.1"


# --- finding 11: waits for `after` hold no thread; a cap per key ---------------------------------
def test_after_waits_hold_no_worker_thread_and_each_key_has_a_cap(tmp_path, monkeypatch):
    from services.ports import BatchStats

    with serve(tmp_path, limits={"max_in_flight_per_caller": 8, "read_your_writes_timeout_s": 60}) as server:
        waiter = create_key(server.settings.data_dir, role="reader", principal="wait@corp.example")
        other = bearer(create_key(server.settings.data_dir, role="reader", principal="other@corp.example"))
        waiter_id = f"key:{waiter.split('_')[1]}"
        in_flight = server.state.auth.in_flight
        # The indexer stops applying the log, so a position just written is not reached.
        monkeypatch.setattr(server.memory.projection, "catch_up", lambda *a, **k: BatchStats())
        position = server.client.post("/v1/documents", json={"documents": [{"text": "pending note"}]}).json()["position"]
        assert server.memory.applied < position

        http = httpx.Client(base_url=server.url, headers=bearer(waiter), timeout=90,
                            limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))
        pool = ThreadPoolExecutor(60)

        def wait_until(count):
            deadline = time.monotonic() + 20
            while in_flight.count(waiter_id) < count and time.monotonic() < deadline:
                time.sleep(0.02)
            assert in_flight.count(waiter_id) == count

        try:
            ask = {"q": "pending note", "after": position}
            first = [pool.submit(http.post, "/v1/query", json=ask) for _ in range(8)]
            wait_until(8)
            over = http.post("/v1/query", json=ask)
            assert over.status_code == 429 and over.json()["type"].endswith("too-many-in-flight")
            assert "max_in_flight_per_caller" in over.json()["detail"] and over.headers["retry-after"] == "1"
            assert server.client.post("/v1/query", json={"q": "x"}, headers=other).status_code == 200  # its own cap

            server.settings.limits.max_in_flight_per_caller = 100  # read per request
            rest = [pool.submit(http.post, "/v1/query", json=ask) for _ in range(42)]
            wait_until(50)  # 50 waiters pending: more than the 40 worker threads there are
            started = time.monotonic()
            plain = server.client.post("/v1/query", json={"q": "x"}, headers=other)
            took = time.monotonic() - started
            assert plain.status_code == 200 and took < 5, f"another key's query took {took:.1f} s"
            assert not any(f.done() for f in first + rest)  # still waiting, none of them on a thread

            server.settings.limits.read_your_writes_timeout_s = 0.3  # a bounded wait ends as 503
            server.settings.limits.max_in_flight_per_caller = 0
            late = http.post("/v1/query", json=ask)
            assert late.status_code == 503 and late.json()["type"].endswith("not-indexed")
        finally:
            monkeypatch.undo()
            server.state.indexer.wake()
            answers = [f.result(timeout=60) for f in first + rest]
            pool.shutdown()
            http.close()
        assert [a.status_code for a in answers] == [200] * 50
        assert all(a.json()["applied_position"] >= position for a in answers)
        assert in_flight.count(waiter_id) == 0  # every slot was given back


# --- low findings ---------------------------------------------------------------------------------
def test_access_log_never_shows_a_key_and_names_do_not_cross_kinds(tmp_path):
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    with serve(tmp_path, log_level="info") as server:
        keep = Keep()
        logging.getLogger("uvicorn.access").addHandler(keep)
        try:
            secret = server.token
            for url in (f"/v1/stats?key={secret}", f"/healthz?access_token={secret}&x=1", f"/v1/rows/{secret}",
                        f"/v1/query?token={secret}"):
                server.client.get(url)
            deadline = time.monotonic() + 5
            while len(records) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            logging.getLogger("uvicorn.access").removeHandler(keep)
        assert len(records) >= 4 and all("<redacted>" in line for line in records[:4]), records
        assert not any(secret.split("_", 2)[2] in line for line in records)
        assert any("x=1" in line for line in records)  # other parameters stay readable

        # A principal named like a group reads none of the group's rows, and the other way round.
        finance_user = bearer(create_key(server.settings.data_dir, role="reader", principal="finance"))
        finance_member = bearer(create_key(server.settings.data_dir, role="reader", principal="fay@corp.example",
                                           groups=("finance",)))
        made = server.client.post("/v1/documents", json={"documents": [
            {"text": "Group finance only: the audit fee doubles.", "acl": ["finance"]},
            {"text": "User finance only: the audit fee note.", "acl": ["user:finance"]}]}).json()
        group_row, user_row = made["row_ids"]
        for who, sees, hidden in ((finance_user, user_row, group_row), (finance_member, group_row, user_row)):
            found = server.client.post("/v1/query", headers=who, json={"q": "audit fee", "after": made["position"]})
            assert [r["row_id"] for r in found.json()["rows"]] == [sees], found.text
            assert server.client.get(f"/v1/rows/{hidden}", headers=who).status_code == 404
            assert server.client.get(f"/v1/rows/{sees}", headers=who).status_code == 200


def test_slow_headers_and_bodies_are_cut_off(tmp_path):
    with serve(tmp_path, limits={"header_timeout_s": 0.5, "body_timeout_s": 0.5}) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
            started = time.monotonic()
            assert sock.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 5
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"q\": ")  # 94 bytes short, forever
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert server.client.get("/healthz").status_code == 200  # the server is fine
