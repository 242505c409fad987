"""Query analysis shared by every lexical and tag adapter, so all profiles match the same way."""

from __future__ import annotations

import re

# Function words carry no content; a conjunctive match that required them would match nothing.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves""".split()
)

_WORD = re.compile(r"[0-9A-Za-z\u00C0-\uFFFF]+(?:['’][A-Za-z]+)?")
_TAG_TOKEN = re.compile(r"[^\s,;:!?()\[\]{}\"“”]+")


def content_terms(query: str) -> list[str]:
    """Lower-cased content words of a query, in order, without repeats."""
    terms: dict[str, None] = {}
    for match in _WORD.finditer(query):
        word = match.group(0).lower().replace("’", "'")
        word = word.split("'")[0]
        if word and word not in STOPWORDS:
            terms.setdefault(word, None)
    return list(terms)


def normalise_tag(tag: str) -> str:
    return " ".join(tag.lower().split())


def tag_candidates(query: str, max_ngram: int = 3) -> list[str]:
    """Strings of the query that could equal a tag: tokens as written (ticket keys, addresses)
    with trailing punctuation stripped, and word n-grams (names, subjects)."""
    candidates: dict[str, None] = {}
    raw = [t.strip(".'’").lower() for t in _TAG_TOKEN.findall(query)]
    raw = [t for t in raw if t]
    for token in raw:
        if token not in STOPWORDS:
            candidates.setdefault(token, None)
    words = [m.group(0).lower() for m in _WORD.finditer(query)]
    for n in range(2, max_ngram + 1):
        for start in range(len(words) - n + 1):
            gram = words[start : start + n]
            if gram[0] in STOPWORDS or gram[-1] in STOPWORDS:
                continue
            candidates.setdefault(" ".join(gram), None)
    return list(candidates)


_NAMED_TOKEN = re.compile(r"[^\s,;()\[\]{}\"“”'’`]+")
MAX_NAMED_IDS = 16  # strings of one query looked up as source ids (each an indexed lookup)
_NAMED_LENGTH = (4, 512)  # shorter: a count or a word; longer: no source id the connectors write


def named_source_ids(query: str) -> list[str]:
    """Strings of the query that could be a document's source id as a connector stores it: a
    Message-ID (without its angle brackets), a ticket key, a meeting or file id. Tokens as
    written, with a digit or an "@" in them (four digits alone are a year), punctuation around
    them stripped; the first MAX_NAMED_IDS, without repeats."""
    named: dict[str, None] = {}
    for token in _NAMED_TOKEN.findall(query):
        token = token.strip("<>.:!?")
        if (_NAMED_LENGTH[0] <= len(token) <= _NAMED_LENGTH[1] and ("@" in token or any(c.isdigit() for c in token))
                and not (token.isdigit() and len(token) == 4)):  # a year
            named.setdefault(token, None)
            if len(named) == MAX_NAMED_IDS:
                break
    return list(named)
