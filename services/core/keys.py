"""API keys as the rest of orgmem sees them: the key's public record, the token's shape, and the
rules for names. The store that holds their hashes is an adapter (`adapters/key_store/sqlite.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from services.core.caller import Caller
from services.errors import KeyRequestError

ROLES = ("reader", "writer", "admin")
TOKEN_PREFIX = "om_"
TOKEN = re.compile(r"^om_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")
# Tenants, principals and groups: printable names without spaces; "*" is the public ACL token.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+:/=-]{0,127}$")


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

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def caller(self) -> Caller:
        readers = None if self.unrestricted else frozenset({self.principal.lower(), *(g.lower() for g in self.groups)})
        return Caller(tenant=self.tenant, readers=readers, name=f"{self.principal} (key {self.key_id})", role=self.role)

    def audit_details(self) -> dict:
        return {"key_id": self.key_id, "principal": self.principal, "groups": list(self.groups), "role": self.role,
                "unrestricted": self.unrestricted, "name": self.name}

    def public(self) -> dict:
        """Everything about a key except its secret and hash: safe to list, print and audit."""
        return {"key_id": self.key_id, "tenant": self.tenant, "principal": self.principal, "groups": list(self.groups),
                "role": self.role, "unrestricted": self.unrestricted, "name": self.name,
                "created_at": self.created_at.isoformat(), "created_by": self.created_by,
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None, "revoked_by": self.revoked_by}


def check_name(field: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise KeyRequestError(f"{field}: {value!r} is not a valid name (1-128 of letters, digits and ._@+:/=-, "
                        "starting with a letter or digit)")
    return value


def key_id_of(token: str) -> str | None:
    """The public key id inside a presented token, or None when it is not shaped like one of ours."""
    match = TOKEN.match(token)
    return match.group(1) if match else None


