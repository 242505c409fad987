"""The one contract every source implements (chat, documents, mail, tickets, meetings).

A source reads an export (a folder or a .zip, seen through an `ExportTree`) and yields what it
finds, in a stable order:

- `Version`: one version of one source item, as a whole, dated, attributed document. `item` is
  the item's id in the source (a Slack thread `C123/1700000000.000100`, a page id); `version`
  tells its versions apart ('' when the source has one version only). Two runs over the same
  export yield the same items and versions, so a rerun adds nothing. `readers` are the source's
  own user and group ids who may read it (a private channel's members); `private=True` with no
  readers means nobody but an unrestricted reader, never the whole tenant. `parts` are the ids of
  the pieces the version is made of (the messages of a thread): a later version that lacks one
  of them means that piece was deleted in the source, so the earlier versions, which still hold
  it, are removed (the source's deletion policy) rather than merely superseded. `part_dates`
  (optional) gives each part's ISO date: a source whose exports cover a date range
  (`dated_exports`, a Slack export of last week) fills it so that a lost part dated outside the
  dates the run saw for its container reads as outside the export, not as deleted.
- `Removed`: the export itself says an item is gone (a tombstone).
- `DeadLetter`: something that could not be read; the rest of the run goes on.

The runner (`services/connectors/runner.py`) owns everything else for every source: the cursor,
the source's access map, supersession of an earlier version, deletions (an item the previous run
saw that this one does not), dead letters and batching into the sink.

Adding a source means one module under `services/connectors/sources/` with a class that has a
`name` and a `read(tree, options)` method, registered in `services/connectors/sources/__init__.py`,
and its tests under `tests/unit/connectors/sources/`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from schemas.documents import DocumentIn
from services.connectors.base import DeadLetter

# One member of an export read whole (a channel's day, a page, an attachment): a larger one is a
# dead letter naming the cap, never read into memory.
MAX_MEMBER_BYTES = 64 * 1024 * 1024


class MemberRefused(Exception):
    """A member of an export that is not read: too large, a link, outside the export, a bomb."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


class ExportTree(Protocol):
    """An export's files, by relative POSIX path, read without extracting anything to disk."""

    label: str  # what dead letters name: the folder or archive path

    def names(self) -> list[str]:
        """Every regular file's relative path ('channels.json', 'general/2024-01-02.json'), sorted."""
        ...

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        """The member's bytes; MemberRefused when it is absent, refused or larger than `limit`."""
        ...


@dataclass(frozen=True)
class Version:
    item: str
    version: str
    document: DocumentIn
    readers: tuple[str, ...] = ()
    private: bool = False
    parts: frozenset[str] = frozenset()
    # The source's id of the group the readers form (a private channel): when the access map maps
    # it to an orgmem group, that group stands for the members (a channel of 5,000 people is one
    # entry, not 5,000, past the access list's cap).
    group: str = ""
    # part -> its ISO date. Empty (a source that gives none): every lost part reads as deleted.
    part_dates: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Removed:
    item: str
    reason: str = "deleted in the source"


Found = Version | Removed | DeadLetter


class Source(Protocol):
    """One kind of export. `name` is the rows' `source` and names the cursor; `read` yields what
    the tree holds, each item's versions oldest first."""

    name: str

    def read(self, tree: ExportTree, options: Mapping[str, object]) -> Iterator[Found]:
        ...


@dataclass
class MemoryTree:
    """An export held in memory: for tests and for members nested inside another file."""

    files: dict[str, bytes] = field(default_factory=dict)
    label: str = "<memory>"

    def names(self) -> list[str]:
        return sorted(self.files)

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        if name not in self.files:
            raise MemberRefused(name, "no such member")
        data = self.files[name]
        if len(data) > limit:
            raise MemberRefused(name, f"over {limit} bytes ({len(data)} bytes), not read")
        return data


def source_id_of(version: Version) -> str:
    """The rows' `source_id` of one version: the item, and the version when the item has several."""
    return f"{version.item}@{version.version}" if version.version else version.item
