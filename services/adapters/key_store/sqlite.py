"""API keys: a SQLite file in the data folder that holds only salted hashes of the secrets.

A key reads `om_<key id>_<secret>`. The key id is public (it names the key in lists, audit
entries and revocations); the secret is 256 random bits, shown once at creation and stored only
as an scrypt hash with its own salt, so a copy of the file does not let anyone call the API.
scrypt costs ~50 ms, far too much per request, so a key that verified once is remembered in
memory by a SHA-256 of the presented token, tied to the stored hash it matched; the row is still
read on every request, so a revocation (or an expiry) from another process takes effect at once.

A key may be created pending (`create(pending=True)`): it exists, but it does not verify and is
not listed until `activate`. Creation with an audit record uses that (services/app/audit.py), so a
key never works without its audit event. Files of an earlier version gain the new columns when
opened (`expires_at`, `pending`); their keys keep working.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from services.adapters.sqlite_common import (
    decode_time,
    encode_time,
    open_with_schema,
    rollback_quietly,
    translated,
)
from services.adapters.key_store.common import SCRYPT as _SCRYPT
from services.adapters.key_store.common import VerifiedTokens, checked_actor, checked_request
from services.adapters.key_store.common import hash_secret as _hash
from services.core.keys import TOKEN_PREFIX, ApiKey, key_id_of
from services.errors import KeyRequestError

COMPONENT = "key store (sqlite)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, principal TEXT NOT NULL, groups TEXT NOT NULL,
    role TEXT NOT NULL, unrestricted INTEGER NOT NULL DEFAULT 0, name TEXT NOT NULL DEFAULT '',
    salt BLOB NOT NULL, hash BLOB NOT NULL, params TEXT NOT NULL,
    created_at TEXT NOT NULL, created_by TEXT NOT NULL, revoked_at TEXT, revoked_by TEXT,
    expires_at TEXT, pending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys(tenant, created_at);
"""
# Columns added after the first version, with their definition for ALTER TABLE.
_ADDED = {"expires_at": "TEXT", "pending": "INTEGER NOT NULL DEFAULT 0"}


def _now() -> datetime:
    return datetime.now(UTC)


class SqliteKeyStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._conn = open_with_schema(self.path, _SCHEMA, COMPONENT)  # created 0600 (sqlite_common)
        self._lock = threading.Lock()
        self._verified = VerifiedTokens()
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns a file of an earlier version lacks, once, even with two processes opening it."""
        with self._lock, translated(COMPONENT):
            if not self._missing():
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for column in self._missing():
                    self._conn.execute(f"ALTER TABLE api_keys ADD COLUMN {column} {_ADDED[column]}")
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(self._conn)
                raise

    def _missing(self) -> list[str]:
        present = {row[1] for row in self._conn.execute("PRAGMA table_info(api_keys)")}
        return [column for column in _ADDED if column not in present]

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock, translated(COMPONENT):
            return self._conn.execute(sql, args).fetchall()

    @staticmethod
    def _key(row: tuple) -> ApiKey:
        (key_id, tenant, principal, groups, role, unrestricted, name, created_at, created_by, revoked_at, revoked_by,
         expires_at) = row
        return ApiKey(key_id, tenant, principal, tuple(json.loads(groups)), role, bool(unrestricted), name,
                      decode_time(created_at), created_by, decode_time(revoked_at), revoked_by, decode_time(expires_at))

    _COLUMNS = ("key_id, tenant, principal, groups, role, unrestricted, name, created_at, created_by, "
                "revoked_at, revoked_by, expires_at")

    def create(self, tenant: str, principal: str, role: str, actor: str, groups: Sequence[str] = (),
               name: str = "", unrestricted: bool = False, expires_at: datetime | None = None,
               pending: bool = False) -> tuple[ApiKey, str]:
        """A new key and its token. The token is returned here and never again. pending: the key
        does not verify, and is not listed, until `activate(key_id)`."""
        now = _now()
        groups, expires_at = checked_request(tenant, principal, role, groups, name, unrestricted, expires_at, now)
        checked_actor(actor)
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        digest = _hash(secret, salt)
        with self._lock, translated(COMPONENT):
            self._conn.execute(
                f"INSERT INTO api_keys ({self._COLUMNS}, salt, hash, params, pending) "
                "VALUES (?,?,?,?,?,?,?,?,?,NULL,NULL,?,?,?,?,?)",
                (key_id, tenant, principal, json.dumps(list(groups)), role, int(unrestricted), name,
                 encode_time(now), actor, encode_time(expires_at), salt, digest, json.dumps(_SCRYPT), int(pending)),
            )
        key = ApiKey(key_id, tenant, principal, groups, role, unrestricted, name, now, actor, expires_at=expires_at)
        return key, f"{TOKEN_PREFIX}{key_id}_{secret}"

    def activate(self, key_id: str) -> None:
        """A pending key starts to verify."""
        if not isinstance(key_id, str) or not self._update(
                "UPDATE api_keys SET pending = 0 WHERE key_id = ? AND pending = 1", (key_id,)):
            raise KeyRequestError(f"key_id: no pending key {key_id!r}")

    def discard(self, key_id: str) -> None:
        """Delete a pending key (its creation failed before it was activated); active keys stay."""
        if isinstance(key_id, str):
            self._update("DELETE FROM api_keys WHERE key_id = ? AND pending = 1", (key_id,))

    def _update(self, sql: str, args: tuple) -> int:
        with self._lock, translated(COMPONENT):
            return self._conn.execute(sql, args).rowcount

    def get(self, key_id: str) -> ApiKey | None:
        if not isinstance(key_id, str):
            return None
        rows = self._query(f"SELECT {self._COLUMNS} FROM api_keys WHERE key_id = ? AND pending = 0", (key_id,))
        return self._key(rows[0]) if rows else None

    def list(self, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKey]:
        """Keys, oldest first; include_revoked=False: only keys that verify now (not revoked or expired)."""
        where, args = ["pending = 0"], []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if not include_revoked:
            where.append("revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)")
            args.append(encode_time(_now()))
        clause = " AND ".join(where)
        return [self._key(r) for r in self._query(f"SELECT {self._COLUMNS} FROM api_keys WHERE {clause} "
                                                  "ORDER BY created_at", tuple(args))]

    def count_active(self) -> int:
        return self._query("SELECT COUNT(*) FROM api_keys WHERE pending = 0 AND revoked_at IS NULL "
                           "AND (expires_at IS NULL OR expires_at > ?)", (encode_time(_now()),))[0][0]

    def revoke(self, key_id: str, actor: str, tenant: str | None = None) -> ApiKey:
        """Revoke a key (of `tenant`, when given: a tenant's admin cannot see other tenants' keys)."""
        checked_actor(actor)
        key = self.get(key_id)
        if key is None or (tenant is not None and key.tenant != tenant):
            raise KeyRequestError(f"key_id: no key {key_id!r}")
        if key.revoked_at is None:
            self._query("UPDATE api_keys SET revoked_at = ?, revoked_by = ? WHERE key_id = ? AND revoked_at IS NULL",
                        (encode_time(_now()), actor, key_id))
        return self.get(key_id)

    def verify(self, token: str, cached_only: bool = False) -> ApiKey | None:
        """The active key a token belongs to, or None (unknown, pending, revoked, expired or wrong
        secret). cached_only: answer only from tokens verified before (no hash computed)."""
        key_id = key_id_of(token)
        if key_id is None:
            return None
        rows = self._query("SELECT salt, hash, revoked_at, expires_at, pending FROM api_keys WHERE key_id = ?",
                           (key_id,))
        if not rows:
            return None
        salt, stored, revoked_at, expires_at, pending = rows[0]
        if pending or revoked_at is not None or (expires_at is not None and decode_time(expires_at) <= _now()):
            return None
        if not self._verified.matches(token, salt, stored, cached_only):
            return None
        return self.get(key_id)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

