"""Which known persons a question names: the people rule of the read path (docs/people.md).

Pure and conservative, as the directory is: a question names a person by one of their
addresses (exact, case-insensitive), by a display name of theirs (whole words, any case), or by
the first word of a display name when that first name belongs to exactly one person of the
directory; a one-word name counts only where the question writes it capitalised. A first name two persons share ("Dana" for
Dana Lee and Dana Ortiz) names neither: a guess would rank one person's rows for a question
about the other. Nothing fuzzy: "Dana Li" does not name Dana Lee.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from services.core.people import Person

_ADDRESS_TOKEN = re.compile(r"[^\s@<>()\[\],;:'\"]+@[^\s@<>()\[\],;:'\"]+[^\s@<>()\[\],;:'\"?!.]")
_WORD = re.compile(r"\w+(?:[-'’]\w+)*")
# Longer names than this are not searched for in a question (a display name is a few words).
MAX_NAME_WORDS = 6


@dataclass(frozen=True)
class Named:
    person_id: str
    display_name: str
    phrase: str  # the words of the question that name them, as written


def _words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


@dataclass(frozen=True)
class NameIndex:
    """A directory's names as the question reader looks them up; built once per directory."""

    by_address: dict[str, str]
    by_name: dict[tuple[str, ...], frozenset[str]]
    by_first: dict[str, frozenset[str]]


def name_index(persons: Mapping[str, Person]) -> NameIndex:
    by_address: dict[str, str] = {}
    by_name: dict[tuple[str, ...], set[str]] = {}
    by_first: dict[str, set[str]] = {}
    for pid, person in persons.items():
        for address in person.addresses:
            by_address[address.casefold()] = pid
        # An address is matched whole, never word by word ("helena.marsh@..." is no first name).
        names = {n for n in (person.display_name, *person.aliases) if "@" not in n}
        for name in names:
            words = tuple(w.casefold() for w, _, _ in _words(name))
            if not words or len(words) > MAX_NAME_WORDS:
                continue
            by_name.setdefault(words, set()).add(pid)
            if len(words) > 1:
                by_first.setdefault(words[0], set()).add(pid)
    return NameIndex(by_address, {k: frozenset(v) for k, v in by_name.items()},
                     {k: frozenset(v) for k, v in by_first.items()})


def named_in(question: str, persons: Mapping[str, Person], index: NameIndex | None = None) -> list[Named]:
    """The persons `question` names, in the order it names them, each once."""
    index = index or name_index(persons)
    by_address, by_name, by_first = index.by_address, index.by_name, index.by_first
    found: list[tuple[int, Named]] = []
    taken: list[tuple[int, int]] = []

    def claim(start: int, end: int, pid: str) -> None:
        taken.append((start, end))
        found.append((start, Named(pid, persons[pid].display_name, question[start:end])))

    for m in _ADDRESS_TOKEN.finditer(question):
        pid = by_address.get(m.group().casefold())
        if pid:
            claim(m.start(), m.end(), pid)
    words = _words(question)
    folded = [w.casefold() for w, _, _ in words]
    # Longest names first, so "Dana Lee" is read before a "Dana" inside it.
    for size in range(MAX_NAME_WORDS, 0, -1):
        for i in range(len(words) - size + 1):
            start, end = words[i][1], words[i + size - 1][2]
            if any(s < end and start < e for s, e in taken):
                continue
            owners = by_name.get(tuple(folded[i:i + size]))
            # One word names someone only capitalised: "support" the word is not Support the account.
            if size == 1 and not words[i][0][:1].isupper():
                continue
            if owners and len(owners) == 1:
                claim(start, end, next(iter(owners)))
            elif size == 1 and not owners:
                firsts = by_first.get(folded[i], set())
                if len(firsts) == 1:
                    claim(start, end, next(iter(firsts)))
    out: list[Named] = []
    for _, named in sorted(found, key=lambda pair: pair[0]):
        if all(named.person_id != o.person_id for o in out):
            out.append(named)
    return out


def without_names(question: str, named: list[Named]) -> str:
    """The question less the words that named persons: their rows need not repeat their name."""
    for n in named:
        question = question.replace(n.phrase, " ")
    return question
