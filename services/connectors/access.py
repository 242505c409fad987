"""Who may read what a source holds: its user and group ids mapped to orgmem principals and groups.

A source says who may read a version in its own ids (`Version.readers`: a private channel's
members, a page's viewers). The access map, a JSON file or the API's request, turns them into
access-list entries:

    {"users": {"U123": "dana@example.com"}, "groups": {"C42": "eng", "G7": "finance"}}

An id the map does not know becomes an entry that grants nobody — `user:~slack:U999` (no key's
principal or group can start with "~", so nobody holds that token) — and is counted, so that a
private channel with members nobody mapped is readable by an unrestricted reader only, never by
the whole tenant. A private version with no readers at all gets `user:~<source>:nobody` for the
same reason: an empty access list means the whole tenant.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.connectors.paths import PathGuard
from services.core.scope import GROUP, USER
from services.errors import Invalid

MAX_MAP_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 500_000
# What orgmem accepts as a principal or group name (services/core/keys.py), without the kind prefix.
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+:/=-]{0,127}")
NOBODY = "~"  # the first character of an entry no principal or group can hold


@dataclass
class AccessMap:
    users: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    unmapped: Counter = field(default_factory=Counter)  # source id -> how often it was met unmapped

    @classmethod
    def from_dict(cls, raw: object, where: str = "access map") -> AccessMap:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping) or set(raw) - {"users", "groups"}:
            raise Invalid(f"{where}: an object with 'users' and/or 'groups', each mapping source ids to names")
        found: dict[str, dict[str, str]] = {}
        for part in ("users", "groups"):
            table = raw.get(part, {})
            if not isinstance(table, Mapping):
                raise Invalid(f"{where}: '{part}' must map source ids to names")
            if len(table) > MAX_ENTRIES:
                raise Invalid(f"{where}: '{part}' has {len(table)} entries, over {MAX_ENTRIES}")
            for key, value in table.items():
                if not isinstance(key, str) or not key or len(key) > 256:
                    raise Invalid(f"{where}: {part}: source ids are non-empty strings of at most 256 characters")
                if not isinstance(value, str) or not _TARGET.fullmatch(value):
                    raise Invalid(f"{where}: {part}.{key[:64]}: {str(value)[:64]!r} is not a principal or group name "
                                  "(letters, digits and ._@+:/=- , at most 128)")
            found[part] = dict(table)
        return cls(found.get("users", {}), found.get("groups", {}))

    @classmethod
    def from_file(cls, path: str | Path, guard: PathGuard | None = None) -> AccessMap:
        try:
            if guard is not None:
                with guard.open(path) as handle:
                    data = handle.read(MAX_MAP_BYTES + 1)
            else:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_MAP_BYTES + 1)
        except OSError as exc:
            raise Invalid(f"access map {path}: cannot read ({exc.strerror or exc})") from None
        if len(data) > MAX_MAP_BYTES:
            raise Invalid(f"access map {path}: over {MAX_MAP_BYTES} bytes")
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise Invalid(f"access map {path}: not JSON ({exc})") from None
        return cls.from_dict(raw, f"access map {path}")

    def entry(self, source: str, source_id: str) -> str:
        """The access-list entry of one source id: its user, else its group, else one for nobody."""
        if source_id in self.users:
            return USER + self.users[source_id]
        if source_id in self.groups:
            return GROUP + self.groups[source_id]
        self.unmapped[source_id] += 1
        return f"{USER}{NOBODY}{source}:{source_id}"[:1024]

    def acl(self, source: str, readers: tuple[str, ...], private: bool, own: list[str], group: str = "") -> list[str]:
        """The access list of a version: the document's own entries and its readers' entries (or
        the mapped group they form). A version that is private never ends with an empty list
        (which would mean everyone)."""
        if group and group in self.groups:
            entries = list(own) + [GROUP + self.groups[group]]
        else:
            entries = list(own) + [self.entry(source, r) for r in readers]
        if private and not entries:
            entries = [f"{USER}{NOBODY}{source}:nobody"]
        return list(dict.fromkeys(entries))
