"""A people directory: which author and participant strings of rows are the same human.

Pure and conservative on purpose: two strings become one person only by an exact address
match (case-insensitive), a display name written with its address in one string
("Dana Lee <dana@acme.example>"), or an explicit mapping (alias -> person id). There is no
fuzzy step: "Dana Lee" and "Dana Li", "dana@acme" and "dana@acme-corp", or two people who
share a first name stay apart, because a wrong merge would show one person's rows on
another's page, and a missed merge only costs a mapping line.

The directory is built from the rows a caller may read, so names met only in other rows
never enter it (access holds by construction, not by a filter applied afterwards).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.rows import Row

MAX_ALIAS_CHARS = 320  # an address is at most 254; room for a display name in front
MAX_PERSON_ID_CHARS = 64
_ADDRESS = re.compile(r"^[^\s@<>]+@[^\s@<>]+$")
_NAMED_ADDRESS = re.compile(r"^(?P<name>[^<>]*?)\s*<(?P<address>[^<>]+)>$")
_PERSON_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


class BadMapping(ValueError):
    """The alias mapping is not a flat object of alias strings to person-id strings."""


@dataclass(frozen=True)
class Identity:
    """What one source string says: a display name, an address, or both."""

    name: str | None
    address: str | None


@dataclass
class Person:
    person_id: str
    display_name: str
    aliases: set[str] = field(default_factory=set)
    addresses: set[str] = field(default_factory=set)
    roles: dict[str, int] = field(default_factory=dict)


def clean(text: object) -> str | None:
    """The alias as the directory keeps it, or None when it is not one: too long, or holding
    control, format (RTL/LRM marks, zero-width) or unassigned characters that would let two
    strings look identical while differing."""
    if not isinstance(text, str):
        return None
    text = " ".join(text.split())
    if not text or len(text) > MAX_ALIAS_CHARS:
        return None
    if any(unicodedata.category(ch) in {"Cc", "Cf", "Cn", "Co", "Cs"} for ch in text):
        return None
    return text


def parse(text: object) -> Identity | None:
    """Split a source string into display name and address; None when it is not usable."""
    text = clean(text)
    if text is None:
        return None
    named = _NAMED_ADDRESS.match(text)
    if named:
        address = named["address"].strip().lower()
        if not _ADDRESS.match(address):
            return Identity(text, None)
        return Identity(named["name"].strip().strip('"').strip() or None, address)
    if _ADDRESS.match(text):
        return Identity(None, text.lower())
    return Identity(text, None)


def check_mapping(raw: object) -> dict[str, str]:
    """An explicit alias -> person id mapping (a file's JSON object or an API body), checked."""
    if not isinstance(raw, Mapping):
        raise BadMapping("the mapping must be an object of alias to person id")
    checked: dict[str, str] = {}
    for alias, person_id in raw.items():
        if not isinstance(alias, str) or not isinstance(person_id, str):
            raise BadMapping(f"mapping entry {str(alias)[:40]!r}: alias and person id must be strings")
        key = clean(alias)
        if key is None:
            raise BadMapping(f"mapping alias {alias[:40]!r}: empty, over {MAX_ALIAS_CHARS} "
                             "characters, or holding control/format characters")
        if len(person_id) > MAX_PERSON_ID_CHARS or not _PERSON_ID.match(person_id):
            raise BadMapping(f"mapping person id {person_id[:40]!r}: letters, digits, '.', '_', "
                             f"':', '-' only, at most {MAX_PERSON_ID_CHARS} characters")
        checked[_key(key)] = person_id
    return checked


def _key(alias: str) -> str:
    identity = parse(alias)
    if identity and identity.address and identity.name is None:
        return "a:" + identity.address
    return "s:" + alias.casefold()


def _derived_id(kind: str, value: str) -> str:
    return "p-" + hashlib.sha256(f"{kind}:{value}".encode()).hexdigest()[:16]


class _Groups:
    """Union-find over node keys ("a:" address, "n:" bare display name, "m:" mapped id)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, node: str) -> str:
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


_SELF = "self"  # another form of a person the row already names: counted as an alias, not a role
ROLES = ("author", "recipient", "attendee", "assignee", "mentioned", "participant")
# What a participant is, by the row's kind: a mail's To/Cc are its recipients, a meeting's
# participants its attendees; a ticket's are its reporter, assignee and commenters, and the one
# its "assignee:" tag names is the assignee. A "mention:" tag (a chat message's @-mention of a
# known user) names someone the row speaks of, who need not have written in it.
_PARTICIPANT_ROLE = {"email": "recipient", "meeting": "attendee"}
_ROLE_RANK = {role: rank for rank, role in enumerate(ROLES)}


# A name its bearer sets (a chat display name, a speaker label of a transcript) is not proof of an
# address: "Dana Lee <dana@acme.example>" or "dana@acme.example" as one would join its bearer to
# Dana's mail identity by an exact address match, and grant Dana's access where access lists are
# made from participants. Such names are kept with look-alike signs, so they never parse as one.
_NOT_AN_ADDRESS = str.maketrans({"@": "＠", "<": "‹", ">": "›"})


def self_named(name: str) -> str:
    """A self-chosen name as rows carry it: readable as written, never an address."""
    return name.translate(_NOT_AN_ADDRESS)


def named_address(name: str | None, address: str | None) -> str | None:
    """"Name <address>" for a display name a source gives with its address (a mail's From, a Jira
    user), which joins the two in the directory; None when the name is empty, is the address, or
    holds what could make it read as another address."""
    name = " ".join((name or "").split())
    if not name or not address or any(ch in name for ch in "<>@") or name.lower() == address.lower():
        return None
    return f"{name} <{address}>"


def mention_tags(names) -> list[str]:
    """The "mention:" tags a connector writes for the known users a row @-mentions."""
    return [f"mention:{name}" for name in dict.fromkeys(n.strip() for n in names if n and n.strip())]


class _Parsed(dict):
    """Each distinct string read once: 100k rows name a few hundred people. The value is
    (address, case-folded display name, both given), or None for a string that is no one."""

    def __missing__(self, text: str) -> tuple[str | None, str | None, bool] | None:
        identity = parse(text)
        self[text] = None if identity is None else (
            identity.address, identity.name.casefold() if identity.name else None,
            bool(identity.name and identity.address))
        return self[text]


_NOBODY = (None, None, False)


def row_people(kind: str, author: str | None, participants, tags, parsed: _Parsed | None = None
               ) -> list[tuple[str, str]]:
    """(role, string as written) of everyone a row names besides its author, each string once.

    A participant that is only another form of someone the row already names is `_SELF`: a
    mail names its sender among the participants as "Name <address>" (the author is the bare
    address), a ticket its author and assignee as the address and as "Name <address>". Such a
    form is an alias of that person, not a second role."""
    parsed = _Parsed() if parsed is None else parsed
    assignees: set[str] = set()
    mentions: list[str] = []
    for tag in tags or ():
        prefix, _, value = tag.partition(":")
        prefix, value = prefix.strip().lower(), value.strip()
        if value and prefix == "assignee":
            assignees.add(value.casefold())
        elif value and prefix == "mention":
            mentions.append(value)
    own, own_name, _ = (parsed[author] or _NOBODY) if author else _NOBODY
    if own is not None:
        own_name = None  # a mail's author is an address; a ticket's or a meeting's is a name
    read = [(p, parsed[p] or _NOBODY) for p in dict.fromkeys(participants) if p != author]
    named_forms = {address: p for p, (address, _, pair) in read if pair}
    default = _PARTICIPANT_ROLE.get(kind, "participant")
    found: list[tuple[str, str]] = []
    for participant, (address, name, _) in read:
        if (own is not None and address == own) or (own_name is not None and name == own_name):
            role = _SELF
        elif address is not None and named_forms.get(address, participant) != participant:
            role = _SELF  # the bare address of a participant the row also names with their name
        elif assignees and (participant.casefold() in assignees or name in assignees):
            role = "assignee"
        else:
            role = default
        found.append((role, participant))
    if mentions:
        written = {author, *participants}
        found.extend(("mentioned", name) for name in dict.fromkeys(mentions) if name not in written)
    return found


def best_role(roles) -> str:
    """The role a row is listed under for a person it names in several forms: the most specific."""
    return min(roles, key=_ROLE_RANK.__getitem__)


def named_by_row(rows) -> list[list[tuple[str, str]]]:
    """`row_people` of each row, parsing each distinct string once across all of them."""
    parsed = _Parsed()
    return [row_people(row.kind, row.author, row.participants, row.tags, parsed)
            if row.participants or row.tags else [] for row in rows]


def build(rows: Iterable[Row], mapping: Mapping[str, str] | None = None,
          named: list[list[tuple[str, str]]] | None = None) -> dict[str, Person]:
    """The persons met in `rows` (author, participants, mentions), keyed by person id. `named`:
    the rows' `named_by_row`, when the caller has it already."""
    rows = list(rows)
    named = named_by_row(rows) if named is None else named
    mapping = dict(mapping or {})
    # Each distinct (role, string) is parsed and grouped once, however many rows repeat it: a
    # store's 20,000 rows name a few hundred people, and per-row work made a build take seconds.
    counts = Counter(observation for row, others in zip(rows, named, strict=True)
                     for observation in ([("author", row.author)] if row.author else []) + others)
    identities = {raw: parse(raw) for raw in {raw for _, raw in counts}}
    seen: list[tuple[str, str, Identity, int]] = []  # (role, raw alias, identity, rows)
    names_with_address: dict[str, set[str]] = {}
    for (role, raw), count in counts.items():
        identity = identities[raw]
        if identity is None:
            continue
        seen.append((role, raw, identity, count))  # kept as written: `authors` matches row.author exactly
        if identity.name and identity.address:
            names_with_address.setdefault(identity.name.casefold(), set()).add(identity.address)
    groups = _Groups()
    node_of: dict[str, str] = {}
    for alias, identity in {alias: identity for _, alias, identity, _ in seen}.items():
        if identity.address:
            node = "a:" + identity.address
        else:
            addresses = names_with_address.get(identity.name.casefold(), set())
            # A bare name joins an address only when that name was written with exactly one
            # address; two Dana Lees with two addresses leave a bare "Dana Lee" on its own.
            node = "a:" + next(iter(addresses)) if len(addresses) == 1 else "n:" + identity.name.casefold()
        node_of[alias] = node
        groups.find(node)
        mapped = mapping.get("s:" + clean(alias).casefold()) or (
            mapping.get("a:" + identity.address) if identity.address else None)
        if mapped:
            groups.join(node, "m:" + mapped)
    return _persons(seen, node_of, groups)


def _persons(seen, node_of, groups) -> dict[str, Person]:
    members: dict[str, set[str]] = {}
    for node in list(groups.parent):
        members.setdefault(groups.find(node), set()).add(node)
    id_of_root = {}
    for root, nodes in members.items():
        mapped = sorted(n[2:] for n in nodes if n.startswith("m:"))
        addresses = sorted(n[2:] for n in nodes if n.startswith("a:"))
        names = sorted(n[2:] for n in nodes if n.startswith("n:"))
        id_of_root[root] = (mapped[0] if mapped else _derived_id("a", addresses[0]) if addresses
                            else _derived_id("n", names[0]))
    persons: dict[str, Person] = {}
    names: dict[str, dict[str, int]] = {}
    for role, alias, identity, count in seen:
        person_id = id_of_root[groups.find(node_of[alias])]
        person = persons.setdefault(person_id, Person(person_id, ""))
        person.aliases.add(alias)
        if identity.address:
            person.addresses.add(identity.address)
        if identity.name:
            tally = names.setdefault(person_id, {})
            tally[identity.name] = tally.get(identity.name, 0) + count
        if role != _SELF:
            person.roles[role] = person.roles.get(role, 0) + count
    for person_id, person in persons.items():
        tally = names.get(person_id)
        person.display_name = (max(sorted(tally), key=tally.get) if tally
                               else min(person.addresses) if person.addresses else person_id)
    return persons


def aliases_of(persons: Mapping[str, Person], person_ids: Iterable[str]) -> list[str]:
    """Every alias string of these persons, for an `authors` filter; unknown ids add none."""
    return sorted({alias for pid in person_ids if pid in persons for alias in persons[pid].aliases})


def with_prefix(persons: Mapping[str, Person], prefix: str | None) -> list[Person]:
    """Persons sorted by display name; with a prefix, those with a name or alias starting with it."""
    chosen = list(persons.values())
    if prefix:
        wanted = prefix.casefold()
        chosen = [p for p in chosen if p.display_name.casefold().startswith(wanted)
                  or any(a.casefold().startswith(wanted) for a in p.aliases | p.addresses)]
    return sorted(chosen, key=lambda p: (p.display_name.casefold(), p.person_id))
