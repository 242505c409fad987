"""API keys in Redis (the cluster profile): every API replica verifies against the same keys, so a
key created on one (or by `orgmem keys create` anywhere) works on all, and a revocation on one
stops it on all at the next request.

Keys are stored as the SQLite store stores them (services/adapters/key_store/sqlite.py): the
public record and an scrypt hash of the secret with its own salt, never the secret. Every request
reads the key's record (one HGETALL), so revocation and expiry take effect at once; the hash is
computed only the first time a token is seen by a process.

Layout: hash `<prefix>:api-key:<key id>` per key (its fields below), sorted set
`<prefix>:api-keys` of key ids by creation time (for listing in creation order). Creation,
activation, discarding and revocation are each one script, so two replicas cannot interleave
them. The server must keep its append-only file on, as for the data keys: a revocation lost in
a restart would let a revoked key work again.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import redis

from services.adapters.key_store.common import (
    SCRYPT,
    VerifiedTokens,
    checked_actor,
    checked_request,
    hash_secret,
)
from services.core.keys import TOKEN_PREFIX, ApiKey, key_id_of
from services.errors import BackendUnavailable, Invalid, KeyRequestError

log = logging.getLogger(__name__)

COMPONENT = "key store (redis)"
_KEY_ID = re.compile(r"[0-9a-f]{12}")
_TEXT = ("tenant", "principal", "role", "name", "created_at", "created_by", "revoked_at", "revoked_by",
         "expires_at", "groups", "unrestricted", "pending")

# KEYS: record, index. ARGV: score, key id, field1, value1, ... Returns 0 when the id exists.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
"""
# KEYS: record. Returns 1 when a pending key became active.
_ACTIVATE = """
if redis.call('HGET', KEYS[1], 'pending') ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'pending', '0')
return 1
"""
# KEYS: record, index. ARGV: key id. Deletes the key only while it is pending.
_DISCARD = """
if redis.call('HGET', KEYS[1], 'pending') ~= '1' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""
# KEYS: record. ARGV: time, actor. The first revocation stands; a later one changes nothing.
_REVOKE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'revoked_at') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'revoked_at', ARGV[1], 'revoked_by', ARGV[2])
return 1
"""


def _now() -> datetime:
    return datetime.now(UTC)


def _encode_time(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value is not None else ""


def _decode_time(value: str) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class RedisKeyStore:
    def __init__(self, url: str, prefix: str = "orgmem", client: redis.Redis | None = None):
        self._client = client or redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)
        self._prefix = prefix
        self._index = f"{prefix}:api-keys"
        self._verified = VerifiedTokens()
        with _translated("connect"):
            self._create = self._client.register_script(_CREATE)
            self._activate = self._client.register_script(_ACTIVATE)
            self._discard = self._client.register_script(_DISCARD)
            self._revoke = self._client.register_script(_REVOKE)
            self._require_aof()

    def _require_aof(self) -> None:
        try:
            appendonly = self._client.config_get("appendonly").get("appendonly")
        except redis.ResponseError:  # CONFIG is disabled (managed Redis): its operator vouches for it
            log.warning("%s: cannot read the server's appendonly setting; revocations are durable only with AOF on",
                        COMPONENT)
            return
        if appendonly != "yes":
            raise Invalid(f"{COMPONENT}: the Redis server runs without its append-only file (appendonly {appendonly}); "
                          "a revocation lost in a restart would let a revoked key work again: start it with "
                          "--appendonly yes")

    def _record(self, key_id: str) -> str:
        return f"{self._prefix}:api-key:{key_id}"

    # --- writes ----------------------------------------------------------------------------

    def create(self, tenant: str, principal: str, role: str, actor: str, groups: Sequence[str] = (),
               name: str = "", unrestricted: bool = False, expires_at: datetime | None = None,
               pending: bool = False) -> tuple[ApiKey, str]:
        """A new key and its token (returned here and never again); pending: see the KeyStore port."""
        now = _now()
        groups, expires_at = checked_request(tenant, principal, role, groups, name, unrestricted, expires_at, now)
        checked_actor(actor)
        secret, salt = secrets.token_urlsafe(32), secrets.token_bytes(16)
        digest = hash_secret(secret, salt)
        fields = {"tenant": tenant, "principal": principal, "groups": "\x1f".join(groups), "role": role,
                  "unrestricted": "1" if unrestricted else "0", "name": name, "salt": salt, "hash": digest,
                  "params": "scrypt n={n} r={r} p={p} dklen={dklen}".format(**SCRYPT),
                  "created_at": _encode_time(now), "created_by": actor, "expires_at": _encode_time(expires_at),
                  "pending": "1" if pending else "0"}
        flat = [item for pair in fields.items() for item in pair]
        for _ in range(3):  # 48 random bits: a repeat is all but impossible, and refused if it happens
            key_id = secrets.token_hex(6)
            with _translated("create"):
                created = self._create(keys=[self._record(key_id), self._index],
                                       args=[now.timestamp(), key_id, *flat])
            if created:
                key = ApiKey(key_id, tenant, principal, groups, role, unrestricted, name, now, actor,
                             expires_at=expires_at)
                return key, f"{TOKEN_PREFIX}{key_id}_{secret}"
        raise BackendUnavailable(COMPONENT, "could not draw an unused key id")

    def activate(self, key_id: str) -> None:
        if not _valid_id(key_id) or not self._run(self._activate, "activate", [self._record(key_id)]):
            raise KeyRequestError(f"key_id: no pending key {key_id!r}")

    def discard(self, key_id: str) -> None:
        if _valid_id(key_id):
            self._run(self._discard, "discard", [self._record(key_id), self._index], [key_id])

    def revoke(self, key_id: str, actor: str, tenant: str | None = None) -> ApiKey:
        """Revoke a key (of `tenant`, when given: a tenant's admin cannot see other tenants' keys)."""
        checked_actor(actor)
        key = self.get(key_id)
        if key is None or (tenant is not None and key.tenant != tenant):
            raise KeyRequestError(f"key_id: no key {key_id!r}")
        self._run(self._revoke, "revoke", [self._record(key_id)], [_encode_time(_now()), actor])
        return self.get(key_id)

    def _run(self, script, action: str, keys: list[str], args: list | None = None) -> int:
        with _translated(action):
            return int(script(keys=keys, args=args or []))

    # --- reads -----------------------------------------------------------------------------

    def _fields(self, key_id: str) -> dict[str, bytes] | None:
        if not _valid_id(key_id):
            return None
        with _translated("read"):
            fields = self._client.hgetall(self._record(key_id))
        return {k.decode(): v for k, v in fields.items()} if fields else None

    @staticmethod
    def _key(key_id: str, fields: dict[str, bytes]) -> ApiKey:
        text = {name: fields.get(name, b"").decode("utf-8") for name in _TEXT}
        groups = tuple(text["groups"].split("\x1f")) if text["groups"] else ()
        return ApiKey(key_id, text["tenant"], text["principal"], groups, text["role"], text["unrestricted"] == "1",
                      text["name"], _decode_time(text["created_at"]), text["created_by"],
                      _decode_time(text["revoked_at"]), text["revoked_by"] or None, _decode_time(text["expires_at"]))

    def get(self, key_id: str) -> ApiKey | None:
        fields = self._fields(key_id)
        if fields is None or fields.get("pending") != b"0":
            return None
        return self._key(key_id, fields)

    def _all(self) -> Iterator[ApiKey]:
        """Every active or revoked key (pending ones are left out), oldest first."""
        with _translated("list"):
            ids = [raw.decode() for raw in self._client.zrange(self._index, 0, -1)]
            pipe = self._client.pipeline(transaction=False)
            for key_id in ids:
                pipe.hgetall(self._record(key_id))
            records = pipe.execute()
        for key_id, raw in zip(ids, records, strict=True):
            fields = {k.decode(): v for k, v in raw.items()}
            if fields.get("pending") == b"0":
                yield self._key(key_id, fields)

    def list(self, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKey]:
        """Keys, oldest first; include_revoked=False: only keys that verify now (not revoked or expired)."""
        return [key for key in self._all()
                if (tenant is None or key.tenant == tenant) and (include_revoked or key.active)]

    def count_active(self) -> int:
        return sum(1 for key in self._all() if key.active)

    def verify(self, token: str, cached_only: bool = False) -> ApiKey | None:
        """The active key a token belongs to, or None (unknown, pending, revoked, expired or wrong
        secret). cached_only: answer only from tokens verified before (no hash computed)."""
        key_id = key_id_of(token)
        fields = self._fields(key_id) if key_id is not None else None
        if fields is None or fields.get("pending") != b"0" or fields.get("revoked_at"):
            return None
        key = self._key(key_id, fields)
        if key.expired(_now()) or not self._verified.matches(token, fields["salt"], fields["hash"], cached_only):
            return None
        return key

    def close(self) -> None:
        self._client.close()


def _valid_id(key_id: object) -> bool:
    return isinstance(key_id, str) and _KEY_ID.fullmatch(key_id) is not None


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Redis's connection and server errors become BackendUnavailable (503 naming the store)."""
    try:
        yield
    except redis.RedisError as exc:
        raise BackendUnavailable(COMPONENT, f"{action}: {type(exc).__name__}: {exc}") from exc
