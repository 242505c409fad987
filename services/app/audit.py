"""The audit trail of administrative actions: each one an event in the log, like every change.

Audited acts: key grants and revocations, exports, backups and restores, projector holds,
rebuilds, erasures and maintenance runs (docs/audit.md). `orgmem audit` lists them all for the
host's operator; `GET /v1/admin/audit` lists a tenant's for its admins."""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import datetime

from schemas.events import AdminActionRecorded, ErasureRecorded, MaintenanceRunFinished, MaintenanceRunStarted
from services.app.log_lanes import scan
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


# --- reading the trail ---------------------------------------------------------------------------

# Acts on the whole data folder (backups, restores, rebuilds, an export of every tenant) are
# recorded under this tenant: they name no one tenant.
HOST_WIDE = "*"
# What a tenant's admin sees of a host-wide act over the API: what was done, when, by whom, how.
# Paths and counts stay with the host's operator (`orgmem audit`): a count of every tenant's rows
# or events, less one's own, is the size of the others.
HOST_WIDE_FIELDS = ("format", "online", "replace")


# The families of actions recorded today (an action's first word: `key.created` is a key act).
AUDIT_KINDS = ("key", "export", "backup", "restore", "erasure", "maintenance", "projections", "rebuild")


def kind_of(action: str) -> str:
    """The family of an action: `key.created` -> key, `erasure_reapplied` -> erasure."""
    return re.split(r"[._]", action, maxsplit=1)[0]


def _entry(logged) -> tuple[str, str, dict] | None:
    """(action, actor, details) of an audited event; None for any other event."""
    event = logged.event
    if isinstance(event, AdminActionRecorded):
        return event.action, event.actor, event.details
    if isinstance(event, ErasureRecorded):
        # The target as recorded: a row id, or a keyed hash for a source or a subject (never
        # decrypted here; whoever holds the tenant's key can check a name against it).
        return f"erasure.{event.by}", event.actor, {"erasure_id": event.erasure_id, "reason": event.reason,
                                                    "target": event.target, "rows": event.rows,
                                                    "keys_destroyed": event.keys_destroyed}
    if isinstance(event, MaintenanceRunStarted):
        return f"maintenance.{event.job}.started", event.requested_by or "system", \
            {"run_id": event.run_id, "judge": event.judge, "params": event.params}
    if isinstance(event, MaintenanceRunFinished):
        return f"maintenance.{event.status}", "system", {"run_id": event.run_id, "summary": event.summary}
    return None


def _entries(logged_events, tenants: set[str] | None, since: datetime | None) -> Iterator[tuple]:
    for logged in logged_events:
        if tenants is not None and logged.event.tenant not in tenants:
            continue
        if since is not None and logged.appended_at < since:
            continue
        entry = _entry(logged)
        if entry is not None:
            yield (logged, *entry)


def audit_entries(event_log: EventLog, tenant: str | None = None, since: datetime | None = None,
                  batch: int = 1000) -> Iterator[tuple]:
    """Audited acts in log order (lane by lane where the log is split by tenant), as
    (logged, action, actor, details): admin actions (keys, exports, backups, restores, holds,
    rebuilds), erasures, and maintenance runs started and finished. `tenant`: only its own acts."""
    yield from _entries(scan(event_log, event_log.read, tenant, batch), None if tenant is None else {tenant}, since)


def entry_record(logged, action: str, actor: str, details: dict) -> dict:
    """One audited act as `orgmem audit --json` and `GET /v1/admin/audit` give it."""
    return {"position": logged.position, "at": logged.appended_at, "tenant": logged.event.tenant,
            "kind": kind_of(action), "action": action, "actor": actor, "details": details}


def tenant_trail(event_log: EventLog, tenant: str, since: datetime | None = None, limit: int = 100,
                 kinds: Sequence[str] = (), batch: int = 1000) -> tuple[list[dict], bool]:
    """What a tenant's admin may read of the trail, newest first, at most `limit`: the tenant's
    own acts, and the host-wide ones (they touch its data too) with HOST_WIDE_FIELDS only.
    Never another tenant's. Returns the records and whether older ones were left out.

    Reads the lanes that hold them from their start: the log has no index by time or type."""
    lanes = {event_log.lane_for(tenant): tenant}
    lanes.setdefault(event_log.lane_for(HOST_WIDE), HOST_WIDE)  # one lane may hold both: read once
    wanted, records = set(kinds), []
    for who in lanes.values():
        kept: deque[dict] = deque(maxlen=limit + 1)  # per lane: lanes are read one after the other
        for logged, action, actor, details in _entries(scan(event_log, event_log.read, who, batch),
                                                       {tenant, HOST_WIDE}, since):
            if wanted and kind_of(action) not in wanted:
                continue
            if logged.event.tenant == HOST_WIDE:
                details = {k: v for k, v in details.items() if k in HOST_WIDE_FIELDS}
            kept.append(entry_record(logged, action, actor, details))
        records += kept
    records.sort(key=lambda r: (r["at"], r["position"]), reverse=True)
    return records[:limit], len(records) > limit
