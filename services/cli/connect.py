"""`orgmem connect ...`: run a connector over files, a folder or an IMAP account."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pydantic import SecretStr


def _run(args, kind: str, **options) -> int:
    from services.app.connectors import protected_paths, run_connector
    from services.bootstrap import open_event_log
    from services.cli.common import index_log, settings_from
    from services.connectors.paths import PathGuard
    from services.core.caller import Caller

    settings = settings_from(args)
    paths = getattr(args, "paths", [])
    # The operator names the inputs: they are the roots (a link inside them cannot lead out), and
    # the data folder and key file are never read.
    guard = PathGuard.around(paths, protected_paths(settings))
    event_log = open_event_log(settings)
    try:
        report, position = run_connector(kind, paths, event_log, Path(settings.data_dir),
                                         Caller(tenant=args.tenant), guard=guard, **options)
    finally:
        event_log.close()
    summary = report.to_dict()
    for letter in summary["dead_letters"]:
        print(f"dead letter: {letter['path']}: {letter['reason']}", file=sys.stderr)
    for item in summary["known_items"]:
        print(f"already known: {item['source']} {item['source_id']} (row {item['row_id']})", file=sys.stderr)
    for why, count in summary["skipped"].items():
        print(f"skipped {count}: {why}", file=sys.stderr)
    for note in summary["notes"]:
        print(f"note: {note}", file=sys.stderr)
    if not args.no_index:
        index_log(settings)  # what the run appended is durable, also when it stopped part-way
        _erase_removed(settings, args, report)
    summary = report.to_dict()
    listed = ("dead_letters", "known_items", "superseded", "removed")
    print(json.dumps({k: v for k, v in summary.items() if k not in listed} | {
        k: len(summary[k]) for k in listed if k != "known_items"} | {"log_position": position}))
    for removal in summary["removed"]:
        print(f"removed in the source: {removal['source']} {removal['source_id']}: {removal['reason']} "
              f"({removal.get('applied', 'pending')})", file=sys.stderr)
    if report.stopped:
        print(f"orgmem: the run stopped before the end: {report.stopped}", file=sys.stderr)
        return 1
    return 0


def _erase_removed(settings, args, report) -> None:
    """Under the "erase" policy, the versions the source deleted are crypto-shredded now, as
    `orgmem erase` does (this process holds the data folder: a running server must be stopped,
    or run the connector over the API)."""
    if not any(r.get("applied") == "pending" for r in report.removed):
        return
    from services.app.connectors import erase_removed
    from services.bootstrap import open_memory
    from services.cli.keys import _actor

    with open_memory(settings, role="indexer") as memory:
        memory.catch_up()
        erase_removed(memory, args.tenant, report, actor=_actor(args), data_dir=settings.data_dir)


def cmd_source(args) -> int:
    from services.cli.common import settings_from
    from services.connectors.access import AccessMap

    settings = settings_from(args)
    access = AccessMap.from_file(args.access_map) if args.access_map else None
    deletions = args.deletions or settings.connector_deletions.get(args.connector)
    # The documents source's own options (a date for undated files, the export's layout).
    extra = {name: getattr(args, name) for name in ("date", "layout") if getattr(args, name, None)}
    return _run(args, args.connector, access=access, deletions=deletions, absence=not args.partial, **extra)


def cmd_email(args) -> int:
    return _run(args, "email", acl_from_participants=args.acl_from_participants)


def cmd_imap(args) -> int:
    from services.connectors.imap import ImapSettings

    password = os.environ.get("ORGMEM_IMAP_PASSWORD")
    if not password:
        print("orgmem: set ORGMEM_IMAP_PASSWORD (the password is never read from the command line)", file=sys.stderr)
        return 2
    imap = ImapSettings(host=args.host, port=args.port, username=args.user, password=SecretStr(password),
                        ssl=not args.no_ssl, starttls=args.starttls)
    return _run(args, "imap", imap=imap, mailboxes=tuple(args.mailbox or ["INBOX"]),
                acl_from_participants=args.acl_from_participants)


def cmd_tickets(args) -> int:
    return _run(args, "tickets", format=args.format, acl_from_participants=args.acl_from_participants)


def cmd_csv(args) -> int:
    mapping = dict(item.split("=", 1) for item in args.map)
    return _run(args, "csv", mapping=mapping, acl_from_participants=args.acl_from_participants)


def cmd_meetings(args) -> int:
    return _run(args, "meetings", date=args.date, formats=args.format,
                acl_from_participants=args.acl_from_participants)


def cmd_dead_letters(args) -> int:
    from services.cli.common import settings_from
    from services.connectors.base import dead_letter_records

    # With --tenant, that tenant's only; without, the operator's view: every tenant's, named.
    for tenant, letter in dead_letter_records(Path(settings_from(args).data_dir), args.tenant):
        owner = "" if args.tenant else f"{tenant or '(legacy, no tenant)'}  "
        print(f"{letter.at}  {owner}{letter.connector}  {letter.path}: {letter.reason}")
    return 0


def register(command, sub) -> None:
    connect = sub.add_parser("connect", help="run a connector (email, imap, tickets, csv, meetings, and the sources: slack, ...)")
    kinds = connect.add_subparsers(dest="connector", required=True)

    def kind(name, handler, help_, paths=True, participants=True):
        p = kinds.add_parser(name, help=help_)
        p.add_argument("--data", default=None, help="data folder (default ./orgmem-data)")
        p.add_argument("--tenant", default="default")
        p.add_argument("--no-index", action="store_true", help="append only; a running server indexes")
        if participants:  # contract sources take their access lists from the source and its map
            p.add_argument("--acl-from-participants", action="store_true",
                           help="limit each document to its participants (mail To/Cc, ticket people, invitees)")
        if paths:
            p.add_argument("paths", nargs="+")
        p.set_defaults(handler=handler)
        return p

    kind("email", cmd_email, ".eml files, mbox files, maildir folders, or folders of them")
    p = kind("imap", cmd_imap, "a live IMAP account, incremental by UIDVALIDITY/UID", paths=False)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, default=993)
    p.add_argument("--user", required=True)
    p.add_argument("--mailbox", action="append")
    p.add_argument("--no-ssl", action="store_true")
    p.add_argument("--starttls", action="store_true")
    p = kind("tickets", cmd_tickets, "Jira (REST/export JSON, JSONL) or GitHub issues JSON")
    p.add_argument("--format", default="auto", choices=["auto", "jira", "github"])
    p = kind("csv", cmd_csv, "tickets from a CSV file with a column mapping")
    p.add_argument("--map", nargs="+", required=True, metavar="FIELD=COLUMN",
                   help="id=, title=, text=, author=, date= and optionally status=, priority=, assignee=, labels=, comments=")
    p = kind("meetings", cmd_meetings, "WebVTT, SRT, 'Speaker: text' transcripts, QMSum-style JSON")
    p.add_argument("--date", help="meeting date when the file carries none")
    p.add_argument("--format", action="append", choices=["vtt", "srt", "json", "transcript"],
                   help="formats to read, repeatable (default vtt, srt, json; 'transcript' reads .txt)")
    from services.connectors.sources import SOURCES

    for name, (_, _, help_, policy) in SOURCES.items():
        p = kind(name, cmd_source, help_, participants=False)
        p.add_argument("--access-map", metavar="FILE",
                       help='JSON {"users": {source id: principal}, "groups": {source id: group}}; '
                            "ids it does not name grant nobody")
        p.add_argument("--deletions", choices=["erase", "mark"],
                       help=f"what a deletion in the source does to its rows (default {policy}, "
                            "or ORGMEM_CONNECTOR_DELETIONS)")
        p.add_argument("--partial", action="store_true",
                       help="the export holds part of the source only: nothing it lacks counts as deleted")
        p.add_argument("--actor", help="who erases, for the audit log (default cli:<user>)")
        if name == "documents":
            p.add_argument("--date", help="the date of files that carry none (else the run's time, counted)")
            p.add_argument("--layout", choices=["files", "confluence", "notion"],
                           help="the export's layout (default: told by its contents)")
    p = kinds.add_parser("dead-letters", help="inputs that could not be parsed, with the reason")
    p.add_argument("--data", default=None)
    p.add_argument("--tenant", default=None, help="only this tenant's (default: every tenant's, named)")
    p.set_defaults(handler=cmd_dead_letters)
