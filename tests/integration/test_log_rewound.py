"""Positions are never reused silently: when the log holds fewer events than the projections have
applied (a broker that lost its data and hands positions out again), the indexer stops and says
why, and /readyz and /metrics say so, instead of skipping the new events as already applied."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi import Response

from schemas.documents import DocumentIn
from services.adapters.event_log.sqlite import SqliteEventLog
from services.api.routes.ops import readyz
from services.app.indexer import GroupIndexer, LogFeed
from services.core.caller import SYSTEM
from services.errors import LogRewound

pytestmark = pytest.mark.slow


def docs(n: int, prefix: str) -> list[DocumentIn]:
    return [DocumentIn(text=f"{prefix} decision {i}: the budget is {i * 11} k", author="ana@corp.example")
            for i in range(n)]


class ResetFeed(LogFeed):
    """A consumer whose seek past the end falls back to the earliest offset (Kafka's
    auto_offset_reset=earliest after the broker lost the topic)."""

    def seek(self, position: int) -> None:
        self.after = position if position <= self.log.head() else 0


@pytest.fixture
def lost_log(tmp_path):
    """The log after the loss: two new events at positions 1 and 2."""
    log = SqliteEventLog(tmp_path / "lost.sqlite")
    from services.app.memory import append_documents

    append_documents(log, docs(2, "after the loss"), SYSTEM)
    yield log
    log.close()


def test_a_feed_that_hands_out_old_positions_stops_the_indexer(memory, lost_log):
    memory.ingest(docs(5, "before"))
    memory.catch_up()
    checkpoint = memory.checkpoint()
    assert checkpoint >= 5
    indexer = GroupIndexer(memory.projection, ResetFeed(lost_log), memory.checkpoints, poll_s=0.01)
    with pytest.raises(LogRewound, match="handed out position 1 again"):
        indexer.step()
    indexer.run()  # returns at once: it does not retry a rewound log
    assert indexer.halted and "lost events" in indexer.halted
    assert memory.checkpoint() == checkpoint  # nothing was skipped as applied


def test_an_idle_feed_checks_the_head(memory, lost_log):
    memory.ingest(docs(5, "before"))
    memory.catch_up()
    indexer = GroupIndexer(memory.projection, LogFeed(lost_log), memory.checkpoints, poll_s=0.01,
                           heads=lost_log.heads, head_check_s=0)
    indexer.run()
    assert indexer.halted and "behind the projections' checkpoint (head 2 < checkpoint" in indexer.halted


def test_readyz_and_metrics_name_a_log_behind_the_projections(memory, lost_log, settings):
    memory.ingest(docs(5, "before"))
    memory.catch_up()
    rewound_memory = SimpleNamespace(heads=lost_log.heads, projection=memory.projection, problems={},
                                     counts=memory.counts,
                                     lag=lambda heads: lost_log.backlog(memory.applied, heads.of(0)),
                                     vector_status=lambda: None)
    state = SimpleNamespace(settings=settings, memory=rewound_memory, parts=SimpleNamespace(disk=None),
                            indexer=SimpleNamespace(is_alive=lambda: True, paused=False, errors=0))
    response = Response()
    body = readyz(state, response)
    assert response.status_code == 503 and body["status"] == "log-behind" and body["lag"] < 0
    assert "lost events" in body["reason"]

    from services.api.metrics import Metrics
    from services.api.routes.ops import metrics

    state.metrics = Metrics()
    text = metrics(state).body.decode()
    assert "orgmem_log_behind_projections 1.0" in text
