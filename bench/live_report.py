"""Pure helpers of the live benchmark (bench/live.py): percentiles, targets, the table, pacing,
Prometheus text, ingest lag, slow queries during graph builds, RSS and disk of a process and folder.
Nothing here starts a server or sends a request, so each piece is unit-tested on its own."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100): the smallest value with at least p % of the values at
    or under it; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(values_ms: Sequence[float]) -> dict:
    """n, p50, p95, p99 and max of latencies in ms (rounded to 0.1 ms); the figures None when empty."""
    rounded = lambda v: None if v is None else round(v, 1)  # noqa: E731
    return {"n": len(values_ms), **{f"p{p}_ms": rounded(percentile(values_ms, p)) for p in (50, 95, 99)},
            "max_ms": rounded(max(values_ms) if values_ms else None)}


def verdict(measured: float | None, limit: float, unit: str = "ms") -> str:
    """'met', 'MISSED by X <unit>', or 'n/a' when nothing was measured."""
    if measured is None:
        return "n/a"
    return "met" if measured <= limit else f"MISSED by {measured - limit:.1f} {unit}"


def target_line(name: str, measured: float | None, limit: float, unit: str = "ms") -> str:
    shown = "n/a" if measured is None else f"{measured:g} {unit}"
    return f"{name}: target <= {limit:g} {unit}, measured {shown}: {verdict(measured, limit, unit)}"


def fmt(value) -> str:
    """A table cell: n/a for None, thousands separators for ints, one decimal for floats."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A fixed-width text table, numbers right-aligned, with a rule under the header."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    line = lambda parts: "  ".join(p.rjust(w) for p, w in zip(parts, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


class Pacer:
    """Sends `batch` documents per call at `rate` documents per second on average. A sender that
    fell behind (a slow request) catches up by at most `max_backlog_s` of sending, not in one
    burst of everything it missed: the load stays near the rate the run claims."""

    def __init__(self, rate: float, batch: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, max_backlog_s: float = 1.0):
        if rate <= 0 or batch <= 0:
            raise ValueError(f"rate and batch must be positive, got rate={rate}, batch={batch}")
        self.interval = batch / rate
        self._clock, self._sleep, self._max_backlog = clock, sleep, max_backlog_s
        self._due: float | None = None

    def wait(self) -> None:
        """Return when the next batch is due (at once for the first)."""
        now = self._clock()
        if self._due is None:
            self._due = now
        elif self._due > now:
            self._sleep(self._due - now)
        elif now - self._due > self._max_backlog:
            self._due = now - self._max_backlog
        self._due += self.interval


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {'name{labels}': value}; comments and bad lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            out[series.strip()] = float(value)
        except ValueError:
            continue
    return out


def metric(parsed: dict[str, float], name: str) -> float | None:
    """The value of one metric: its unlabelled series, or the sum of its labelled ones; None if absent."""
    if name in parsed:
        return parsed[name]
    labelled = [v for k, v in parsed.items() if k.startswith(name + "{")]
    return sum(labelled) if labelled else None


@dataclass
class AckLog:
    """Acknowledged log positions with the time each was acknowledged, to tell how far (events
    and seconds) the projections' checkpoint is behind what clients were told is stored."""

    acks: list[tuple[int, float]] = field(default_factory=list)  # ascending positions

    def record(self, position: int, when: float) -> None:
        self.acks.append((position, when))

    def lag(self, applied: int, now: float) -> tuple[int, float]:
        """(events acknowledged but not applied, seconds since the oldest such acknowledgement)."""
        if not self.acks or self.acks[-1][0] <= applied:
            return 0, 0.0
        oldest = next(when for position, when in self.acks if position > applied)
        return self.acks[-1][0] - applied, round(now - oldest, 2)


def overlaps(start: float, end: float, windows: Iterable[tuple[float, float]]) -> bool:
    return any(start <= w_end and w_start <= end for w_start, w_end in windows)


def outside(queries: Iterable[tuple], spans: Sequence[tuple[float, float]]) -> list[tuple]:
    """The queries (start, end, ...) that overlap none of the spans (start, end)."""
    return [q for q in queries if not overlaps(q[0], q[1], spans)]


def build_windows(samples: Iterable[tuple[float, float | None]], slack_s: float) -> list[tuple[float, float]]:
    """Times a graph build may have been running: each sample (time, running gauge) that saw a build
    stands for `slack_s` either side of it (samples are that far apart)."""
    return [(t - slack_s, t + slack_s) for t, running in samples if running]


def slow_queries(queries: Iterable[tuple[float, float, float]], threshold_ms: float,
                 windows: Sequence[tuple[float, float]]) -> tuple[int, int]:
    """(queries over the threshold, of them those overlapping a build window); queries are
    (start, end, latency ms)."""
    slow = [(s, e) for s, e, ms in queries if ms > threshold_ms]
    return len(slow), sum(1 for s, e in slow if overlaps(s, e, windows))


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (VmRSS), None once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def children(pid: int) -> list[int]:
    """Direct children of a process (every thread's list in /proc)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        return out
    return out


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of a process and all its descendants (a graph build in a child process counts)."""
    own = rss_bytes(pid)
    if own is None:
        return None
    return own + sum(tree_rss_bytes(c) or 0 for c in children(pid))


def cpu_seconds(pid: int) -> tuple[float, float] | None:
    """(CPU seconds of the process itself, of its children that ended and were waited for), from
    /proc/PID/stat's utime + stime and cutime + cstime; None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of proc(5))
    return own, (int(fields[13]) + int(fields[14])) / ticks


def tree_cpu_seconds(pid: int) -> tuple[float, float] | None:
    """(CPU seconds of a process, of all its descendants: the living ones and those it waited for)."""
    own = cpu_seconds(pid)
    if own is None:
        return None
    below = own[1]
    for child in children(pid):
        tree = tree_cpu_seconds(child)
        if tree is not None:
            below += tree[0] + tree[1]
    return own[0], below


def cores(before: float | None, after: float | None, seconds: float) -> float | None:
    """CPU seconds spent between two readings, per second of wall time (1.0: one core busy)."""
    if before is None or after is None or seconds <= 0:
        return None
    return round((after - before) / seconds, 2)


def disk_bytes(folder: Path) -> int:
    """Bytes the files under a folder occupy on disk (allocated blocks: sparse files count as written)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # a file removed while walking (a segment merged away)
    return total


def mib(value: int | None) -> float | None:
    return None if value is None else round(value / 2**20, 1)
