"""What every API key store shares: the checks of a new key, the secret's scrypt hash, and the
memory of tokens that verified once (so that a request costs a lookup, not a ~50 ms hash)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from datetime import datetime

from services.core.keys import ROLES, TOKEN_PREFIX, check_expiry, check_name
from services.errors import KeyRequestError

SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
_CACHE_LIMIT = 10_000


def hash_secret(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode("utf-8"), salt=salt, maxmem=64 * 1024 * 1024, **SCRYPT)


def checked_request(tenant: str, principal: str, role: str, groups: Sequence[str], name: str, unrestricted: bool,
                    expires_at: datetime | None, now: datetime) -> tuple[tuple[str, ...], datetime | None]:
    """Refuse a key that may not exist (KeyRequestError); its groups without repeats and its expiry."""
    check_name("tenant", tenant)
    check_name("principal", principal)
    if isinstance(groups, str):  # a string is a sequence of characters, not of groups
        raise KeyRequestError("groups: expected a list of names, got a string")
    for group in groups:
        check_name("groups", group)
    if role not in ROLES:
        raise KeyRequestError(f"role: {role!r} is not one of {', '.join(ROLES)}")
    if unrestricted is not True and unrestricted is not False:
        raise KeyRequestError(f"unrestricted: expected true or false, got {type(unrestricted).__name__}")
    if unrestricted and role != "admin":
        raise KeyRequestError("unrestricted: only an admin key may read past access lists")
    if not isinstance(name, str) or len(name) > 200:
        raise KeyRequestError("name: a text of at most 200 characters")
    if expires_at is not None and not isinstance(expires_at, datetime):
        raise KeyRequestError(f"expires_at: expected a time, got {type(expires_at).__name__}")
    return tuple(dict.fromkeys(groups)), check_expiry(expires_at, now)


def checked_actor(actor: str) -> str:
    """Who creates or revokes a key, as the audit trail names them (a caller's name, `cli:<user>`)."""
    if not isinstance(actor, str) or not actor or len(actor) > 300:
        raise KeyRequestError("actor: a text of 1 to 300 characters")
    return actor


class VerifiedTokens:
    """Tokens that verified, by SHA-256, each tied to the stored hash it matched: a key whose hash
    changed (or whose id was reused) verifies afresh. Revocation and expiry are checked by the
    store on every request, before this is asked."""

    def __init__(self):
        self._seen: dict[bytes, bytes] = {}

    def matches(self, token: str, salt: bytes, stored: bytes, cached_only: bool) -> bool:
        fingerprint = hashlib.sha256(token.encode("utf-8")).digest()
        cached = self._seen.get(fingerprint)
        if cached is not None and hmac.compare_digest(cached, stored):
            return True
        if cached_only:
            return False
        secret = token[len(TOKEN_PREFIX) + 13:]
        if not hmac.compare_digest(hash_secret(secret, salt), stored):
            return False
        if len(self._seen) >= _CACHE_LIMIT:
            self._seen.clear()
        self._seen[fingerprint] = stored
        return True
