"""The client's pure parts: retry delays, Retry-After parsing, and errors from problem details."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
from hypothesis import given
from hypothesis import strategies as st

from orgmem.client import (
    ClientError,
    Conflict,
    InvalidRequest,
    OrgmemError,
    RetryPolicy,
    ServerError,
    Unavailable,
)
from orgmem.client.errors import error_for
from orgmem.client.retry import parse_retry_after


@given(retry=st.integers(1, 30), seed=st.integers(0, 2**32), retry_after=st.none() | st.floats(0, 100))
def test_a_delay_is_jittered_under_its_ceiling_and_never_under_retry_after(retry, seed, retry_after):
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0)
    delay = policy.delay(retry, retry_after, random.Random(seed))
    ceiling = min(4.0, 0.5 * 2 ** (retry - 1))
    if retry_after is None:
        assert 0 <= delay <= ceiling
    else:
        assert delay == max(retry_after, delay) and delay <= max(retry_after, ceiling)


def test_delays_spread_out():
    policy, rng = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0), random.Random(7)
    draws = {round(policy.delay(3, None, rng), 3) for _ in range(50)}
    assert len(draws) > 40 and max(draws) <= 4.0


def test_retry_after_in_seconds_or_as_a_date():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0.0
    for garbage in (None, "", "soon", "-5", "1e9999", "Mon, 99 Foo 2026"):
        assert parse_retry_after(garbage, now) is None


def answer(status: int, body: bytes, content_type: str = "application/problem+json") -> httpx.Response:
    return httpx.Response(status, content=body, headers={"Content-Type": content_type})


def test_errors_carry_the_problem_details():
    error = error_for(answer(422, b'{"type": "https://orgmem.dev/problems/invalid-request", "title": "Invalid request",'
                                  b' "status": 422, "detail": "q: too short", "errors": [{"field": "q", "problem": '
                                  b'"too short"}]}'))
    assert type(error) is InvalidRequest and isinstance(error, ClientError) and isinstance(error, OrgmemError)
    assert error.fields == ["q"] and error.detail == "q: too short" and "422 Invalid request" in str(error)
    conflict = error_for(answer(409, b'{"title": "Run cannot be reverted", "status": 409, "detail": "reverted", '
                                     b'"run_id": "run_1"}'))
    assert type(conflict) is Conflict and conflict.problem.run_id == "run_1"


def test_an_answer_without_problem_details_still_raises_by_its_family():
    proxy = error_for(answer(502, b"<html>bad gateway</html>", "text/html"))
    assert type(proxy) is ServerError and proxy.status == 502 and "bad gateway" in proxy.detail
    teapot = error_for(answer(418, b"[1, 2]", "application/json"))
    assert type(teapot) is ClientError and teapot.status == 418
    assert type(error_for(answer(503, b"{}"), retry_after_s=1.0)) is Unavailable
