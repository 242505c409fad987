"""Live IMAP connector: new messages of an account's mailboxes, incrementally by UIDVALIDITY/UID.

imaplib (stdlib) is imported here only. The cursor per mailbox is {"uidvalidity", "last_uid"};
a changed UIDVALIDITY means the server renumbered the mailbox, so its cursor starts over and the
downstream source_id dedup keeps the re-read idempotent. The password is a SecretStr: it is sent
in LOGIN and appears in no log, repr or error.
"""

from __future__ import annotations

import imaplib
import logging
import re
import ssl as tls
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorState, DeadLetter, Sink, reporting
from services.connectors.email import EmailReport, parse_item
from services.errors import BackendUnavailable, ImapError

log = logging.getLogger(__name__)

CONNECTOR = "imap"
FETCH_CHUNK = 100  # UIDs per FETCH; each chunk goes to the sink before the cursor moves
_UID = re.compile(rb"\bUID (\d+)")


class ImapSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(min_length=1)
    port: int = Field(default=993, ge=1, le=65535)
    username: str = Field(min_length=1)
    password: SecretStr
    ssl: bool = True  # implicit TLS (port 993)
    starttls: bool = False  # plain connection upgraded with STARTTLS (port 143)
    timeout_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_tls_mode(self) -> ImapSettings:
        if self.ssl and self.starttls:
            raise ValueError("ssl and starttls: choose one (ssl = implicit TLS, starttls = upgrade)")
        return self

    @property
    def account(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"


def _scrub(text: object, settings: ImapSettings) -> str:
    secret = settings.password.get_secret_value()
    text = str(text)
    return text.replace(secret, "**********") if secret else text


def _quote(mailbox: str) -> str:
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _connect(settings: ImapSettings) -> imaplib.IMAP4:
    where = f"{settings.host}:{settings.port}"
    try:
        if settings.ssl:
            conn = imaplib.IMAP4_SSL(settings.host, settings.port, ssl_context=tls.create_default_context(),
                                     timeout=settings.timeout_s)
        else:
            conn = imaplib.IMAP4(settings.host, settings.port, timeout=settings.timeout_s)
            if settings.starttls:
                conn.starttls(tls.create_default_context())
    except (OSError, imaplib.IMAP4.error) as exc:
        raise BackendUnavailable("imap", f"{where}: {_scrub(exc, settings)}") from None
    try:
        conn.login(settings.username, settings.password.get_secret_value())
    except imaplib.IMAP4.error as exc:
        _close(conn)
        # `from None`: the chained exception would carry imaplib's internals, the password among them.
        raise ImapError(f"IMAP login to {where} as {settings.username!r} refused: {_scrub(exc, settings)}") from None
    except OSError as exc:
        raise BackendUnavailable("imap", f"{where}: {_scrub(exc, settings)}") from None
    return conn


def _close(conn: imaplib.IMAP4) -> None:
    try:
        conn.logout()
    except (OSError, imaplib.IMAP4.error):
        pass  # the connection is going away either way


def _check(typ: str, data: list, what: str) -> list:
    if typ != "OK":
        detail = b" ".join(d for d in data if isinstance(d, bytes)).decode(errors="replace")
        raise ImapError(f"{what}: {typ} {detail}".strip())
    return data


def _uidvalidity(conn: imaplib.IMAP4, mailbox: str) -> int:
    _, values = conn.response("UIDVALIDITY")
    if not values or values[0] is None:
        data = _check(*conn.status(_quote(mailbox), "(UIDVALIDITY)"), f"STATUS {mailbox}")
        match = re.search(rb"UIDVALIDITY (\d+)", data[0] or b"")
        if not match:
            raise ImapError(f"mailbox {mailbox!r}: the server reported no UIDVALIDITY")
        return int(match.group(1))
    return int(values[-1])


def _fetch(conn: imaplib.IMAP4, uids: Sequence[int], mailbox: str) -> dict[int, bytes]:
    data = _check(*conn.uid("FETCH", ",".join(map(str, uids)), "(UID BODY.PEEK[])"), f"FETCH in {mailbox}")
    messages = {}
    for item in data:
        # A message arrives as (b'<seq> (UID <uid> BODY[] {<n>}', <n bytes>); the rest is b')'.
        if isinstance(item, tuple) and len(item) == 2:
            match = _UID.search(item[0])
            if match:
                messages[int(match.group(1))] = item[1]
    return messages


def _sync_mailbox(conn, settings: ImapSettings, mailbox: str, sink: Sink, state: ConnectorState,
                  report: EmailReport, acl_from_participants: bool) -> None:
    _check(*conn.select(_quote(mailbox), readonly=True), f"SELECT {mailbox}")
    uidvalidity = _uidvalidity(conn, mailbox)
    cursors = state.values.setdefault("mailboxes", {})
    key = f"{settings.account}/{mailbox}"
    cursor = cursors.get(key) or {}
    if cursor and cursor.get("uidvalidity") != uidvalidity:
        log.warning("imap %s: UIDVALIDITY changed %s -> %s, reading the mailbox again",
                    key, cursor.get("uidvalidity"), uidvalidity)
        report.warnings.append(f"{key}: UIDVALIDITY changed, mailbox read again from the start")
        cursor = {}
    last = int(cursor.get("last_uid", 0)) if cursor else 0
    # "UID n:*" always matches the newest message even when its UID is below n, so filter too.
    found = _check(*conn.uid("SEARCH", "UID", f"{last + 1}:*"), f"SEARCH in {mailbox}")
    uids = sorted(u for u in (int(x) for x in b" ".join(found).split()) if u > last)
    if not uids:
        report.unchanged += 1  # a mailbox with nothing new
    log.info("imap %s: %d new messages after UID %d", key, len(uids), last)
    for start in range(0, len(uids), FETCH_CHUNK):
        chunk = uids[start:start + FETCH_CHUNK]
        fetched = _fetch(conn, chunk, mailbox)
        docs: list[DocumentIn] = []
        letters: list[DeadLetter] = []
        for uid in chunk:
            label = f"imap://{key};UIDVALIDITY={uidvalidity}/;UID={uid}"
            report.items_seen += 1
            raw = fetched.get(uid)
            if raw is None:  # expunged between SEARCH and FETCH
                continue
            report.route(label, parse_item(raw, label, CONNECTOR, acl_from_participants=acl_from_participants),
                         docs, letters)
        if docs:
            sink(docs)  # durable before the cursor moves past these UIDs
            report.documents += len(docs)
        state.record_dead_letters(letters)
        report.dead_letters.extend(letters)
        cursors[key] = {"uidvalidity": uidvalidity, "last_uid": chunk[-1]}
        state.save()
    if not uids:
        cursors[key] = {"uidvalidity": uidvalidity, "last_uid": last}
        state.save()


def run_imap(
    settings: ImapSettings,
    sink: Sink,
    state: ConnectorState,
    *,
    mailboxes: Sequence[str] = ("INBOX",),
    acl_from_participants: bool = False,
) -> EmailReport:
    """Hand the messages that arrived since the last run to the sink, mailbox by mailbox."""
    report = EmailReport(connector=CONNECTOR)
    conn = _connect(settings)
    try:
        with reporting(report):
            for mailbox in mailboxes:
                try:
                    _sync_mailbox(conn, settings, mailbox, sink, state, report, acl_from_participants)
                except ImapError as exc:
                    # One missing or refused mailbox is reported; the others still go in.
                    letter = DeadLetter(CONNECTOR, f"imap://{settings.account}/{mailbox}", _scrub(exc, settings))
                    state.record_dead_letters([letter])
                    report.dead_letters.append(letter)
                except (OSError, imaplib.IMAP4.abort) as exc:
                    raise BackendUnavailable("imap", f"{settings.account}: {_scrub(exc, settings)}") from None
                except imaplib.IMAP4.error as exc:
                    raise ImapError(f"{settings.account}/{mailbox}: {_scrub(exc, settings)}") from None
    finally:
        _close(conn)
    log.info("imap %s: %d documents, %d messages read, %d dead letters",
             settings.account, report.documents, report.items_seen, len(report.dead_letters))
    return report
