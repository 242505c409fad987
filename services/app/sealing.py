"""Crypto-shredding: documents enter the log sealed, and come out of it opened (docs/erasure.md).

Every field of a document (text, title, author, participants, tags, thread, source id, access
list, date, kind) is encrypted with AES-GCM (`cryptography`) under a key derived with HKDF from
all of its data keys, each 32 random bytes kept in the data key store, outside the log:

- `d.<row id>`: the document's own key (erasing a row or a source item destroys it);
- `c.<hmac>`: its text's key, one per (author, text) in a tenant, so that every repeat of an
  erased text — skipped as a duplicate, or arriving later — is erased with it;
- `s.<hmac>.<generation>`: one per person the document names (author, participants, and tags
  such as `speaker:` that name people), in each of the forms the name appears in.

Deriving the content key from all of them means destroying any one makes the document unreadable:
erasing a person reaches every document naming them, whoever else it names. Key ids are HMACs
under the tenant's key (`t.<tenant>`, never destroyed), so the log names no one in clear; a
subject's generation moves on after its erasure, so later documents naming the person are sealed
under a fresh key. Row ids of documents without a source id are keyed the same way: an unkeyed
hash of the text in the log would let anyone confirm a guessed text after its erasure.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from schemas.documents import DocumentIn
from schemas.events import (
    DocumentObserved,
    Event,
    LoggedEvent,
    RowDerived,
    SealedDocument,
)
from services.app.log_lanes import scan
from services.core.write_rules import author_scope, content_hash, row_id_for
from services.errors import OrgmemError
from services.ports import DataKeyStore, EventLog

log = logging.getLogger(__name__)

SEALED_VERSION = 2
# Tags whose value names a person (the connectors' and the merged rows' conventions).
PERSON_TAG_PREFIXES = frozenset({"author", "speaker", "participant", "assignee", "reporter", "from", "to", "cc", "person",
                                 "mention"})  # a chat @-mention: the people directory lists its person
_ADDRESSED = re.compile(r"^(.*?)\s*<([^<>]+)>$")
_MAX_GENERATIONS = 10_000
MARKER = "sealed_log"


def name_forms(person: str) -> set[str]:
    """The forms a person is matched by, case-insensitively: "Ann Lee <ann@x.org>" gives the whole,
    "ann lee" and "ann@x.org"."""
    whole = " ".join(person.split()).lower()
    if not whole:
        return set()
    forms = {whole}
    match = _ADDRESSED.match(whole)
    if match:
        forms |= {part.strip(' "\'') for part in match.groups()} - {""}
    return forms


def subjects_of(doc: DocumentIn) -> set[str]:
    people = [doc.author, *doc.participants]
    for tag in doc.tags:
        prefix, _, value = tag.partition(":")
        if value and prefix.strip().lower() in PERSON_TAG_PREFIXES:
            people.append(value)
    return {form for person in people for form in name_forms(person)}


def _aad(event: DocumentObserved | RowDerived) -> bytes:
    # Binds the ciphertext to its event: moved into another event, it no longer opens.
    return f"{event.type}\x1f{event.tenant}\x1f{event.row_id}".encode()


def _content_key(keys: Sequence[bytes]) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"orgmem sealed document v1").derive(b"".join(keys))


class Sealer:
    """Seals documents into events and opens them again, with keys from a DataKeyStore."""

    def __init__(self, keys: DataKeyStore):
        self.keys = keys
        self._tenant_keys: dict[str, bytes] = {}  # never destroyed, so safe to keep

    # --- names ------------------------------------------------------------------------------
    def _mac(self, tenant: str, *parts: str) -> str:
        key = self._tenant_keys.get(tenant)
        if key is None:
            key = self.keys.obtain([f"t.{tenant}"])[f"t.{tenant}"]
            if key is None:
                raise OrgmemError(f"data key store: tenant {tenant!r} has no key (destroyed)")
            self._tenant_keys[tenant] = key
        return hmac.new(key, "\x1f".join(parts).encode(), hashlib.sha256).hexdigest()

    def row_id_for(self, tenant: str, doc: DocumentIn) -> str:
        """Source items keep their public id (a hash of tenant, source and source id: the demo,
        the harness and connectors name rows by it); a text's id is keyed."""
        if doc.source_id:
            return row_id_for(tenant, doc)
        return "r" + self._mac(tenant, "txt", author_scope(doc.author), content_hash(doc.text))[:23]

    def text_key_id(self, tenant: str, doc: DocumentIn) -> str:
        return "c." + self._mac(tenant, "text", author_scope(doc.author), content_hash(doc.text))[:32]

    def subject_hash(self, tenant: str, subject: str) -> str:
        return self._mac(tenant, "subject", subject)[:32]

    def target_hash(self, tenant: str, *parts: str) -> str:
        """A keyed hash naming an erasure's target in the audit log."""
        return self._mac(tenant, "target", *parts)[:32]

    def subject_key_ids(self, tenant: str, subjects: Sequence[str]) -> dict[str, str]:
        """The live key id of each subject, its generation moved past every destroyed one."""
        generation = {s: 0 for s in subjects}
        hashes_ = {s: self.subject_hash(tenant, s) for s in subjects}
        current: dict[str, str] = {}
        pending = list(subjects)
        for _ in range(_MAX_GENERATIONS):
            if not pending:
                return current
            ids = {s: f"s.{hashes_[s]}.{generation[s]}" for s in pending}
            dead = self.keys.destroyed(list(ids.values()))
            for s in pending:
                if ids[s] in dead:
                    generation[s] += 1
                else:
                    current[s] = ids[s]
            pending = [s for s in pending if s not in current]
        raise OrgmemError("data key store: a subject has been erased more times than orgmem counts")

    # --- sealing ----------------------------------------------------------------------------
    def seal(self, events: Sequence[Event]) -> list[Event]:
        return [sealed for _, sealed in self.seal_pairs(events)]

    def seal_pairs(self, events: Sequence[Event]) -> list[tuple[Event, Event]]:
        """(event, event as it goes into the log) with documents sealed. A document whose own or
        text key was destroyed was erased: it is left out (its content never reaches the log again)."""
        documents = [e for e in events if isinstance(e, (DocumentObserved, RowDerived)) and e.document is not None]
        subjects = {id(e): sorted(subjects_of(e.document)) for e in documents}
        wanted: dict[str, set[str]] = {}
        for e in documents:
            wanted.setdefault(e.tenant, set()).update(subjects[id(e)])
        # One generation lookup per tenant and batch (a round trip each, in Redis), not per document.
        current = {tenant: self.subject_key_ids(tenant, sorted(names)) for tenant, names in wanted.items()}
        plans: list[tuple[Event, list[str]]] = []
        for event in events:
            if id(event) in subjects:
                by_subject = current[event.tenant]
                ids = [f"d.{event.row_id}", self.text_key_id(event.tenant, event.document),
                       *sorted({by_subject[name] for name in subjects[id(event)]})]
                plans.append((event, ids))
            else:
                plans.append((event, []))
        keys = self.keys.obtain([k for _, ids in plans for k in ids])
        out: list[tuple[Event, Event]] = []
        for event, ids in plans:
            if not ids:
                out.append((event, event))
                continue
            if keys[ids[0]] is None or keys[ids[1]] is None:
                log.warning("row %s of tenant %s was erased: the document is not appended again", event.row_id, event.tenant)
                continue
            if any(keys[k] is None for k in ids):  # a subject erased between the lookup and now
                log.warning("row %s of tenant %s names a subject erased meanwhile: not appended", event.row_id, event.tenant)
                continue
            out.append((event, self._sealed(event, ids, [keys[k] for k in ids])))
        return out

    def _sealed(self, event: DocumentObserved | RowDerived, ids: list[str], keys: list[bytes]) -> Event:
        nonce = os.urandom(12)
        plaintext = event.document.model_dump_json().encode()
        ciphertext = AESGCM(_content_key(keys)).encrypt(nonce, plaintext, _aad(event))
        sealed = SealedDocument(keys=ids, nonce=base64.b64encode(nonce).decode(),
                                ciphertext=base64.b64encode(ciphertext).decode())
        return event.model_copy(update={"document": None, "sealed": sealed, "version": SEALED_VERSION})

    def open(self, logged: Sequence[LoggedEvent]) -> list[LoggedEvent]:
        """The events with their documents opened; an erased one keeps `document` None."""
        needed = [k for le in logged if getattr(le.event, "sealed", None) is not None for k in le.event.sealed.keys]
        if not needed:
            return list(logged)
        keys = self.keys.get(needed)
        out = []
        for le in logged:
            sealed = getattr(le.event, "sealed", None)
            if sealed is None:
                out.append(le)
                continue
            doc = self._opened(le.event, sealed, keys)
            out.append(le.model_copy(update={"event": le.event.model_copy(update={"document": doc})}))
        return out

    @staticmethod
    def _opened(event, sealed: SealedDocument, keys: dict[str, bytes]) -> DocumentIn | None:
        if any(k not in keys for k in sealed.keys):
            return None
        try:
            plaintext = AESGCM(_content_key([keys[k] for k in sealed.keys])).decrypt(
                base64.b64decode(sealed.nonce), base64.b64decode(sealed.ciphertext), _aad(event))
        except InvalidTag:
            log.error("row %s: sealed document does not open with its keys (tampered or wrong keys)", event.row_id)
            return None
        return DocumentIn.model_validate_json(plaintext)


def is_plaintext_document(event: Event) -> bool:
    return isinstance(event, (DocumentObserved, RowDerived)) and event.document is not None and event.sealed is None


class SealingEventLog:
    """An event log whose appends are sealed and whose reads are opened; `read_sealed` gives the
    log as stored (the erasure scan reads key ids without opening anything)."""

    def __init__(self, inner: EventLog, sealer: Sealer):
        self._inner, self.sealer = inner, sealer

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        pairs = self.sealer.seal_pairs(events)
        logged = self._inner.append([sealed for _, sealed in pairs])
        # Callers get back what they appended, with its positions, not the ciphertext.
        return [le.model_copy(update={"event": plain}) for le, (plain, _) in zip(logged, pairs, strict=True)]

    def read(self, after: int, limit: int) -> list[LoggedEvent]:
        return self.sealer.open(self._inner.read(after, limit))

    def read_sealed(self, after: int, limit: int) -> list[LoggedEvent]:
        return self._inner.read(after, limit)

    def row_id_for(self, tenant: str, doc: DocumentIn) -> str:
        return self.sealer.row_id_for(tenant, doc)

    def head(self) -> int:
        return self._inner.head()

    def heads(self):
        return self._inner.heads()

    def lane_for(self, tenant: str) -> int:
        return self._inner.lane_for(tenant)

    def backlog(self, after: int, head: int) -> int:
        return self._inner.backlog(after, head)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self.sealer.keys.close()

    def __getattr__(self, name: str):  # the adapter's other attributes (its path, ...)
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _OpeningFeed:
    def __init__(self, feed, sealer: Sealer):
        self._feed, self._sealer = feed, sealer

    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]:
        return self._sealer.open(self._feed.poll(max_records, timeout_s))

    def lanes(self) -> list[int]:
        return self._feed.lanes()

    def seek(self, position: int) -> None:
        self._feed.seek(position)

    def commit(self, position: int) -> None:
        self._feed.commit(position)

    def close(self) -> None:
        self._feed.close()


class SubscribableSealingEventLog(SealingEventLog):
    """The sealing wrapper of a log that indexers follow as a group (Kafka): the feed is opened too."""

    def subscribe(self, group_id: str, checkpoint, max_poll_records: int = 256):
        return _OpeningFeed(self._inner.subscribe(group_id, checkpoint, max_poll_records), self.sealer)


def sealing(inner: EventLog, sealer: Sealer) -> SealingEventLog:
    from services.ports import Subscribable

    return SubscribableSealingEventLog(inner, sealer) if isinstance(inner, Subscribable) else SealingEventLog(inner, sealer)


def check_sealed(event_log: SealingEventLog, page: int = 2000) -> None:
    """Refuse a log that holds plaintext documents (written before encryption): it must be
    converted once with `orgmem migrate encrypt`. Checked once per store, then remembered."""
    keys = event_log.sealer.keys
    if keys.marker(MARKER):
        return
    for logged in scan(event_log, event_log.read_sealed, page=page):
        if is_plaintext_document(logged.event):
            raise OrgmemError(
                f"the event log holds documents stored before encryption (at position {logged.position}); "
                "convert it once with `orgmem migrate encrypt` (resumable), or set ORGMEM_ERASURE__ENCRYPT=false")
    keys.set_marker(MARKER, "1")
