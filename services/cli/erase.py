"""`orgmem erase` and `orgmem migrate encrypt` (docs/erasure.md).

`erase` works on the data folder directly (it holds the folder, so a running server must be
stopped first, or use `POST /v1/admin/erasures`): it destroys the keys, records the erasure in
the log, purges every projection and prints exactly which rows were erased.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from services.cli.common import settings_from
from services.cli.keys import _actor


def cmd_erase(args: argparse.Namespace) -> int:
    from services.app.erasure import erase
    from services.bootstrap import open_memory

    settings = settings_from(args)
    with open_memory(settings, role="indexer") as memory:
        memory.catch_up()
        result = erase(memory, args.tenant, actor=_actor(args), reason=args.reason, row_id=args.row,
                       source_id=args.source_id, source=args.source, subject=args.subject,
                       data_dir=settings.data_dir)
    if args.json:
        print(json.dumps(asdict(result)))
        return 0
    print(f"erasure {result.erasure_id}: {len(result.row_ids)} rows erased, {result.keys_destroyed} keys destroyed, "
          f"{result.dead_letters_dropped} dead letters dropped (log position {result.position})")
    for row_id in result.row_ids:
        print(f"  erased {row_id}" + ("  (derived from an erased row)" if row_id in result.derived_row_ids else ""))
    for row_id in result.restored_row_ids:
        print(f"  restored {row_id}  (an erased merged row had archived it)")
    return 0


def cmd_migrate_encrypt(args: argparse.Namespace) -> int:
    from services.bootstrap import migrate_encrypt

    converted = migrate_encrypt(settings_from(args))
    print(f"sealed {converted} plaintext document events in place; the log is encrypted", file=sys.stderr)
    return 0


def register(command, sub) -> None:
    p = command("erase", cmd_erase, "erase a row, a source item or a subject's documents (crypto-shredding)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--row", help="a row id")
    target.add_argument("--source-id", help="a source item's id (with --source, or from any source)")
    target.add_argument("--subject", help="a person as documents name them (author, participant)")
    p.add_argument("--source", help="the source of --source-id (email, jira, ...)")
    p.add_argument("--reason", required=True, help="why; kept in the audit log")
    p.add_argument("--tenant", default="default")
    p.add_argument("--actor", help="who erases, for the audit log (default cli:<user>)")
    p.add_argument("--json", action="store_true")
    migrate = command("migrate", lambda args: migrate.print_help() or 2, "one-off conversions of a data folder")
    verbs = migrate.add_subparsers(dest="migrate_command", required=True)
    p = verbs.add_parser("encrypt", help="seal the plaintext documents of a log written before encryption (resumable)")
    p.add_argument("--data", default=argparse.SUPPRESS, help="data folder")
    p.set_defaults(handler=cmd_migrate_encrypt)
