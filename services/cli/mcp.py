"""`orgmem mcp`: the MCP server over stdio, for a desktop client (Claude Desktop and others) on the
embedded profile. stdout carries the protocol, so this command logs to stderr only, at WARNING."""

from __future__ import annotations

import argparse
import logging
import os

from services.cli.common import settings_from
from services.errors import Invalid

KEY_VARIABLE = "ORGMEM_MCP_KEY"  # a key in the client's config env stays off the process list


def cmd_mcp(args: argparse.Namespace) -> int:
    from services.mcp.stdio import serve

    for name in ("", "services", "workers", "schemas", "bench"):
        logging.getLogger(name).setLevel(logging.WARNING)
    key = args.key or os.environ.get(KEY_VARIABLE)
    if args.principal is None and not key:
        raise Invalid(f"mcp: give --key TOKEN (or {KEY_VARIABLE}) or --principal NAME --tenant T")
    if args.principal is not None and not args.tenant:
        raise Invalid("--tenant: required with --principal")
    serve(settings_from(args), key=None if args.principal is not None else key, principal=args.principal,
          tenant=args.tenant, role=args.role, groups=args.group or [])
    return 0


def register(command, _subparsers) -> None:
    p = command("mcp", cmd_mcp, "serve MCP over stdio for a desktop client (opens the data folder itself)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--key", help=f"an API key to act as (or set {KEY_VARIABLE})")
    who.add_argument("--principal", help="act as this principal, matched against access lists")
    p.add_argument("--tenant", help="the principal's tenant")
    p.add_argument("--role", choices=["reader", "writer"], default="reader", help="the principal's role (default reader)")
    p.add_argument("--group", action="append", help="a group of the principal (repeatable)")
