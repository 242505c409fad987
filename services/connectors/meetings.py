"""Meeting connector: WebVTT, SRT, plain `Speaker: text` transcripts and QMSum-style JSON.

One meeting is one document, stored whole as `Speaker: text` lines (cue timestamps dropped).
Event time: the file's metadata (`NOTE date: ...`, `X-Meeting-Date: ...`, a `Date:` header line of
a transcript, a JSON `date`), else a YYYY-MM-DD in the file name, else the `date` argument, else
none. Author: the organiser from metadata, else the first speaker.

Cue files are read by maintained parsers (webvtt-py, srt) in strict mode. When they reject a file
(bad cue timings, a missing WEBVTT line, garbage between cues) a tolerant line reader takes over:
it keeps the text lines that follow any `-->` timing line, so the words survive a broken timestamp
and stray garbage outside cues is dropped. A file from which no cue text can be recovered becomes a
dead letter carrying the parser's complaint.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date as Date
from datetime import datetime
from pathlib import Path

import srt
import webvtt
from pydantic import ValidationError
from webvtt.errors import MalformedCaptionError, MalformedFileError

from schemas.documents import MAX_TAGS, DocumentIn
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink
from services.connectors.dates import to_utc
from services.connectors.files import Paths, run_files
from services.connectors.paths import PathGuard
from services.core.people import self_named
from services.core.scope import user_entries
from services.errors import MeetingError

log = logging.getLogger(__name__)

CONNECTOR = "meetings"
# The formats a run may be asked for, and their file names. A plain `Speaker: text` transcript is
# read only when asked for: any text file of `Name: value` lines (a config file, notes) reads as one.
FORMATS: dict[str, tuple[str, ...]] = {"vtt": (".vtt",), "srt": (".srt",), "json": (".json", ".jsonl"),
                                       "transcript": (".txt",)}
DEFAULT_FORMATS = ("vtt", "srt", "json")
SUFFIXES = tuple(s for suffixes in FORMATS.values() for s in suffixes)
UNKNOWN = "unknown"

Turn = tuple[str | None, str]


@dataclass
class Meeting:
    meeting_id: str
    turns: list[Turn]
    date: datetime | None = None
    organiser: str | None = None
    title: str | None = None
    attendees: list[str] = field(default_factory=list)

    @property
    def speakers(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.turns if s))


def parse_date(value: object, where: str) -> datetime | None:
    """An ISO date (midnight UTC) or datetime (naive = UTC) -> UTC, inside the API's window."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, Date):
        when = datetime(value.year, value.month, value.day)
    else:
        try:
            when = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise MeetingError(f"{where}: {str(value)[:60]!r} is not an ISO 8601 date") from None
    return to_utc(when, where, MeetingError)


_META_KEYS = {"date": "date", "organiser": "organiser", "organizer": "organiser",
              "title": "title", "subject": "title", "participants": "attendees", "attendees": "attendees"}


def _meta_line(line: str, into: dict[str, str]) -> bool:
    """Record a `Key: value` metadata line (X-Meeting-Date, organiser, ...); False if it is not one."""
    key, sep, value = line.partition(":")
    key = re.sub(r"^(x-)?(meeting[-_ ])?", "", key.strip().lower())
    if not sep or key not in _META_KEYS or not value.strip():
        return False
    into.setdefault(_META_KEYS[key], value.strip())
    return True


def _apply_meta(meeting: Meeting, meta: dict[str, str], where: str) -> Meeting:
    meeting.date = parse_date(meta.get("date"), where)
    meeting.organiser = meta.get("organiser")
    meeting.title = meta.get("title")
    meeting.attendees = [a.strip() for a in re.split(r"[,;]", meta.get("attendees", "")) if a.strip()]
    return meeting


_VOICE = re.compile(r"<v(?:\.[^\s>]*)?\s+([^>]+)>")
_TAG = re.compile(r"<[^>]*>")
_CUE_SPEAKER = re.compile(r"^(?:>>\s*)?([^\W\d][\w.'\- ]{0,40}?)\s*:\s+(\S.*)$")
_STAMP = r"(?:\[?\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?\]?\s*[-–]?\s*)?"  # a leading [00:01:02], dropped
_LINE_SPEAKER = re.compile(rf"^{_STAMP}([^\W\d][^:]{{0,99}}?)\s*:\s+(\S.*)$")


def _cue_turns(cues: Iterable[str]) -> list[Turn]:
    """Speakers from `<v Name>` spans or a leading `Name:`; a line without one continues the last
    speaker, as captioners name a speaker only when the turn changes. Consecutive cues of one
    speaker are joined into one turn."""
    turns: list[Turn] = []
    speaker: str | None = None
    for cue in cues:
        for line in cue.splitlines():
            voice = _VOICE.search(line)
            text = html.unescape(_TAG.sub("", line)).strip()
            if voice:
                speaker = voice.group(1).strip()
            else:
                named = _CUE_SPEAKER.match(text)
                if named and len(named.group(1).split()) <= 4:
                    speaker, text = named.group(1).strip(), named.group(2).strip()
            if not text:
                continue
            if turns and turns[-1][0] == speaker:
                turns[-1] = (speaker, f"{turns[-1][1]} {text}")
            else:
                turns.append((speaker, text))
    return turns


def _tolerant_cues(lines: list[str]) -> list[str]:
    """Cue payloads as the text lines after each `-->` line up to the next blank line."""
    cues, current, inside = [], [], False
    for line in lines:
        if "-->" in line:
            if current:
                cues.append("\n".join(current))
            current, inside = [], True
        elif not line.strip():
            if current:
                cues.append("\n".join(current))
            current, inside = [], False
        elif inside:
            current.append(line)
    return cues + (["\n".join(current)] if current else [])


def _vtt_meta(lines: list[str]) -> dict[str, str]:
    """Header lines after WEBVTT and NOTE blocks before the first cue (`NOTE date: 2025-03-04`)."""
    meta: dict[str, str] = {}
    block = "header"
    for line in lines[1:] if lines and lines[0].lstrip("\ufeff").startswith("WEBVTT") else lines:
        if "-->" in line:
            break
        if not line.strip():
            block = None
        elif line.startswith("NOTE"):
            block = "note"
            _meta_line(line[4:], meta)
        elif block:
            _meta_line(line, meta)
    return meta


def parse_vtt(text: str, meeting_id: str) -> Meeting:
    lines = text.splitlines()
    try:
        cues = [c.raw_text for c in webvtt.from_string(text, strict=True).captions]
        if not any(c.strip() for c in cues):
            raise MalformedFileError("found no cue")
    except (MalformedFileError, MalformedCaptionError) as exc:
        cues = _recover(lines, meeting_id, f"WebVTT parser: {exc}")
    return _apply_meta(Meeting(meeting_id, _cue_turns(cues)), _vtt_meta(lines), "NOTE/header date")


def parse_srt(text: str, meeting_id: str) -> Meeting:
    try:
        cues = [item.content for item in srt.parse(text)]
        if not any(c.strip() for c in cues):
            raise srt.SRTParseError(0, 0, "found no subtitle")
    except (srt.SRTParseError, ValueError) as exc:
        cues = _recover(text.splitlines(), meeting_id, f"SRT parser: {exc}")
    return Meeting(meeting_id, _cue_turns(cues))


def _recover(lines: list[str], meeting_id: str, complaint: str) -> list[str]:
    cues = _tolerant_cues(lines)
    if not any(c.strip() for c in cues):
        raise MeetingError(f"no cue text can be recovered ({complaint[:300]})")
    log.warning("meeting %s: %s; text recovered by the tolerant line reader", meeting_id, complaint[:300])
    return cues


def parse_transcript(text: str, meeting_id: str) -> Meeting:
    """`Speaker: text` lines, optionally after header lines (Date:, Organiser:, Title:, Participants:).
    A line without a speaker continues the previous turn; a file with no speaker line at all is not
    a transcript."""
    meta: dict[str, str] = {}
    turns: list[Turn] = []
    header = True
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (header and _meta_line(line, meta)):
            continue
        header = False
        named = _LINE_SPEAKER.match(line)
        if named and len(named.group(1).split()) <= 12 and "://" not in named.group(1):
            turns.append((named.group(1).strip(), named.group(2).strip()))
        elif turns:
            turns[-1] = (turns[-1][0], f"{turns[-1][1]} {line}")
        else:
            turns.append((None, line))
    if not any(s for s, _ in turns):
        raise MeetingError("no 'Speaker: text' line found: not a transcript")
    return _apply_meta(Meeting(meeting_id, turns), meta, "header Date")


def parse_meeting_json(value: object, meeting_id: str) -> Meeting:
    """QMSum (`meeting_transcripts`: [{speaker, content}]) or the same with `transcript`; optional
    `id`/`meeting_id`, `date`, `title`, `organiser`, `participants`. Other keys (QMSum's queries and
    summaries) are annotations, not the meeting, and are ignored."""
    if not isinstance(value, dict):
        raise MeetingError(f"not a meeting: expected a JSON object, got {type(value).__name__}")
    raw = value.get("meeting_transcripts", value.get("transcript"))
    if not isinstance(raw, list):
        raise MeetingError("meeting_transcripts: missing or not a list of {speaker, content}")
    turns: list[Turn] = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise MeetingError(f"meeting_transcripts[{i}]: expected an object with speaker and content")
        content = turn.get("content", turn.get("text"))
        if not isinstance(content, str):
            raise MeetingError(f"meeting_transcripts[{i}].content: missing or not text")
        # One line per turn, empty turns included, so line i stays turn i (QMSum's spans index turns).
        turns.append(((str(turn.get("speaker") or "").strip() or None), " ".join(content.split())))
    people = value.get("participants") or value.get("attendees") or []
    meta = {"date": value.get("date"), "title": value.get("title"),
            "organiser": value.get("organiser") or value.get("organizer"),
            "attendees": ", ".join(map(str, people)) if isinstance(people, list) else people}
    meeting = Meeting(str(value.get("meeting_id") or value.get("id") or meeting_id), turns)
    return _apply_meta(meeting, {k: str(v) for k, v in meta.items() if v}, "date")


def meeting_document(meeting: Meeting, *, acl_from_participants: bool = False) -> DocumentIn:
    if not any(text for _, text in meeting.turns):
        raise MeetingError("transcript: no text")
    # A speaker label is the name a participant gave the meeting tool: never an address on the row
    # (services.core.people.self_named). Organiser and attendees come from the metadata.
    turns = [(self_named(s) if s else s, t) for s, t in meeting.turns]
    speakers = list(dict.fromkeys(s for s, _ in turns if s))
    text = "\n".join(f"{s}: {t}" if s else t for s, t in turns)
    # The schema caps list fields; a crowd past the cap keeps its first names rather than failing.
    tags = [f"meeting:{meeting.meeting_id}", *(f"speaker:{s}" for s in speakers),
            *(f"participant:{a}" for a in meeting.attendees)][:MAX_TAGS]
    people = list(dict.fromkeys(p for p in [meeting.organiser, *meeting.attendees, *speakers] if p))[:MAX_TAGS]
    return DocumentIn(text=text, author=meeting.organiser or (speakers[0] if speakers else UNKNOWN),
                      date=meeting.date, kind="meeting", thread=meeting.meeting_id,
                      title=meeting.title or meeting.meeting_id, tags=tags, participants=people,
                      source="meeting", source_id=meeting.meeting_id,
                      acl=user_entries(people) if acl_from_participants else [])


_NAME_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def _decode(data: bytes) -> str:
    # Subtitle files in the wild are often Windows-1252; replacing undecodable bytes keeps the words.
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def check_formats(formats: Iterable[str] | None) -> tuple[str, ...]:
    """The formats asked for (default: vtt, srt, json), or MeetingError naming an unknown one."""
    chosen = tuple(dict.fromkeys(formats)) if formats is not None else DEFAULT_FORMATS
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise MeetingError(f"formats: {unknown or 'none'} not among {', '.join(FORMATS)}")
    return chosen


def parse_meeting_file(data: bytes, path: Path, *, date: datetime | None = None,
                       acl_from_participants: bool = False,
                       formats: Iterable[str] = tuple(FORMATS)) -> tuple[list[DocumentIn], list[DeadLetter], int]:
    """Documents, dead letters and meetings read. A JSON list or JSONL file holds several meetings:
    without an id field, meeting N of the file is `<stem>#N`. A file of a format not in `formats`
    is a dead letter, even when named."""
    stem, suffix = path.stem, path.suffix.lower()
    asked = tuple(formats)
    kind = next((name for name, suffixes in FORMATS.items() if suffix in suffixes), None)
    if kind is not None and kind not in asked:
        reason = f"a {kind} file ({suffix}), not among the formats asked for ({', '.join(asked)})"
        return [], [DeadLetter(CONNECTOR, str(path), reason)], 0
    try:
        named = _NAME_DATE.search(path.name)
        fallback = parse_date("-".join(named.groups()), "file name") if named else date
    except MeetingError:
        fallback = date
    items: list[tuple[str, object]] = []
    try:
        if suffix == ".jsonl":
            lines = [ln for ln in data.decode("utf-8-sig").splitlines() if ln.strip()]
            items = [(f"{stem}#{n}", ln) for n, ln in enumerate(lines, start=1)]
        elif suffix == ".json":
            value = json.loads(data.decode("utf-8-sig"))
            items = [(f"{stem}#{n}", v) for n, v in enumerate(value, start=1)] if isinstance(value, list) \
                else [(stem, value)]
        elif suffix in (".vtt", ".srt", ".txt"):
            items = [(stem, _decode(data))]
        else:
            raise MeetingError(f"unsupported file type {suffix!r} (expected {', '.join(SUFFIXES)})")
    except (UnicodeDecodeError, ValueError) as exc:
        reason = str(exc) if isinstance(exc, MeetingError) else f"not JSON: {exc}"
        return [], [DeadLetter(CONNECTOR, str(path), reason)], 0
    docs, letters = [], []
    for meeting_id, item in items:
        where = f"{path}#{meeting_id.rpartition('#')[2]}" if "#" in meeting_id else str(path)
        try:
            if suffix == ".vtt":
                meeting = parse_vtt(item, meeting_id)
            elif suffix == ".srt":
                meeting = parse_srt(item, meeting_id)
            elif suffix == ".txt":
                meeting = parse_transcript(item, meeting_id)
            else:
                try:
                    item = json.loads(item) if suffix == ".jsonl" else item
                except ValueError as exc:
                    raise MeetingError(f"not JSON: {exc}") from None
                meeting = parse_meeting_json(item, meeting_id)
            meeting.date = meeting.date or fallback
            docs.append(meeting_document(meeting, acl_from_participants=acl_from_participants))
        except (MeetingError, ValidationError) as exc:
            letters.append(DeadLetter(CONNECTOR, where, str(exc)))
        except Exception as exc:  # a parser bug costs this meeting only
            log.exception("meetings: cannot read %s", where)
            letters.append(DeadLetter(CONNECTOR, where, f"cannot parse: {type(exc).__name__}: {exc}"))
    return docs, letters, len(items)


def run_meetings(paths: Paths, sink: Sink, state: ConnectorState, *,
                 date: datetime | Date | str | None = None,
                 acl_from_participants: bool = False,
                 formats: Iterable[str] | None = None,
                 guard: PathGuard | None = None) -> ConnectorReport:
    """Meeting files, or folders searched recursively for the files of the formats asked for
    (default vtt, srt, json; "transcript" adds .txt). `date` dates the meetings whose file carries
    no date of its own."""
    when = parse_date(date, "date argument")
    asked = check_formats(formats)
    suffixes = tuple(s for name in asked for s in FORMATS[name])
    return run_files(CONNECTOR, paths, suffixes,
                     lambda data, path: parse_meeting_file(data, path, date=when, formats=asked,
                                                           acl_from_participants=acl_from_participants),
                     sink, state, {"date": when, "acl": acl_from_participants, "formats": asked}, guard,
                     hints={} if "transcript" in asked else {
                         ".txt": "plain 'Speaker: text' transcripts are read with --format transcript "
                                 "(API: \"formats\": [\"transcript\"])"})
