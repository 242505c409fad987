"""The OpenAI-compatible embeddings adapter against a local server that speaks the protocol
(bench/embedding_server.py): batching, order, unit norm, the model and dimension checked at start,
retries with backoff honouring Retry-After, and failures that name the embedder."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.embedding_server import Behaviour, EmbeddingServer, hash_vectors
from services.adapters.embedder.openai_compat import OpenAICompatEmbedder
from services.errors import BackendUnavailable, OrgmemError


@pytest.fixture
def server():
    with EmbeddingServer(Behaviour(dim=16)) as running:
        yield running


def embedder(server, **options):
    options = {"dim": 16, "backoff_s": 0.01, "timeout_s": 2.0, **options}
    return OpenAICompatEmbedder(server.url, server.behaviour.model, **options)


def test_vectors_come_back_in_input_order_unit_norm_and_batched(server):
    remote = embedder(server, batch_size=4, concurrency=3)
    texts = [f"document number {i}" for i in range(10)]
    vectors = remote.encode(texts)
    expected = hash_vectors(texts, 16)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert vectors.shape == (10, 16) and vectors.dtype == np.float32
    assert np.allclose(vectors, expected, atol=1e-6)  # the server answers in reverse: order is by index
    assert sorted(server.behaviour.requests[1:]) == [2, 4, 4]  # after the one-text probe at start
    assert remote.encode([]).shape == (0, 16)
    remote.close()


def test_the_dimension_and_model_are_checked_at_start(server):
    with pytest.raises(OrgmemError, match="embedder.dim.*16-dimensional.*384"):
        embedder(server, dim=384)
    with pytest.raises(OrgmemError, match="HTTP 404"):
        OpenAICompatEmbedder(server.url, "another-model", dim=16)
    discovered = OpenAICompatEmbedder(server.url, server.behaviour.model)  # no dim set: taken from the probe
    assert discovered.dim == 16
    discovered.close()


def test_429_and_503_are_retried_honouring_retry_after(server):
    remote = embedder(server)
    server.behaviour.requests.clear()
    server.behaviour.fail_first, server.behaviour.retry_after = 2, "0.3"
    started = time.monotonic()
    assert remote.encode(["a", "b"]).shape == (2, 16)
    assert time.monotonic() - started >= 0.6  # two waits of Retry-After
    assert len(server.behaviour.requests) == 3
    server.behaviour.requests.clear()
    server.behaviour.fail_first, server.behaviour.fail_status, server.behaviour.retry_after = 1, 503, None
    assert remote.encode(["c"]).shape == (1, 16)
    remote.close()


def test_an_endpoint_that_keeps_failing_is_backend_unavailable(server):
    remote = embedder(server, max_retries=2)
    server.behaviour.requests.clear()
    server.behaviour.fail_first, server.behaviour.fail_status = 100, 503
    with pytest.raises(BackendUnavailable, match="HTTP 503 after 3 attempts") as caught:
        remote.encode(["a"])
    assert caught.value.component.startswith("embedder")
    remote.close()


def test_a_stalled_endpoint_times_out(server):
    remote = embedder(server, max_retries=1, timeout_s=0.3)
    server.behaviour.stall_s = 1.0
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="timed out"):
        remote.encode(["a"])
    assert time.monotonic() - started < 3
    remote.close()


def test_a_short_answer_is_refused_not_padded(server):
    remote = embedder(server)
    server.behaviour.wrong_count = True
    with pytest.raises(BackendUnavailable, match="1 embeddings for 2 texts"):
        remote.encode(["a", "b"])
    remote.close()


def test_the_api_key_is_sent_but_never_shown(server):
    remote = embedder(server, api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(remote)
    assert remote._client.headers["authorization"] == "Bearer sk-very-secret"
    remote.close()


def test_the_settings_wire_the_backend(server):
    from services.bootstrap import embedder_for
    from services.settings import EmbedderSettings

    wired = embedder_for(EmbedderSettings(backend="openai", model=server.behaviour.model, endpoint_url=server.url,
                                          dim=16))
    assert wired.dim == 16 and wired.encode(["x"]).shape == (1, 16)
