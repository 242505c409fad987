"""The dates connectors read, held to the API's window (years 1000 to 9000, `schemas.documents`).

A date outside the window, or one that cannot be shifted to UTC (`9999-12-31T23:00:00-05:00`
overflows), is refused with the connector's own error naming the field, so that the item becomes a
dead letter and the rest of the run goes on. RFC 2822 dates are checked for the year as written:
the standard library reads the two-digit years of old mail as 19xx/20xx, and so also turns a
written `0001` into 2001.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from schemas.documents import DATE_MAX, DATE_MIN

WINDOW = f"years {DATE_MIN.year} to {DATE_MAX.year}"

# Digit runs of 3 or more that are neither part of a time (08:22:00) nor a zone (+0000, -0500).
_YEAR_TOKEN = re.compile(r"(?<![\d:+\-])\d{3,}(?![\d:])")
_COMMENT = re.compile(r"\([^()]*\)")


def outside(where: str, value: object) -> str:
    return f"{where}: {str(value)[:60]!r} is outside the accepted dates ({WINDOW})"


def to_utc(when: datetime, where: str, error: type[Exception]) -> datetime:
    """`when` in UTC (naive = UTC), or `error` when it is outside the window or overflows."""
    try:
        utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:
        raise error(outside(where, when.isoformat())) from None
    if not DATE_MIN <= utc <= DATE_MAX:
        raise error(outside(where, when.isoformat()))
    return utc


def parse_rfc2822(text: str, where: str, error: type[Exception]) -> datetime:
    """An RFC 2822 date in UTC. Raises `error` for a year outside the window (as written or as
    read); ValueError, TypeError or IndexError when the text is not a date at all."""
    for token in _YEAR_TOKEN.findall(_COMMENT.sub(" ", text)):
        if not DATE_MIN.year <= int(token) <= DATE_MAX.year:
            raise error(f"{where}: year {token} in {text[:60]!r} is outside the accepted dates ({WINDOW})")
    return to_utc(parsedate_to_datetime(text), where, error)
