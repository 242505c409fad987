"""The audit trail of administrative actions: each one an event in the log, like every change."""

from __future__ import annotations

from schemas.events import AdminActionRecorded
from services.ports import EventLog


def record_admin_action(event_log: EventLog, tenant: str, action: str, actor: str, details: dict | None = None) -> int:
    """Append an audited admin action (who, what; the log stamps when). Never pass secrets here."""
    logged = event_log.append([AdminActionRecorded(tenant=tenant, action=action, actor=actor, details=details or {})])
    return logged[-1].position
