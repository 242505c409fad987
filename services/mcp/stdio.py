"""MCP over stdio, for a desktop client on the embedded profile: this process opens the data folder
itself (as `orgmem serve` would, with its indexer) and answers as one Caller for its whole life.

The caller is an API key's (`--key`, verified like any API request) or a named local principal
(`--principal`, `--tenant`, `--role`): whoever can start this process can read the data folder
anyway (it is private to its owner), so the principal form narrows what the model is shown to that
principal's access lists, tenant and role; it grants nothing the files do not.

stdout is the protocol channel: while the memory opens, anything written to it (by Python or by a
native library) goes to stderr instead, and the SDK diverts it the same way while serving.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout

import anyio

from services.api.auth import credential_id
from services.api.problems import ApiProblem
from services.core.caller import Caller
from services.core.keys import check_name
from services.core.scope import reader_tokens_for
from services.errors import Invalid
from services.mcp.server import build_server
from services.mcp.tools import MemoryTools
from services.settings import Settings


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def local_caller(principal: str, tenant: str, role: str, groups: list[str]) -> Caller:
    """A named principal of a tenant, matched against access lists as a key for it would be."""
    if role not in ("reader", "writer"):
        raise Invalid(f"--role: reader or writer, not {role!r} (an admin works over the HTTP API)")
    check_name("--principal", principal)
    check_name("--tenant", tenant)
    for group in groups:
        check_name("--group", group)
    return Caller(tenant=tenant, readers=reader_tokens_for(principal, groups), name=f"local:{principal}", role=role)


def key_caller(state, token: str) -> Caller:
    try:
        caller, _ = state.auth.verify(token, credential_id(token), "stdio")
    except ApiProblem as problem:
        raise Invalid(f"--key: {problem.detail}") from None
    return caller


def serve(settings: Settings, *, key: str | None = None, principal: str | None = None, tenant: str | None = None,
          role: str = "reader", groups: list[str] | None = None) -> None:
    from services.api.app import AppState  # the API process's parts, without HTTP
    from services.bootstrap import build_memory

    if key:
        settings.auth.enabled = True  # a key is always verified, whatever the server's setting
    caller = None if key else local_caller(principal or "", tenant or "", role, groups or [])
    with stdout_to_stderr():
        memory, lock = build_memory(settings)
    try:
        with stdout_to_stderr():
            state = AppState(settings, memory)
        try:
            with stdout_to_stderr():
                caller = caller or key_caller(state, key)
                memory.catch_up()
            state.indexer.start()
            try:
                anyio.run(build_server(MemoryTools(state), lambda _ctx: caller).run_stdio_async)
            finally:
                state.indexer.stop()
                state.indexer.join(timeout=30)
        finally:
            state.parts.close()
    finally:
        memory.close()
        lock.release()
