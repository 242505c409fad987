"""The server freezes what start-up built, so that the collector's full passes skip it (a pass over
the whole heap was ~50 ms at 12k rows, a few per thousand queries), and thaws it at shutdown."""

from __future__ import annotations

import gc

from tests.conftest import LiveServer, create_key, free_port


def test_start_up_objects_are_frozen_while_serving_and_thawed_after(settings, memory):
    from services.api.app import create_app

    assert gc.get_freeze_count() == 0
    app = create_app(settings, memory)
    with LiveServer(app, free_port(), create_key(settings.data_dir)) as server:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # modules, the app, its routes and models: far more than a few objects
        assert server.client.post("/v1/query", json={"q": "anything"}).status_code == 200
        assert gc.get_freeze_count() > 10_000  # still frozen after a query
    assert gc.get_freeze_count() == 0  # nothing the next server (or test) leaves stays uncollectable
