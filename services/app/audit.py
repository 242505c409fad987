"""The audit trail of administrative actions: each one an event in the log, like every change.

Audited acts: key grants and revocations, exports, backups and restores, projector holds,
rebuilds, erasures and maintenance runs (docs/audit.md). `orgmem audit` lists them all for the
host's operator; `GET /v1/admin/audit` lists a tenant's for its admins."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta

from schemas.events import AdminActionRecorded, ErasureRecorded, MaintenanceRunFinished, MaintenanceRunStarted
from services.app.log_lanes import lane_spans
from services.core.positions import lane_start
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
# How far apart the clocks of the processes that append to one log may be (a search by time).
CLOCK_SKEW = timedelta(minutes=5)


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


def _forward(event_log: EventLog, after: int, head: int, batch: int) -> Iterator:
    """The lane's events in (after, head], page by page."""
    while after < head:
        # At most head - after events lie in (after, head]: no need to read past it.
        page = [e for e in event_log.read(after, min(batch, head - after)) if e.position <= head]
        if not page:
            return
        yield from page
        after = page[-1].position


def _start_at(event_log: EventLog, start: int, head: int, since: datetime | None) -> int:
    """A position of the lane after which lies every event appended at `since` or later: found by
    bisection (one one-event read a step), since times grow with positions. Appenders in other
    processes stamp their own clocks, so it looks CLOCK_SKEW earlier; the caller filters exactly."""
    if since is None:
        return start
    at, low, high = since - CLOCK_SKEW, start, head
    while high - low > 1:
        middle = (low + high) // 2
        found = event_log.read(middle, 1)
        if found and found[0].position <= high and found[0].appended_at < at:
            low = found[0].position
        else:
            high = middle
    return low


def _newest(event_log: EventLog, start: int, head: int, keep: Callable, want: int, batch: int) -> list:
    """The last `want` events of (start, head] that `keep` turns into a record, in log order:
    read backwards in spans of positions that double (positions may leave gaps: Kafka), so a
    trail with many acts is not read from its start."""
    found: list = []
    high, width = head, batch
    while high > start and len(found) < want:
        low = max(start, high - width)
        found = [r for e in _forward(event_log, low, high, batch) if (r := keep(e)) is not None] + found
        high, width = low, width * 2
    return found[-want:]


def audit_entries(event_log: EventLog, tenant: str | None = None, since: datetime | None = None,
                  batch: int = 1000) -> Iterator[tuple]:
    """Audited acts in log order (lane by lane where the log is split by tenant), as
    (logged, action, actor, details): admin actions (keys, exports, backups, restores, holds,
    rebuilds), erasures, and maintenance runs started and finished. `tenant`: only its own acts."""
    for start, head in lane_spans(event_log, tenant):
        events = _forward(event_log, _start_at(event_log, start, head, since), head, batch)
        yield from _entries(events, None if tenant is None else {tenant}, since)


def entry_record(logged, action: str, actor: str, details: dict) -> dict:
    """One audited act as `orgmem audit --json` and `GET /v1/admin/audit` give it."""
    return {"position": logged.position, "at": logged.appended_at, "tenant": logged.event.tenant,
            "kind": kind_of(action), "action": action, "actor": actor, "details": details}


def tenant_trail(event_log: EventLog, tenant: str, since: datetime | None = None, limit: int = 100,
                 kinds: Sequence[str] = (), batch: int = 1000) -> tuple[list[dict], bool]:
    """What a tenant's admin may read of the trail, newest first, at most `limit`: the tenant's
    own acts, and the host-wide ones (they touch its data too) with HOST_WIDE_FIELDS only.
    Never another tenant's. Returns the records and whether older ones were left out.

    The log has no index by type: this reads the lanes back from their heads until `limit + 1`
    acts are found, or to `since` (found by bisection), or to their start."""
    wanted = set(kinds)

    def keep(logged) -> dict | None:
        for _, action, actor, details in _entries((logged,), {tenant, HOST_WIDE}, since):
            if wanted and kind_of(action) not in wanted:
                return None
            if logged.event.tenant == HOST_WIDE:
                details = {k: v for k, v in details.items() if k in HOST_WIDE_FIELDS}
            return entry_record(logged, action, actor, details)
        return None

    lanes = {event_log.lane_for(tenant), event_log.lane_for(HOST_WIDE)}  # one lane may hold both: read once
    heads, records = event_log.heads(), []
    for lane in sorted(lanes):
        start, head = lane_start(lane), heads.of(lane)
        records += _newest(event_log, _start_at(event_log, start, head, since), head, keep, limit + 1, batch)
    records.sort(key=lambda r: (r["at"], r["position"]), reverse=True)
    return records[:limit], len(records) > limit
