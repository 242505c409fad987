"""A 429 says which limit was hit, for which key or address, the setting behind it and the
environment variable that raises it, with Retry-After."""

from __future__ import annotations

import time

import pytest

from services.api.ratelimit import RateLimiter, env_var, window_text
from tests.conftest import LiveServer, create_key, free_port

pytestmark = pytest.mark.slow


def test_window_text_and_env_var():
    limiter = RateLimiter("50/second;1500/minute;1 per 5 minutes")
    assert [window_text(item) for item in limiter.items] == [
        "50 requests per second", "1500 requests per minute", "1 request per 5 minutes"]
    assert env_var("auth.rate_limit") == "ORGMEM_AUTH__RATE_LIMIT"
    assert env_var("auth.failed_auth_credential_limit") == "ORGMEM_AUTH__FAILED_AUTH_CREDENTIAL_LIMIT"


def test_the_429_names_the_limit_the_caller_the_setting_and_its_variable(tmp_path):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05,
                        auth={"enabled": True, "rate_limit": "3/minute", "failed_auth_limit": "2/minute"})
    admin = create_key(settings.data_dir)
    memory, lock = build_memory(settings)
    try:
        with LiveServer(create_app(settings, memory), free_port(), admin) as server:
            if 60 - time.time() % 60 < 15:  # keep the burst inside one window of the sliding counter
                time.sleep(60 - time.time() % 60 + 0.05)
            statuses = [server.client.get("/v1/stats").status_code for _ in range(4)]
            assert statuses[:3] == [200] * 3 and statuses[3] == 429
            limited = server.client.get("/v1/stats")
            body = limited.json()
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
            key_id = admin.split("_")[1]
            for part in ("3 requests per minute", f"key:{key_id}", "auth.rate_limit", "ORGMEM_AUTH__RATE_LIMIT",
                         f"retry in {limited.headers['retry-after']} s"):
                assert part in body["detail"], body["detail"]
            assert admin not in limited.text  # the key id, never the secret

            bad = {"Authorization": "Bearer om_000000000000_" + "B" * 43}
            failed = [server.client.get("/v1/stats", headers=bad) for _ in range(4)]
            assert [f.status_code for f in failed] == [401, 401, 429, 429]
            detail = failed[-1].json()["detail"]
            for part in ("2 requests per minute", "127.0.0.1", "ORGMEM_AUTH__FAILED_AUTH_LIMIT"):
                assert part in detail, detail
            assert int(failed[-1].headers["retry-after"]) >= 1
    finally:
        memory.close()
        lock.release()


@pytest.mark.parametrize("where", ["memory", "redis"])
def test_failure_windows_are_exact_across_a_window_boundary(where, tmp_path):
    # "3 per 2 seconds" means at most 3 in any 2 s, also when the hits straddle the clock's
    # window boundary (a window counter weighted the previous window and let a 4th through), and
    # two API processes sharing Redis spend one budget.
    import shutil

    from tests.integration.test_celery_redis import Redis
    if where == "memory":
        first = second = RateLimiter("3 per 2 seconds")
        server = None
    else:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server not installed (apt-get install redis-server)")
        server = Redis(free_port(), tmp_path).start()
        first, second = (RateLimiter("3 per 2 seconds", server.url) for _ in range(2))
    try:
        time.sleep(2 - time.time() % 2 + 1.7)  # the hits land 0.3 s before a boundary of the 2 s clock
        verdicts = [limiter.hit("198.51.100.9").allowed for limiter in (first, second, first)]
        time.sleep(0.6)  # now 0.3 s past the boundary: all three are still inside the last 2 s
        verdicts += [second.hit("198.51.100.9").allowed, first.hit("198.51.100.9").allowed]
        assert verdicts == [True, True, True, False, False]
        time.sleep(2.0)
        assert first.hit("198.51.100.9").allowed  # the window moved past them
    finally:
        if server is not None:
            server.stop()
