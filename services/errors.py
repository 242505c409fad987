"""One error hierarchy for orgmem. Adapters translate driver errors into these at their boundary;
the API maps each class to one HTTP status in one place (`services/api/problems.py`). The named
cases below are caught by name where a caller treats them apart; each inherits its status."""

from __future__ import annotations


class OrgmemError(Exception):
    """Base of our own errors: a request or an operation that cannot be served as asked."""


class Invalid(OrgmemError):
    """The input is wrong (a field, a file, a setting); the caller can fix it."""


class NotFound(OrgmemError):
    """The thing asked for does not exist, or the caller may not see it."""


class Gone(OrgmemError):
    """The thing asked for existed and was erased (`POST /v1/admin/erasures`); it never comes back."""


class Conflict(OrgmemError):
    """The request contradicts the current state (a run still running, a fenced writer)."""


class NotReady(OrgmemError):
    """The projections have not reached a requested log position in time."""


class BackendUnavailable(OrgmemError):
    """A backing service (log, index, store, model endpoint) cannot be reached."""

    def __init__(self, component: str, detail: str):
        super().__init__(f"{component} unavailable: {detail}")
        self.component = component


class StorageFull(BackendUnavailable):
    """The data folder's file system has less free space than the floor (`limits.min_free_bytes`):
    writes are refused before they are made, so that a full disk never reaches the indexes."""

    def __init__(self, folder, free_bytes: int, floor_bytes: int):
        super().__init__("storage", f"data folder {folder} has {free_bytes} bytes free, under the floor of "
                                    f"{floor_bytes} bytes (limits.min_free_bytes); free space to resume writes")
        self.folder, self.free_bytes, self.floor_bytes = str(folder), free_bytes, floor_bytes


# --- named cases of Invalid (its HTTP status applies) ---


class KeyRequestError(Invalid):
    """A key request that cannot be honoured (bad name, unknown key, wrong tenant)."""


class TicketError(Invalid, ValueError):
    """One item cannot be read; the message names the field and the problem."""


class MeetingError(Invalid, ValueError):
    """A meeting cannot be read; the message names the field and the problem."""


class EmailParseError(Invalid):
    """A message that cannot become a document; the message names the field and the problem."""


class TooLarge(Invalid):
    """A request or batch over a size limit (the message names the limit): smaller pieces would go in."""


class InvalidVectors(Invalid):
    """Some vectors of a batch were unusable; the other rows of the batch were written."""

    def __init__(self, problems: dict[str, str]):
        listed = "; ".join(f"row {row_id!r}: {why}" for row_id, why in problems.items())
        super().__init__(f"vectors: {len(problems)} row(s) not indexed: {listed}")
        self.problems = problems


# --- named cases of NotFound (its HTTP status applies) ---


class RunNotFound(NotFound):
    """No maintenance run of that id (in the caller's tenant)."""


# --- named cases of Conflict (its HTTP status applies) ---


class RunConflict(Conflict):
    """The run cannot be reverted (still running, already reverted, or later runs built on it)."""


class IncompatibleAccess(Conflict):
    """No reader may see every source row, so no merged row can be written without widening access."""


class ProjectionFenced(Conflict):
    """The checkpoint moved under this writer: another indexer took over, or a rebuild switched the
    projections to a new generation. The caller re-reads `applied_position()` and continues from there."""


# --- named cases of OrgmemError (its HTTP status applies) ---


class LogRewound(OrgmemError):
    """The log hands out positions at or below the projections' checkpoint (a broker lost data):
    applying on would skip those events silently, so the indexer stops and says so."""


class MaintenanceFailed(OrgmemError):
    """A run stopped on an error; it is recorded as failed and what it appended stays revertible."""


class JudgeFailed(OrgmemError):
    """A judge call failed or answered something unusable. The policies then change nothing."""


class AnswerFailed(OrgmemError):
    """The answer endpoint failed, timed out (`timed_out`) or replied something unusable. The message
    names the cause and never quotes the reply or the evidence."""

    def __init__(self, detail: str, timed_out: bool = False):
        super().__init__(detail)
        self.timed_out = timed_out


class AnswerNotConfigured(OrgmemError):
    """No answer endpoint is configured (answer_base_url, answer_model)."""


class ImapError(OrgmemError):
    """The IMAP server refused something (login, a mailbox); the text never holds the password."""
