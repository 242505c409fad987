"""The last steps of a tiered index's build, after the copy: the child process builds the sealed
shard, its host opens it, and the swap publishes it with the moves made meanwhile replayed. A
base class of TieredEdgeVectorIndex (qdrant_edge_tiers.py), apart so each module stays short;
it uses the index's own fields (_cancel, _child, _journal, _published, _on_step, path, dim)."""

from __future__ import annotations

from pathlib import Path

from services.adapters.vector.qdrant_edge_build import BuildFailed, check_built, start_build
from services.adapters.vector.qdrant_edge_host import HostedShard
from services.adapters.vector.qdrant_edge_manifest import Shard, Tiers, write_manifest


class BuildSwap:
    def _run_child(self, target: Path, inputs: Path) -> None:
        if self._cancel.is_set():
            raise BuildFailed("cancelled before the build started")
        self._child = child = start_build(target, inputs, self.dim)
        if self._cancel.is_set():  # cancelled while it started: _stop_build may not have seen it
            child.kill()
        self._on_step("child-started")
        try:
            _, err = child.communicate()
        finally:
            self._child = None
        if self._cancel.is_set():
            raise BuildFailed("cancelled")
        check_built(child, err, target)
        self._on_step("built")

    def _open_built(self, target: Path) -> HostedShard:
        """The new sealed shard, opened by its host while searches and writes go on (the writes
        meanwhile are in the journal, replayed at the swap)."""
        if self._cancel.is_set():
            raise BuildFailed("cancelled")
        return self._shard(target.name)

    def _swap_in(self, replaced: tuple[Shard, ...], sealed: HostedShard) -> None:
        if self._cancel.is_set():
            sealed.close()
            raise BuildFailed("cancelled")
        journal, self._journal = self._journal, None
        old = self._tiers
        new = Tiers((*(s for s in old.sealed if s not in replaced), sealed),
                    tuple(s for s in old.exact if s not in replaced))
        try:
            if journal.states:
                sealed.update_state(list(journal.states.values()))
            if journal.moved:
                sealed.discard(sorted(journal.moved))
            write_manifest(self.path, new)
        except BaseException:
            sealed.close()
            raise
        self._published.publish(new)
        self._on_step("swapped")
