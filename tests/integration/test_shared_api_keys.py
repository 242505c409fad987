"""Two API replicas over one Redis key store, through HTTP: a key an admin creates on replica A
authenticates on replica B, and its revocation on B is refused on A at the next request. (Each
replica has its own embedded data folder here; in the cluster they share Kafka, ES and Qdrant
as well, which changes nothing on the auth path.)"""

from __future__ import annotations

import shutil
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient

from tests.conftest import free_port
from tests.integration.test_celery_redis import Redis

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server not installed (apt-get install redis-server)")


def test_a_key_created_on_one_replica_works_on_the_other_until_revoked_there(tmp_path):
    from services.adapters.key_store.api_keys_redis import RedisKeyStore
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    server = Redis(free_port(), tmp_path).start()
    with ExitStack() as stack:
        stack.callback(server.stop)
        seed = RedisKeyStore(server.url)
        _, root = seed.create("acme", "root", "admin", "tests", unrestricted=True)
        seed.close()
        replicas = []
        for name in ("a", "b"):
            settings = Settings(data_dir=tmp_path / name, indexer_poll_s=0.05, cluster={"redis_url": server.url},
                                auth={"key_store": "redis", "rate_limit": "", "failed_auth_limit": ""})
            memory, lock = build_memory(settings)
            stack.callback(lock.release)
            stack.callback(memory.close)
            replicas.append(stack.enter_context(TestClient(create_app(settings, memory))))
        a, b = replicas
        admin = {"Authorization": f"Bearer {root}"}
        created = a.post("/v1/admin/keys", json={"principal": "rhea", "role": "reader"}, headers=admin)
        assert created.status_code == 201, created.text
        key_id, token = created.json()["key"]["key_id"], created.json()["token"]
        reader = {"Authorization": f"Bearer {token}"}  # a reader: a missing row is 404, not 401 or 403
        assert b.get("/v1/rows/r-none", headers=reader).status_code == 404
        assert a.get("/v1/rows/r-none", headers=reader).status_code == 404
        assert [k["key_id"] for k in b.get("/v1/admin/keys", headers=admin).json()["keys"]][-1] == key_id
        assert b.post("/v1/admin/keys", json={"principal": "x", "role": "reader"}, headers=reader).status_code == 403
        assert b.delete(f"/v1/admin/keys/{key_id}", headers=admin).status_code == 200
        assert a.get("/v1/rows/r-none", headers=reader).status_code == 401
        assert b.get("/v1/rows/r-none", headers=reader).status_code == 401
        assert a.delete("/v1/admin/keys/0123456789ab", headers=admin).status_code == 404  # a guessed id
