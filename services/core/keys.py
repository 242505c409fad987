"""API keys as the rest of orgmem sees them: the key's public record, the token's shape, the rules
for names, and what a creator may grant. The store that holds their hashes is an adapter
(`adapters/key_store/sqlite.py`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from schemas.admin import MAX_KEY_LIFETIME_S
from services.core.caller import Caller
from services.errors import KeyRequestError

ROLES = ("reader", "writer", "admin")  # in rising order of power
TOKEN_PREFIX = "om_"
TOKEN = re.compile(r"^om_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")
# Tenants, principals and groups: printable names without spaces; "*" is the public ACL token.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+:/=-]{0,127}$")
MAX_LIFETIME = timedelta(seconds=MAX_KEY_LIFETIME_S)


def readers_of(principal: str, groups: Iterable[str]) -> frozenset[str]:
    """The access-list tokens a key of `principal` in `groups` reads with (see Scope): principals
    and groups in separate namespaces, as `scope.reader_tokens_for` defines them."""
    from services.core.scope import reader_tokens_for

    return reader_tokens_for(principal, tuple(groups))


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant: str
    principal: str
    groups: tuple[str, ...]
    role: str
    unrestricted: bool
    name: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def active(self) -> bool:
        return self.revoked_at is None and not self.expired(datetime.now(UTC))

    def caller(self) -> Caller:
        readers = None if self.unrestricted else readers_of(self.principal, self.groups)
        return Caller(tenant=self.tenant, readers=readers, name=f"{self.principal} (key {self.key_id})", role=self.role)

    def audit_details(self) -> dict:
        return {"key_id": self.key_id, "principal": self.principal, "groups": list(self.groups), "role": self.role,
                "unrestricted": self.unrestricted, "name": self.name,
                "expires_at": self.expires_at.isoformat() if self.expires_at else None}

    def public(self) -> dict:
        """Everything about a key except its secret and hash: safe to list, print and audit."""
        return {"key_id": self.key_id, "tenant": self.tenant, "principal": self.principal, "groups": list(self.groups),
                "role": self.role, "unrestricted": self.unrestricted, "name": self.name,
                "created_at": self.created_at.isoformat(), "created_by": self.created_by,
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None, "revoked_by": self.revoked_by,
                "expires_at": self.expires_at.isoformat() if self.expires_at else None}


def check_name(field: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise KeyRequestError(f"{field}: {value!r} is not a valid name (1-128 of letters, digits and ._@+:/=-, "
                        "starting with a letter or digit)")
    return value


def check_expiry(expires_at: datetime | None, now: datetime) -> datetime | None:
    """A key's expiry: a time zone is required, it lies in the future and at most MAX_LIFETIME ahead."""
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        raise KeyRequestError("expires_at: give a time zone (e.g. 2030-01-01T00:00:00Z)")
    if expires_at <= now:
        raise KeyRequestError(f"expires_at: {expires_at.isoformat()} is not in the future")
    if expires_at - now > MAX_LIFETIME:
        raise KeyRequestError(f"expires_at: at most {MAX_LIFETIME.days} days ahead")
    return expires_at


def grant_refusal(creator: Caller, tenant: str, principal: str, groups: Iterable[str], role: str,
                  unrestricted: bool) -> str | None:
    """Why `creator` may not create this key, or None when it may. A key never grants more than its
    creator holds: the same tenant, a role no higher, and the access lists it reads a subset of the
    creator's (an unrestricted key only from an unrestricted creator). The key's readers come from
    `readers_of`, the function its caller() uses, so the check and the effect cannot drift apart."""
    if tenant != creator.tenant:
        return f"tenant: a key can be created only in the creator's tenant ({creator.tenant!r})"
    if role not in ROLES or creator.role not in ROLES or ROLES.index(role) > ROLES.index(creator.role):
        return f"role: {role!r} is above the creator's role ({creator.role!r})"
    if creator.readers is None:
        return None
    if unrestricted:
        return "unrestricted: only a caller that is unrestricted itself may create an unrestricted key"
    beyond = sorted(readers_of(principal, groups) - creator.readers)
    if beyond:
        return (f"principal, groups: {', '.join(beyond)} would let the key read access lists the creator cannot; "
                "a key may stand only for the creator's own principal and groups")
    return None


def key_id_of(token: str) -> str | None:
    """The public key id inside a presented token, or None when it is not shaped like one of ours."""
    match = TOKEN.match(token) if isinstance(token, str) else None
    return match.group(1) if match else None
