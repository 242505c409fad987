"""One error hierarchy for orgmem. Adapters translate driver errors into these at their boundary;
the API maps each class to one HTTP status in one place (`services/api/problems.py`)."""

from __future__ import annotations


class OrgmemError(Exception):
    """Base of our own errors: a request or an operation that cannot be served as asked."""


class Invalid(OrgmemError):
    """The input is wrong (a field, a file, a setting); the caller can fix it."""


class NotFound(OrgmemError):
    """The thing asked for does not exist, or the caller may not see it."""


class Conflict(OrgmemError):
    """The request contradicts the current state (a run still running, a fenced writer)."""


class NotReady(OrgmemError):
    """The projections have not reached a requested log position in time."""


class BackendUnavailable(OrgmemError):
    """A backing service (log, index, store, model endpoint) cannot be reached."""

    def __init__(self, component: str, detail: str):
        super().__init__(f"{component} unavailable: {detail}")
        self.component = component
