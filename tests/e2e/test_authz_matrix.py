"""Authentication and authorisation over real HTTP: the role × route matrix of docs/security.md,
tenant boundaries, revocation, OIDC tokens against a local JWKS, rate limits, body limits, CORS
and the audit trail."""

from __future__ import annotations

import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import LiveServer, create_key, free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
RANK = {"public": -1, "reader": 0, "writer": 1, "admin": 2}
# A plausible body per route, so that an admitted call gets past validation often enough; what
# the matrix checks is only "401/403 or not".
BODIES = {
    ("POST", "/v1/documents"): {"documents": [{"text": "matrix probe", "author": "m@corp.example"}]},
    ("POST", "/v1/query"): {"q": "matrix probe"},
    ("POST", "/v1/answer"): {"q": "matrix probe"},
    ("POST", "/v1/connectors/{kind}"): {"paths": ["nothing-here.mbox"]},
    ("POST", "/v1/admin/keys"): {"principal": "made-by-matrix", "role": "reader"},
    ("POST", "/v1/admin/maintenance/refine"): {"budget_fraction": 0.9},
}
PATH_VALUES = {"kind": "email", "key_id": "000000000000"}


def documented_matrix() -> dict[tuple[str, str], str]:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- authz-matrix:start -->")[1].split("<!-- authz-matrix:end -->")[0]
    rows = re.findall(r"^\|\s*(GET|POST|PUT|PATCH|DELETE)\s*\|\s*(\S+)\s*\|\s*(\w+)\s*\|", block, re.M)
    return {(method, path): need for method, path, need in rows}


def bearer(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


@contextmanager
def server_with(tmp_path, **auth):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05,
                        auth={"rate_limit": "", "failed_auth_limit": "", **auth})
    admin = create_key(settings.data_dir)
    memory, lock = build_memory(settings)
    try:
        with LiveServer(create_app(settings, memory), free_port(), admin) as server:
            server.settings = settings
            yield server
    finally:
        memory.close()
        lock.release()


def test_every_route_answers_as_documented(live_server, settings):
    matrix = documented_matrix()
    spec = live_server.client.get("/openapi.json").json()
    routes = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert routes - set(matrix) == set(), "routes missing from the matrix in docs/security.md"
    assert set(matrix) - routes == set(), "the matrix names routes the API does not have"

    revoked = create_key(settings.data_dir, role="admin", principal="gone")
    from services.adapters.key_store.sqlite import SqliteKeyStore
    from services.core.keys import key_id_of

    store = SqliteKeyStore(settings.data_dir / "keys.sqlite")
    store.revoke(key_id_of(revoked), "tests")
    store.close()
    callers = {
        "anonymous": None, "garbage": "not-a-key", "forged": "om_0123456789ab_" + "A" * 43, "revoked": revoked,
        "reader": create_key(settings.data_dir, role="reader", principal="rita"),
        "writer": create_key(settings.data_dir, role="writer", principal="walt"),
        "admin": live_server.token,
    }
    checked = 0
    for (method, template), need in sorted(matrix.items()):
        path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m.group(1), "x"), template)
        for who, token in callers.items():
            body = BODIES.get((method, template))
            response = live_server.client.request(method, path, json=body, headers=bearer(token) or {"Authorization": ""})
            status = response.status_code
            if need == "public":
                expected = "allowed"
            elif who not in RANK:
                expected = 401
            else:
                expected = "allowed" if RANK[who] >= RANK[need] else 403
            if expected == "allowed":
                assert status not in (401, 403), f"{who} {method} {path}: {status} {response.text[:200]}"
            else:
                assert status == expected, f"{who} {method} {path}: {status}, expected {expected}"
                assert response.headers["content-type"].startswith("application/problem+json")
                assert token is None or token not in response.text
                if status == 401:
                    assert response.headers["www-authenticate"].startswith("Bearer")
            # 501 is a deliberate answer: /v1/answer without a configured model says which setting is missing.
            unconfigured = status == 501 and "ORGMEM_ANSWER_BASE_URL" in response.text
            assert status < 500 or unconfigured, f"{who} {method} {path}: {status} {response.text[:300]}"
            checked += 1
    print(f"authz matrix: {len(matrix)} routes x {len(callers)} callers = {checked} requests")


def test_tenants_only_reach_their_own_rows_threads_and_keys(live_server, settings):
    acme_writer = bearer(create_key(settings.data_dir, role="writer", principal="ann"))
    globex_admin = bearer(create_key(settings.data_dir, role="admin", tenant="globex", principal="gus"))
    ingest = live_server.client.post("/v1/documents", headers=acme_writer, json={"documents": [
        {"text": "Acme pricing decision: list price rises 4 percent in May.", "thread": "pricing", "author": "ann"}]})
    assert ingest.status_code == 200, ingest.text
    row_id, after = ingest.json()["row_ids"][0], ingest.json()["position"]
    own = live_server.client.post("/v1/query", json={"q": "pricing decision", "after": after}).json()
    assert [r["row_id"] for r in own["rows"]] == [row_id]
    assert live_server.client.get(f"/v1/rows/{row_id}").status_code == 200
    foreign = live_server.client.get(f"/v1/rows/{row_id}", headers=globex_admin)
    assert foreign.status_code == 404 and "pricing" not in foreign.text
    assert live_server.client.get("/v1/threads/pricing", headers=globex_admin).status_code == 404
    hits = live_server.client.post("/v1/query", headers=globex_admin, json={"q": "pricing decision", "after": after}).json()
    assert hits["rows"] == [] and hits["matched"] == 0
    assert live_server.client.get("/v1/stats", headers=globex_admin).json()["rows"].get("active", 0) == 0

    listed = live_server.client.get("/v1/admin/keys", headers=globex_admin).json()["keys"]
    assert {k["tenant"] for k in listed} == {"globex"} and all("token" not in k and "hash" not in k for k in listed)
    acme_key_id = live_server.client.get("/v1/admin/keys").json()["keys"][0]["key_id"]
    assert live_server.client.delete(f"/v1/admin/keys/{acme_key_id}", headers=globex_admin).status_code == 404


def test_api_keys_created_and_revoked_over_the_api_take_effect_at_once(live_server):
    made = live_server.client.post("/v1/admin/keys", json={"principal": "bot", "role": "reader", "groups": ["eng"]})
    assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
    token, key_id = made.json()["token"], made.json()["key"]["key_id"]
    assert token.startswith(f"om_{key_id}_")
    assert all(token not in json.dumps(k) for k in live_server.client.get("/v1/admin/keys").json()["keys"])
    headers = bearer(token)
    assert live_server.client.post("/v1/query", headers=headers, json={"q": "anything"}).status_code == 200
    assert live_server.client.post("/v1/documents", headers=headers, json={"documents": [{"text": "x"}]}).status_code == 403
    assert live_server.client.post("/v1/admin/keys", json={"principal": "bad name!", "role": "reader"}).status_code == 422
    assert live_server.client.delete(f"/v1/admin/keys/{key_id}").json()["revoked_at"]
    assert live_server.client.post("/v1/query", headers=headers, json={"q": "anything"}).status_code == 401

    from services.bootstrap import open_event_log
    from services.cli.keys import audit_entries
    from services.settings import Settings

    event_log = open_event_log(Settings(data_dir=live_server_data(live_server)))
    actions = [(action, actor, details.get("key_id")) for _, action, actor, details in audit_entries(event_log)]
    event_log.close()
    assert ("key.created", actions[0][1], key_id) in actions and ("key.revoked", actions[0][1], key_id) in actions
    assert actions[0][1].startswith("test-admin") and all(token not in str(a) for a in actions)


def live_server_data(server) -> Path:
    return server.server.config.app.state.orgmem.settings.data_dir


def test_bootstrap_key_is_printed_once_and_audited(tmp_path, capsys):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", auth={"rate_limit": ""})
    memory, lock = build_memory(settings)
    try:
        app = create_app(settings, memory)
        printed = capsys.readouterr().err
        token = re.search(r"om_[0-9a-f]{12}_\S+", printed).group(0)
        create_app(settings, memory)
        assert "om_" not in capsys.readouterr().err  # a key exists now: nothing new is made or shown
        with LiveServer(app, free_port(), token) as server:
            assert server.client.get("/v1/stats").status_code == 200
    finally:
        memory.close()
        lock.release()


# --- OIDC ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rsa_keys():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048), \
        rsa.generate_private_key(public_exponent=65537, key_size=2048)


@contextmanager
def jwks_server(public_key, kid: str):
    from jwt.algorithms import RSAAlgorithm

    jwk = {**json.loads(RSAAlgorithm.to_jwk(public_key)), "kid": kid, "use": "sig", "alg": "RS256"}
    body = json.dumps({"keys": [jwk]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/jwks.json"
    finally:
        httpd.shutdown()


def test_oidc_tokens_from_a_local_issuer(tmp_path, rsa_keys):
    import jwt

    good, other = rsa_keys
    issuer, audience = "https://idp.test.example", "orgmem"
    with jwks_server(good.public_key(), "k1") as jwks_url, \
            server_with(tmp_path, oidc_issuer=issuer, oidc_audience=audience, oidc_jwks_url=jwks_url) as server:
        def token(key=good, kid="k1", alg="RS256", **claims):
            now = int(time.time())
            body = {"iss": issuer, "aud": audience, "sub": "olga", "exp": now + 300, "iat": now,
                    "orgmem_tenant": "default", "groups": ["Finance"], "orgmem_role": "writer", **claims}
            return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})

        def call(tok, path="/v1/query", body=None):
            return server.client.post(path, json=body or {"q": "budget"}, headers=bearer(tok))

        ingest = call(token(), "/v1/documents", {"documents": [
            {"text": "Finance only: the 2026 budget is frozen.", "acl": ["finance"]},
            {"text": "Legal only: the budget dispute settles.", "acl": ["legal"]}]})
        assert ingest.status_code == 200, ingest.text
        finance_row, legal_row = ingest.json()["row_ids"]
        seen = call(token(), body={"q": "budget", "after": ingest.json()["position"]}).json()
        assert {r["row_id"] for r in seen["rows"]} == {finance_row}  # groups from the token, lower-cased
        assert call(token(orgmem_role="reader"), "/v1/documents", {"documents": [{"text": "x"}]}).status_code == 403
        admin_token = token(orgmem_role=["reader", "admin"])
        own = {"principal": "olga", "role": "reader", "groups": ["finance"]}
        assert call(admin_token, "/v1/admin/keys", own).status_code == 201
        # Not for another principal: that key would read access lists naming "p", which olga cannot.
        assert call(admin_token, "/v1/admin/keys", {"principal": "p", "role": "reader"}).status_code == 403
        elsewhere = call(token(orgmem_tenant="globex"), body={"q": "budget"}).json()
        assert elsewhere["rows"] == [] and elsewhere["matched"] == 0
        server.client.get(f"/v1/rows/{legal_row}")  # exists for the unrestricted admin...
        assert server.client.get(f"/v1/rows/{legal_row}", headers=bearer(token())).status_code == 404  # ...not for olga

        rejected = {
            "expired": token(exp=int(time.time()) - 3600),
            "wrong audience": token(aud="someone-else"),
            "wrong issuer": token(iss="https://evil.example"),
            "unknown signer": token(key=other),
            "unknown kid": token(key=other, kid="k2"),
            "no tenant": token(orgmem_tenant=None),
            "bad principal": token(sub="has space"),
            "hs256 with the public key": jwt.encode({"iss": issuer, "aud": audience, "sub": "x", "exp": int(time.time()) + 60,
                                                     "orgmem_tenant": "default"}, "a-shared-secret-of-32-bytes-or-more!", algorithm="HS256",
                                                    headers={"kid": "k1"}),
            "alg none": jwt.encode({"iss": issuer, "aud": audience, "sub": "x", "exp": int(time.time()) + 60,
                                    "orgmem_tenant": "default"}, None, algorithm="none", headers={"kid": "k1"}),
            "tampered": token()[:-4] + "AAAA",
        }
        for name, bad in rejected.items():
            response = call(bad)
            assert response.status_code == 401, f"{name}: {response.status_code} {response.text}"
            assert response.headers["content-type"].startswith("application/problem+json"), name


def test_oidc_settings_refuse_weak_configurations(tmp_path):
    from services.api.auth import OidcVerifier
    from services.errors import OrgmemError
    from services.settings import AuthSettings

    with pytest.raises(OrgmemError, match="oidc_audience"):
        OidcVerifier(AuthSettings(oidc_issuer="https://idp.example", oidc_jwks_url="http://127.0.0.1:1/jwks"))
    with pytest.raises(OrgmemError, match="oidc_algorithms"):
        OidcVerifier(AuthSettings(oidc_issuer="https://idp.example", oidc_audience="a", oidc_algorithms=["HS256"]))


# --- limits, CORS, secrets ---------------------------------------------------------------------
def start_clear_of_window_edge(window_s: float = 60.0, margin_s: float = 20.0) -> None:
    """Sleep past the next window edge when it is near. The limiter's sliding-window counter weighs
    the previous window's hits by the share of it that still overlaps, so hits that straddle an
    edge count fractionally and one more request can pass than the limit reads (the library's
    documented approximation); the windows are aligned to multiples of their length."""
    left = window_s - time.time() % window_s
    if left < margin_s:
        time.sleep(left + 0.05)


def test_rate_limits_per_key_and_for_failed_credentials(tmp_path, caplog):
    with server_with(tmp_path, rate_limit="5/minute", failed_auth_limit="3/minute") as server:
        start_clear_of_window_edge()  # the requests below take a few seconds; keep them in one minute
        other = bearer(create_key(server.settings.data_dir, role="reader", principal="other"))
        statuses = [server.client.post("/v1/query", json={"q": "x"}).status_code for _ in range(7)]
        assert statuses[:5] == [200] * 5 and statuses[5:] == [429, 429]
        limited = server.client.post("/v1/query", json={"q": "x"})
        assert int(limited.headers["retry-after"]) >= 1 and limited.json()["type"].endswith("rate-limited")
        assert server.client.post("/v1/query", json={"q": "x"}, headers=other).status_code == 200  # its own budget

        bad = [server.client.post("/v1/query", json={"q": "x"}, headers=bearer(f"om_{i:012x}_" + "B" * 43)).status_code
               for i in range(5)]
        assert bad[:3] == [401] * 3 and bad[3:] == [429, 429]
        # A key that verified before is not locked out with the address.
        assert server.client.post("/v1/query", json={"q": "x"}, headers=other).status_code == 200
        assert server.token not in caplog.text


def test_body_limits_with_and_without_a_length(tmp_path):
    with server_with(tmp_path) as server:
        server.settings.limits.max_body_bytes = 2000  # read per request
        big = {"documents": [{"text": "y" * 5000}]}
        declared = server.client.post("/v1/documents", json=big)
        assert declared.status_code == 413 and declared.headers["content-type"].startswith("application/problem+json")

        def chunks():
            data = json.dumps(big).encode()
            for i in range(0, len(data), 1000):
                yield data[i:i + 1000]

        streamed = server.client.post("/v1/documents", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413, streamed.text
        assert server.client.post("/v1/documents", json={"documents": [{"text": "small"}]}).status_code == 200
        many = server.client.post("/v1/query", json={"q": "x", "authors": [f"a{i}" for i in range(101)],
                                                      "weights": {"lex": 1e9}})
        assert many.status_code == 422 and "authors" in many.json()["detail"] and "weights.lex" in many.json()["detail"]


def test_cors_is_off_unless_origins_are_listed(live_server, tmp_path):
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization"}
    off = live_server.client.options("/v1/query", headers=preflight)
    assert "access-control-allow-origin" not in off.headers
    with server_with(tmp_path / "cors", cors_origins=["https://app.example"]) as server:
        on = server.client.options("/v1/query", headers=preflight)
        assert on.headers["access-control-allow-origin"] == "https://app.example"
        stranger = server.client.options("/v1/query", headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in stranger.headers


def test_key_store_keeps_only_salted_hashes(tmp_path):
    from services.adapters.key_store.sqlite import SqliteKeyStore

    store = SqliteKeyStore(tmp_path / "keys.sqlite")
    _, first = store.create("default", "p", "reader", "tests")
    _, second = store.create("default", "p", "reader", "tests")
    assert store.verify(first).principal == "p" and store.verify(second) is not None
    assert store.verify(first[:-1] + ("A" if first[-1] != "A" else "B")) is None
    store.close()
    raw = (tmp_path / "keys.sqlite").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("keys.sqlite-*"))
    for token in (first, second):
        assert token.split("_", 2)[2].encode() not in raw
    assert (tmp_path / "keys.sqlite").stat().st_mode & 0o077 == 0
