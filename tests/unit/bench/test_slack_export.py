"""bench/slack_export.py's generator: the export it writes holds what its manifest says, reads back
through the Slack source with one version per thread, and is the same for the same seed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bench.slack_export import MPIMS, PRIVATE, PUBLIC, access_map, generate, write_mbox
from services.connectors.access import AccessMap
from services.connectors.base import DeadLetter
from services.connectors.contract import MemoryTree, Version
from services.connectors.mail_files import iter_mbox
from services.connectors.sources.slack import SlackSource


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_export_holds_what_the_manifest_says(tmp_path):
    manifest = generate(tmp_path / "export", messages=600, seed=3)
    files = _files(tmp_path / "export")
    meta = {name: json.loads(files[name]) for name in ("users.json", "channels.json", "groups.json", "mpims.json",
                                                       "dms.json")}
    assert len(meta["channels.json"]) == PUBLIC and len(meta["groups.json"]) == PRIVATE
    assert len(meta["mpims.json"]) == MPIMS and len(meta["dms.json"]) == manifest["dms"] > 0
    assert len(meta["users.json"]) == manifest["users"]
    entries = [m for name, data in files.items() if name.count("/") == 1 for m in json.loads(data)]
    assert len(entries) == manifest["messages"] == 600 and len({m["ts"] for m in entries}) == 600
    assert sum(m.get("subtype") == "tombstone" for m in entries) == manifest["deleted"] >= 3
    assert sum("edited" in m for m in entries) == manifest["edited"] > 0
    starters = {m["ts"] for m in entries if m.get("thread_ts", m["ts"]) == m["ts"]}
    answered = {m["thread_ts"] for m in entries if m.get("thread_ts", m["ts"]) != m["ts"]}
    assert len(starters) == manifest["thread_documents"] and answered <= starters
    assert len(answered) == manifest["threads"] > 50
    # Every tombstone is a starter whose replies stay: its thread is still a document.
    assert {m["ts"] for m in entries if m.get("subtype") == "tombstone"} <= answered


def test_it_reads_back_through_the_slack_source_with_one_version_per_thread(tmp_path):
    manifest = generate(tmp_path / "export", messages=600, seed=3)
    source = SlackSource()
    found = list(source.read(MemoryTree(_files(tmp_path / "export")), {}))
    assert [f for f in found if isinstance(f, DeadLetter)] == []
    versions = [f for f in found if isinstance(f, Version)]
    assert len(versions) == manifest["thread_documents"]
    assert sum(v.private for v in versions) == manifest["private_thread_documents"] > 0
    assert source.counts["deleted"] == manifest["deleted"]
    assert sum(len(v.parts) for v in versions) == manifest["text_messages"]
    assert sum(v.document.text.count(" (edited): ") for v in versions) == manifest["edited"]
    assert Counter(len(v.parts) > 1 for v in versions)[True] >= manifest["threads"] - manifest["deleted"]
    # The bench's access map names every member: nobody is unmapped, no private thread goes public.
    access = AccessMap.from_dict(access_map())
    for version in versions:
        acl = access.acl("slack", version.readers, version.private, [], version.group)
        assert bool(acl) == version.private
    assert not access.unmapped


def test_the_same_seed_writes_the_same_export_and_another_seed_another(tmp_path):
    first, again, other = (tmp_path / name for name in ("a", "b", "c"))
    assert generate(first, 200, seed=5) == generate(again, 200, seed=5)
    assert _files(first) == _files(again)
    generate(other, 200, seed=6)
    assert _files(first) != _files(other)


def test_the_mbox_holds_as_many_messages(tmp_path):
    path = tmp_path / "bench.mbox"
    assert write_mbox(path, 120, seed=5) == 120
    with path.open("rb") as handle:
        messages = [raw for raw, problem in iter_mbox(handle) if problem is None]
    assert len(messages) == 120
    assert len({m.split(b"Message-ID: ", 1)[1].split(b"\n", 1)[0] for m in messages}) == 120
    assert sum(b"In-Reply-To: " in m for m in messages) > 20
    write_mbox(tmp_path / "again.mbox", 120, seed=5)
    assert (tmp_path / "again.mbox").read_bytes() == path.read_bytes()
