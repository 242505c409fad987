"""The blue/green rebuild's use case (services/app/blue_green.py) over real projections: the
embedded adapters stand for one generation each (a projections folder per name), the log is the
data folder's. The live generation serves unchanged while the next one is built; documents
written meanwhile reach the new one; the names switch only after it has caught up, and the old
generation is retired only after the switch; a failed build switches nothing. (The cluster's
alias switches are tests/adapters/test_blue_green.py.)"""

from __future__ import annotations

import pytest

from services.app.blue_green import rebuild_beside
from services.bootstrap import assemble_memory, embedded_adapters
from tests.integration.test_rebuild import corpus, top_ids

pytestmark = pytest.mark.slow


class Folders:
    """Generations as projections folders; `events` records what happened, in order."""

    def __init__(self, live: str, events: list[str]):
        self.current, self.events = live, events

    def live(self):
        return self.current

    def next(self):
        return f"gen-{int(self.current.split('-')[1]) + 1}"

    def switch(self, new):
        self.events.append(f"switch {new}")
        self.current = new

    def retire(self, old):
        self.events.append(f"retire {old}")


def opener(settings, events: list[str], fail: bool = False):
    def open_aside(names):
        memory = assemble_memory(settings, *embedded_adapters(settings, names[0]))
        events.append(f"open {names[0]}")
        close = memory.close

        def closed():
            events.append(f"close {names[0]}")
            close()
        memory.close = closed
        if fail:
            def broken(progress=None):
                raise RuntimeError("the new generation's store failed")
            memory.catch_up = broken
        return memory
    return open_aside


def test_the_new_generation_is_built_beside_the_live_one_and_switched_to_when_caught_up(settings):
    documents = corpus()
    live = assemble_memory(settings, *embedded_adapters(settings, "gen-1"))
    try:
        live.ingest(documents[:80])
        live.catch_up()
        before = live.counts()
        events: list[str] = []
        served: list[dict] = []

        def progress(position, stats):
            served.append(live.counts())  # readers on the live generation meanwhile
            if len(served) == 1:
                live.ingest(documents[80:])  # written during the rebuild

        stats, counts = rebuild_beside([Folders("gen-1", events)], opener(settings, events), progress=progress)
        assert events == ["open gen-2", "close gen-2", "switch gen-2", "retire gen-1"]
        assert served and all(c == before for c in served)
        rows = counts["rows"]
        assert rows["active"] + rows["archived"] + rows["skipped"] == len(documents) and stats.events == len(documents)
        assert counts["applied_position"] == counts["log_head"]  # caught up when switched
        live.catch_up()  # the live generation's indexer would have applied the new documents too
        rebuilt = assemble_memory(settings, *embedded_adapters(settings, "gen-2"))
        try:
            assert rebuilt.counts() == live.counts()
            assert top_ids(rebuilt) == top_ids(live)
        finally:
            rebuilt.close()
    finally:
        live.close()


def test_a_failed_build_switches_nothing(settings):
    live = assemble_memory(settings, *embedded_adapters(settings, "gen-1"))
    try:
        live.ingest(corpus()[:10])
        live.catch_up()
    finally:
        live.close()
    events: list[str] = []
    generations = Folders("gen-1", events)
    with pytest.raises(RuntimeError, match="failed"):
        rebuild_beside([generations], opener(settings, events, fail=True))
    assert events == ["open gen-2", "close gen-2"] and generations.live() == "gen-1"
