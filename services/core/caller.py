"""Who asks: the identity every use case, adapter and route passes along."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    """Who asks: the tenant, and the principal and groups that access lists are matched against.
    readers=None means unrestricted within the tenant (system jobs, the embedded demo)."""

    tenant: str = "default"
    readers: frozenset[str] | None = None
    name: str = "system"
    role: str = "admin"  # reader | writer | admin


# System jobs and the embedded demo: the default tenant, no access list applied.
SYSTEM = Caller()
