"""`orgmem keys create|list|revoke` and `orgmem audit`.

Keys are managed on the key store directly, so this works while a server runs: the data folder's
own SQLite file in the embedded profile, the Redis store every API replica shares in the cluster
profile (`auth.key_store`). Every change is an `AdminActionRecorded` event in the log, and
`orgmem audit` lists those together with every other audited act (services/app/audit.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import UTC, datetime, timedelta

from services.app.audit import AUDIT_KINDS, audit_entries, create_key_audited, entry_record, kind_of, revoke_key_audited
from services.cli.common import parse_time, settings_from
from services.core.keys import ROLES
from services.errors import KeyRequestError


def _actor(args: argparse.Namespace) -> str:
    if getattr(args, "actor", None):
        return args.actor
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name in this environment (some containers)
        return "cli"


def _open(args: argparse.Namespace):
    from services.bootstrap import key_store_for, open_event_log

    settings = settings_from(args)
    return settings, key_store_for(settings), open_event_log(settings)


def cmd_keys_create(args: argparse.Namespace) -> int:
    _, store, event_log = _open(args)
    try:
        actor = _actor(args)
        expires_at = args.expires_at
        if args.expires_in is not None:
            expires_at = datetime.now(UTC) + args.expires_in
        try:
            # The key and its audit event together or not at all (a failed append leaves no key).
            key, token = create_key_audited(store, event_log, args.tenant, args.principal, args.role, actor,
                                            groups=args.group or [], name=args.name or "",
                                            unrestricted=args.unrestricted, expires_at=expires_at)
        except KeyRequestError as exc:
            print(f"orgmem keys create: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps({**key.public(), "token": token}))
        else:
            until = f", expires {key.expires_at:%Y-%m-%d %H:%M:%S} UTC" if key.expires_at else ""
            print(f"created key {key.key_id} ({key.role}) for {key.principal} in tenant {key.tenant}{until}")
            print("the key is shown only now; store it in a secret manager:")
            print(token)
    finally:
        store.close()
        event_log.close()
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    _, store, event_log = _open(args)
    try:
        keys = store.list(tenant=args.tenant, include_revoked=not args.active)
    finally:
        store.close()
        event_log.close()
    if args.json:
        print(json.dumps([k.public() for k in keys], indent=1))
        return 0
    print(f"{'key id':<13} {'tenant':<16} {'principal':<28} {'role':<7} {'created':<20} status")
    for k in keys:
        if k.revoked_at:
            status = f"revoked {k.revoked_at:%Y-%m-%d %H:%M} by {k.revoked_by}"
        elif k.expires_at:
            status = f"{'active' if k.active else 'expired'} until {k.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        else:
            status = "active"
        extra = (" groups=" + ",".join(k.groups) if k.groups else "") + (" unrestricted" if k.unrestricted else "")
        print(f"{k.key_id:<13} {k.tenant:<16} {k.principal:<28} {k.role:<7} {k.created_at:%Y-%m-%d %H:%M:%S}  "
              f"{status}{extra}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    _, store, event_log = _open(args)
    try:
        actor = _actor(args)
        try:
            key, revoked_now = revoke_key_audited(store, event_log, args.key_id, actor, tenant=args.tenant)
        except KeyRequestError as exc:
            print(f"orgmem keys revoke: {exc}", file=sys.stderr)
            return 2
        if revoked_now:
            print(f"revoked key {key.key_id} ({key.principal}, {key.role}, tenant {key.tenant})")
        else:
            print(f"key {key.key_id} was already revoked on {key.revoked_at:%Y-%m-%d %H:%M:%S} by {key.revoked_by}")
    finally:
        store.close()
        event_log.close()
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from services.bootstrap import open_event_log

    event_log = open_event_log(settings_from(args))
    try:
        entries = list(audit_entries(event_log, args.tenant, args.since))
    finally:
        event_log.close()
    if args.action:
        entries = [e for e in entries if e[1].startswith(args.action)]
    if args.kind:
        entries = [e for e in entries if kind_of(e[1]) in args.kind]
    entries = entries[-args.limit:] if args.limit else entries
    for entry in entries:
        record = entry_record(*entry)
        if args.json:
            print(json.dumps({**record, "at": record["at"].isoformat()}, default=str))
        else:
            summary = " ".join(f"{k}={v}" for k, v in record["details"].items() if v not in (None, "", [], {}))
            print(f"{record['at']:%Y-%m-%d %H:%M:%S}  #{record['position']:<8} {record['tenant']:<14} "
                  f"{record['action']:<28} by {record['actor']}  {summary}")
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration(value: str) -> timedelta:
    """A lifetime like 3600, 90s, 30m, 12h, 30d or 2w."""
    text = value.strip().lower()
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 3600, 12h, 30d): {value!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a lifetime must be positive: {value!r}")
    return timedelta(seconds=seconds)


def register(command, sub) -> None:
    keys = command("keys", lambda args: keys.print_help() or 2, "create, list and revoke API keys")
    verbs = keys.add_subparsers(dest="keys_command", required=True)

    def verb(name: str, handler, help_: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_)
        # SUPPRESS: an omitted --data here must not overwrite one given before the verb.
        p.add_argument("--data", default=argparse.SUPPRESS, help="data folder")
        p.set_defaults(handler=handler)
        return p

    p = verb("create", cmd_keys_create, "create a key and print it once")
    p.add_argument("--tenant", default="default")
    p.add_argument("--principal", required=True, help="the user or service the key stands for")
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--group", action="append", help="a group the principal is in (repeatable)")
    p.add_argument("--name", help="a note: what the key is for")
    p.add_argument("--unrestricted", action="store_true", help="admin only: read every row of the tenant")
    until = p.add_mutually_exclusive_group()
    until.add_argument("--expires-in", type=_duration, help="the key stops working after this long (12h, 30d, 2w)")
    until.add_argument("--expires-at", type=parse_time, help="the key stops working at this ISO time (UTC if no zone)")
    p.add_argument("--actor", help="who creates it, for the audit log (default cli:<user>)")
    p.add_argument("--json", action="store_true")
    p = verb("list", cmd_keys_list, "list keys (never their secrets)")
    p.add_argument("--tenant")
    p.add_argument("--active", action="store_true", help="only keys not revoked")
    p.add_argument("--json", action="store_true")
    p = verb("revoke", cmd_keys_revoke, "revoke a key at once")
    p.add_argument("key_id")
    p.add_argument("--tenant", help="refuse unless the key belongs to this tenant")
    p.add_argument("--actor")
    p = command("audit", cmd_audit, "list audited acts from the log: key grants and revocations, exports, "
                "backups, restores, erasures, maintenance runs and other admin actions")
    p.add_argument("--tenant")
    p.add_argument("--since", type=parse_time)
    p.add_argument("--action", help="only actions starting with this, e.g. key. or maintenance.")
    p.add_argument("--kind", action="append", choices=AUDIT_KINDS,
                   help="only acts of this kind (repeatable): the action's first part")
    p.add_argument("--limit", type=int, default=0, help="only the last N")
    p.add_argument("--json", action="store_true")
