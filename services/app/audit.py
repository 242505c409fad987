"""The audit trail of administrative actions: each one an event in the log, like every change."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from schemas.events import AdminActionRecorded
from services.core.keys import ApiKey
from services.ports import EventLog, KeyStore

log = logging.getLogger(__name__)


def record_admin_action(event_log: EventLog, tenant: str, action: str, actor: str, details: dict | None = None) -> int:
    """Append an audited admin action (who, what; the log stamps when). Never pass secrets here."""
    logged = event_log.append([AdminActionRecorded(tenant=tenant, action=action, actor=actor, details=details or {})])
    return logged[-1].position


def create_key_audited(store: KeyStore, event_log: EventLog, tenant: str, principal: str, role: str, actor: str, *,
                       groups: Sequence[str] = (), name: str = "", unrestricted: bool = False,
                       expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A key and its `key.created` audit event, together or not at all.

    The key is written pending (it exists but does not verify), then the event is appended, then the
    key is activated. An append that fails deletes the pending key and re-raises. Whatever step
    fails, and even if the process dies between steps, what can be left is a key that never
    verifies (with or without its audit record), never a working key without one. (Creating the
    key active and revoking it when the append fails would leave a working, unaudited key if the
    process died, or the revocation failed, in between.)"""
    key, token = store.create(tenant, principal, role, actor, groups=groups, name=name, unrestricted=unrestricted,
                              expires_at=expires_at, pending=True)
    try:
        record_admin_action(event_log, key.tenant, "key.created", actor, key.audit_details())
    except BaseException:
        try:
            store.discard(key.key_id)
        except Exception:  # the key stays pending: it never verifies
            log.warning("pending key %s could not be deleted after its audit event failed", key.key_id, exc_info=True)
        raise
    store.activate(key.key_id)
    return key, token


def revoke_key_audited(store: KeyStore, event_log: EventLog, key_id: str, actor: str,
                       tenant: str | None = None) -> tuple[ApiKey, bool]:
    """Revoke a key, then audit it; returns the key and whether this call revoked it. Revocation
    comes first: should the append fail, the key has stopped working (the safe side) and the error
    is raised, so the caller knows the audit record is missing."""
    before = store.get(key_id)
    key = store.revoke(key_id, actor, tenant=tenant)
    revoked_now = before is not None and before.revoked_at is None
    if revoked_now:
        record_admin_action(event_log, key.tenant, "key.revoked", actor,
                            {"key_id": key.key_id, "principal": key.principal, "role": key.role})
    return key, revoked_now
