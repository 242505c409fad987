"""The API KeyStore contract, over SQLite and a real redis-server (append-only file on, as
deployed). Each test opens two store instances over one backing store, as two API replicas (or
a replica and `orgmem keys`) do: a key created through one verifies through the other, and a
revocation through either is seen by both at the next request. Hostile inputs (guessed key ids,
objects where strings belong) are refused, never stored."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime, timedelta

import pytest

from services.errors import BackendUnavailable, Invalid, KeyRequestError
from tests.conftest import free_port
from tests.integration.test_celery_redis import Redis

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server not installed (apt-get install redis-server)")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (apt-get install redis-server)")
    server = Redis(free_port(), tmp_path_factory.mktemp("redis")).start()
    yield server.url
    server.stop()


@pytest.fixture(params=["sqlite", "redis"])
def replicas(request, tmp_path):
    """A function that opens one more store over the same keys (a replica)."""
    opened = []
    if request.param == "sqlite":
        from services.adapters.key_store.sqlite import SqliteKeyStore

        def open_one():
            opened.append(SqliteKeyStore(tmp_path / "keys.sqlite"))
            return opened[-1]
    else:
        import redis

        from services.adapters.key_store.api_keys_redis import RedisKeyStore

        url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(url).flushdb()

        def open_one():
            opened.append(RedisKeyStore(url))
            return opened[-1]
    yield open_one
    for store in opened:
        store.close()


def test_a_key_created_on_one_replica_verifies_on_another(replicas):
    a, b = replicas(), replicas()
    until = datetime.now(UTC) + timedelta(days=3)
    key, token = a.create("acme", "rhea", "writer", "cli:ops", groups=["eng", "eng", "sales"], name="ci",
                          expires_at=until)
    seen = b.verify(token)
    assert seen == key == b.get(key.key_id)
    assert (seen.tenant, seen.principal, seen.groups, seen.role, seen.unrestricted, seen.name, seen.created_by) == \
        ("acme", "rhea", ("eng", "sales"), "writer", False, "ci", "cli:ops")
    assert abs(seen.expires_at - until) < timedelta(milliseconds=1)
    assert [k.key_id for k in b.list()] == [key.key_id] and b.count_active() == 1
    admin, _ = b.create("acme", "root", "admin", "cli:ops", unrestricted=True)
    assert a.get(admin.key_id).unrestricted is True
    assert [k.key_id for k in a.list(tenant="acme")] == [key.key_id, admin.key_id]  # oldest first
    assert a.list(tenant="globex") == []


def test_a_revocation_on_one_replica_stops_the_key_on_the_other_at_once(replicas):
    a, b = replicas(), replicas()
    key, token = a.create("acme", "rhea", "reader", "cli:ops")
    assert a.verify(token) is not None and a.verify(token, cached_only=True) is not None  # A remembers it
    revoked = b.revoke(key.key_id, "admin (key 0)")
    assert revoked.revoked_by == "admin (key 0)" and revoked.revoked_at is not None
    assert a.verify(token) is None and a.verify(token, cached_only=True) is None
    again = a.revoke(key.key_id, "someone else")  # the first revocation stands
    assert again.revoked_by == "admin (key 0)" and again.revoked_at == revoked.revoked_at
    assert [k.key_id for k in a.list()] == [key.key_id] and a.list(include_revoked=False) == []
    assert b.count_active() == 0


def test_a_pending_key_works_nowhere_until_activated_and_can_be_discarded(replicas):
    a, b = replicas(), replicas()
    key, token = a.create("acme", "rhea", "reader", "cli:ops", pending=True)
    assert b.verify(token) is None and b.get(key.key_id) is None and b.list() == [] and b.count_active() == 0
    with pytest.raises(KeyRequestError):
        b.revoke(key.key_id, "cli:ops")  # not found while pending
    b.activate(key.key_id)
    assert a.verify(token) == key
    with pytest.raises(KeyRequestError):
        a.activate(key.key_id)  # no longer pending
    a.discard(key.key_id)  # an active key stays
    assert b.verify(token) == key
    gone, gone_token = a.create("acme", "ann", "reader", "cli:ops", pending=True)
    b.discard(gone.key_id)
    with pytest.raises(KeyRequestError):
        a.activate(gone.key_id)
    assert a.verify(gone_token) is None and [k.key_id for k in a.list()] == [key.key_id]


def test_an_expired_key_stops_verifying_everywhere(replicas):
    a, b = replicas(), replicas()
    key, token = a.create("acme", "rhea", "reader", "cli:ops", expires_at=datetime.now(UTC) + timedelta(seconds=1))
    assert b.verify(token) == key
    time.sleep(1.1)
    assert b.verify(token) is None and a.verify(token, cached_only=True) is None
    assert b.list(include_revoked=False) == [] and b.count_active() == 0 and len(b.list()) == 1


def test_guessed_and_malformed_tokens_never_verify(replicas):
    a, b = replicas(), replicas()
    key, token = a.create("acme", "rhea", "admin", "cli:ops")
    secret = token.split("_", 2)[2]  # the secret itself may hold "_"
    guesses = [
        f"om_{key.key_id}_{'A' * len(secret)}",  # the right id, a guessed secret
        f"om_0123456789ab_{secret}",  # the right secret under a guessed id
        f"om_{key.key_id}_{secret[:-1]}x" if secret[-1] != "x" else f"om_{key.key_id}_{secret[:-1]}y",
        f"om_{key.key_id.upper()}_{secret}", f"om_*_{secret}", f"om_{key.key_id}_", token + "\n", " " + token,
        "", "om_", key.key_id,
    ]
    # A random hex id may have no letter (1 in about 280): then its upper case spells the real token.
    for guess in [g for g in guesses if g != token]:
        assert b.verify(guess) is None, guess
    for thing in (None, 42, b"om_x", {"key_id": key.key_id}, [token]):
        assert b.verify(thing) is None, thing
    assert b.verify(token) == key  # and the real one still does


def test_hostile_values_are_refused_and_nothing_is_stored(replicas):
    a = replicas()
    future = datetime.now(UTC) + timedelta(days=1)
    hostile = [
        dict(tenant={"$ne": ""}), dict(tenant="acme\nx"), dict(tenant="*"), dict(principal=["rhea"]),
        dict(principal="rhea smith"), dict(groups="eng"), dict(groups=[{"g": 1}]), dict(role=["admin"]),
        dict(role="root"), dict(role="reader", unrestricted=True), dict(unrestricted="yes"), dict(name={"n": 1}),
        dict(name="x" * 201), dict(expires_at="2030-01-01"), dict(expires_at=datetime(2030, 1, 1)),
        dict(expires_at=datetime.now(UTC) - timedelta(seconds=1)), dict(actor={"a": 1}), dict(actor=""),
        dict(expires_at=future + timedelta(days=3650)),
    ]
    for change in hostile:
        request = {"tenant": "acme", "principal": "rhea", "role": "admin", "actor": "cli:ops", **change}
        with pytest.raises(KeyRequestError):
            a.create(request.pop("tenant"), request.pop("principal"), request.pop("role"), request.pop("actor"),
                     **request)
    assert a.list() == [] and a.count_active() == 0


def test_key_ids_that_name_nothing_are_not_found(replicas):
    a, b = replicas(), replicas()
    key, token = a.create("acme", "rhea", "admin", "cli:ops")
    guesses = ["*", "", "../" + key.key_id, key.key_id + "\n", key.key_id.upper(), "0123456789ab",
               {"$gt": ""}, None, 7, [key.key_id]]
    # A random hex id may have no letter (1 in about 280): then its upper case is the id itself.
    for guess in [g for g in guesses if g != key.key_id]:
        assert b.get(guess) is None, guess
        with pytest.raises(KeyRequestError):
            b.revoke(guess, "cli:ops")
        with pytest.raises(KeyRequestError):
            b.activate(guess)
        b.discard(guess)
    with pytest.raises(KeyRequestError):
        b.revoke(key.key_id, "admin of globex", tenant="globex")  # another tenant's key is not there
    with pytest.raises(KeyRequestError):
        b.revoke(key.key_id, {"actor": 1})
    assert a.verify(token) == key and a.get(key.key_id).revoked_at is None


# --- the Redis store only ---------------------------------------------------------------------

@needs_redis
def test_redis_keeps_only_hashes_of_the_secrets(redis_url):
    import redis

    from services.adapters.key_store.api_keys_redis import RedisKeyStore

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = RedisKeyStore(redis_url)
    try:
        _, token = store.create("acme", "rhea", "reader", "cli:ops")
        secret = token.split("_", 2)[2].encode()  # the secret itself may hold "_"
        stored = b"".join(value for name in client.keys("orgmem:api-key:*")
                          for pair in client.hgetall(name).items() for value in pair)
        assert stored and secret not in stored and token.encode() not in stored
    finally:
        store.close()
        client.close()


@needs_redis
def test_redis_without_its_append_only_file_is_refused(tmp_path):
    from services.adapters.key_store.api_keys_redis import RedisKeyStore

    server = Redis(free_port(), tmp_path).start()
    try:
        import redis

        redis.Redis.from_url(server.url).config_set("appendonly", "no")
        with pytest.raises(Invalid, match="append-only"):
            RedisKeyStore(server.url)
    finally:
        server.stop()


def test_redis_unreachable_is_a_backend_failure_naming_the_store():
    from services.adapters.key_store.api_keys_redis import RedisKeyStore

    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="key store"):
        RedisKeyStore(f"redis://127.0.0.1:{free_port()}/0")
    assert time.monotonic() - started < 10


@needs_redis
def test_the_cluster_profile_picks_the_shared_store_and_the_cli_manages_it(redis_url, tmp_path, monkeypatch, capsys):
    import json

    import redis

    from services.adapters.key_store.api_keys_redis import RedisKeyStore
    from services.adapters.key_store.sqlite import SqliteKeyStore
    from services.bootstrap import key_store_for
    from services.cli.main import main
    from services.settings import Settings

    redis.Redis.from_url(redis_url).flushdb()
    cluster = key_store_for(Settings(profile="cluster", data_dir=tmp_path, cluster={"redis_url": redis_url}))
    embedded = key_store_for(Settings(data_dir=tmp_path))
    try:
        assert isinstance(cluster, RedisKeyStore) and isinstance(embedded, SqliteKeyStore)
    finally:
        cluster.close()
        embedded.close()
    # The CLI over the Redis store (an embedded log for its audit events: the cluster's is Kafka).
    monkeypatch.setenv("ORGMEM_AUTH__KEY_STORE", "redis")
    monkeypatch.setenv("ORGMEM_CLUSTER__REDIS_URL", redis_url)
    data = str(tmp_path / "data")
    assert main(["keys", "create", "--data", data, "--principal", "ci", "--role", "reader", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    replica = RedisKeyStore(redis_url)
    try:
        assert replica.verify(created["token"]).key_id == created["key_id"]
        assert main(["keys", "list", "--data", data, "--json"]) == 0
        assert [k["key_id"] for k in json.loads(capsys.readouterr().out)] == [created["key_id"]]
        assert main(["keys", "revoke", "--data", data, created["key_id"]]) == 0
        assert replica.verify(created["token"]) is None
        assert main(["keys", "revoke", "--data", data, "0123456789ab"]) == 2  # a guessed id
    finally:
        replica.close()
