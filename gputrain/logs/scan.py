"""Scan a (possibly huge, possibly growing) log file in bounded memory, resuming where the last scan ended.

Speed comes from never looking at most lines in Python: each 8 MiB chunk is searched with ``bytes.find``
(C speed) for two needles (``loss``, ``rror``), only the lines that contain one are decoded
and parsed, and of the progress bars only the last one per chunk is read. The final
:data:`TAIL_BYTES` of the file are always parsed line by line, for the failure messages and traceback
that carry no needle (``Killed``, watchdog timeouts, ``KeyboardInterrupt``). Metric lines without
``loss`` in other tools' logs are missed in the body (our trainings' metrics come from metrics.jsonl).

The state (offset, inode, partial last line, metric statistics) is JSON, so ``--summary`` after the log
grew reads only the new bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gputrain.errors import LogError
from gputrain.logs.classify import EVENT_NEEDLES
from gputrain.logs.parse import _EXC_LINE_RE, LogParser, LogRecord, parse_line, split_rank
from gputrain.logs.stats import MetricTable

CHUNK_BYTES = 8 << 20
TAIL_BYTES = 64 << 10
MAX_CARRY = 64 << 10  # a partial line longer than this is cut (the rest of that line is skipped)
METRIC_NEEDLES = (b"loss",)
_TB_START = b"Traceback (most recent call last):"


class LogScanner:
    """Running summary of one log file; ``rank`` None means rank 0 or unprefixed lines."""

    def __init__(self, path: str | os.PathLike[str], rank: int | None = None) -> None:
        self.path = Path(path)
        self.rank = rank
        self.reset()

    def reset(self) -> None:
        self.offset = 0
        self.inode = 0
        self.carry = b""
        self.skipping = False  # inside an overlong line, dropping bytes up to its end
        self.table = MetricTable()
        self.implicit_step = 0
        self.progress: dict[str, float] = {}
        self.events: dict[str, str] = {}
        self.traceback: str | None = None
        self.ranks: set[int] = set()
        self.formats: dict[str, int] = {}

    # -- persistence -------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "rank": self.rank,
            "offset": self.offset,
            "inode": self.inode,
            "carry": self.carry.decode("latin-1"),
            "skipping": self.skipping,
            "table": self.table.to_json(),
            "implicit_step": self.implicit_step,
            "progress": self.progress,
            "events": self.events,
            "traceback": self.traceback,
            "ranks": sorted(self.ranks),
            "formats": self.formats,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogScanner:
        scanner = cls(data["path"], rank=data.get("rank"))
        scanner.offset, scanner.inode = int(data["offset"]), int(data["inode"])
        scanner.carry = str(data["carry"]).encode("latin-1")
        scanner.skipping = bool(data["skipping"])
        scanner.table = MetricTable.from_json(data["table"])
        scanner.implicit_step = int(data["implicit_step"])
        scanner.progress = dict(data["progress"])
        scanner.events = dict(data["events"])
        scanner.traceback = data["traceback"]
        scanner.ranks = set(data["ranks"])
        scanner.formats = dict(data["formats"])
        return scanner

    # -- scanning ----------------------------------------------------------------------------------------
    def scan(self) -> int:
        """Read the bytes added since the last scan; returns how many were read."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            raise LogError(f"{self.path}: no such log file") from None
        except OSError as exc:
            raise LogError(f"{self.path}: cannot read log ({exc.strerror})") from None
        read = 0
        # One buffer for the whole scan: allocating a fresh 8 MiB object per chunk costs page faults
        # that, on a busy machine, take as long as the search itself.
        buf = bytearray(CHUNK_BYTES + MAX_CARRY)
        with fh, memoryview(buf) as view:
            st = os.fstat(fh.fileno())
            if st.st_ino != self.inode or st.st_size < self.offset:  # rotated or truncated: start over
                self.reset()
                self.inode = st.st_ino
            fh.seek(self.offset)
            while True:
                keep = len(self.carry)
                buf[:keep] = self.carry
                n = fh.readinto(view[keep : keep + CHUNK_BYTES])
                if not n:
                    break
                read += n
                self.offset += n
                self._feed(buf, keep + n)
        return read

    def _feed(self, buf: bytearray, end: int) -> None:
        """``buf[:end]`` is the carried partial line followed by new bytes."""
        start = 0
        if self.skipping:  # the rest of an overlong line: drop up to its end
            newline, cr = buf.find(b"\n", 0, end), buf.find(b"\r", 0, end)
            cut = min(x for x in (newline, cr, end) if x != -1)
            if cut == end:
                return
            self.skipping = False
            start = cut + 1
        cut = max(buf.rfind(b"\n", start, end), buf.rfind(b"\r", start, end))
        if cut == -1:
            if end - start > MAX_CARRY:
                head = bytes(buf[start : start + MAX_CARRY]) + b"\n"
                self.carry, self.skipping = b"", True
                self._scan_lines(head, 0, len(head))
            else:
                self.carry = bytes(buf[start:end])
            return
        if end - cut - 1 > MAX_CARRY:
            self.carry, self.skipping = b"", True
        else:
            self.carry = bytes(buf[cut + 1 : end])
        self._scan_lines(buf, start, cut + 1)

    def _scan_lines(self, buf: bytes | bytearray, lo: int, hi: int) -> None:
        found: dict[int, int] = {}
        for needle in METRIC_NEEDLES + EVENT_NEEDLES:
            find = buf.find
            pos = find(needle, lo, hi)
            while pos != -1:
                pos = find(needle, _line_at(buf, pos, found, lo, hi), hi)
        bar = buf.rfind(b"%|", lo, hi)
        if bar != -1:
            _line_at(buf, bar, found, lo, hi)
        for start in sorted(found):
            end = found[start]
            line = buf[start : min(end, start + MAX_CARRY)].decode("utf-8", "replace")
            record = parse_line(line)
            if record.event and record.kind == "text" and _EXC_LINE_RE.match(split_rank(line)[1].strip()):
                self._take_traceback(buf, lo, start, end)
            self.add_record(record)

    def _take_traceback(self, buf: bytes | bytearray, lo: int, start: int, end: int) -> None:
        head = buf.rfind(_TB_START, max(lo, start - MAX_CARRY), start)
        if head != -1:
            head = buf.rfind(b"\n", lo, head) + 1 or lo
            lines = buf[head:end].decode("utf-8", "replace").splitlines()
            self.traceback = prefer_traceback(self.traceback, "\n".join(split_rank(x)[1] for x in lines[-120:]))

    def add_record(self, record: LogRecord) -> None:
        """Fold one parsed record into the running state (also used by ``follow``)."""
        if record.rank is not None:
            self.ranks.add(record.rank)
        if record.event:
            self.events[record.event] = record.text.splitlines()[-1][:500] if record.text else ""
        if record.kind == "traceback":
            self.traceback = prefer_traceback(self.traceback, record.text)
        if record.kind not in ("metrics", "progress"):
            return
        if record.rank not in ((None, 0) if self.rank is None else (self.rank,)):
            return
        self.formats[record.fmt] = self.formats.get(record.fmt, 0) + 1
        if record.kind == "progress" or "steps_per_s" in record.values:
            if record.step is not None:
                self.progress["step"] = record.step
            if record.total:
                self.progress["total"] = record.total
            if "steps_per_s" in record.values:
                self.progress["steps_per_s"] = record.values["steps_per_s"]
        if record.kind == "metrics" and record.values:
            if record.total:
                self.progress["total"] = record.total
            step = record.step
            if step is None:
                self.implicit_step += 1
                step = self.implicit_step
            self.table.add(step, record.values, record.time)

    def tail(self) -> tuple[dict[str, str], str | None]:
        """Failure events and the last traceback in the last :data:`TAIL_BYTES`, parsed line by line."""
        events: dict[str, str] = {}
        traceback: str | None = None
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - TAIL_BYTES))
                data = fh.read(TAIL_BYTES)
        except OSError:
            return events, traceback
        if size > TAIL_BYTES:
            data = data[data.find(b"\n") + 1 :]
        parser = LogParser(events_only=True)
        for line in data.decode("utf-8", "replace").splitlines():
            for record in parser.feed(line):
                if record.event:
                    events[record.event] = record.text.splitlines()[-1][:500]
                if record.kind == "traceback":
                    traceback = prefer_traceback(traceback, record.text)
        for record in parser.flush():
            traceback = prefer_traceback(traceback, record.text)
        return events, traceback


_LAUNCHER_ERRORS = ("ChildFailedError", "torch.distributed.elastic")


def prefer_traceback(current: str | None, new: str | None) -> str | None:
    """The traceback that explains a failure: the latest one, unless it is only the launcher's echo.

    When a worker dies, torchrun raises its own ``ChildFailedError`` traceback after the worker's; the
    worker's exception is the cause a person needs to see.
    """
    if not new:
        return current
    if current and any(m in new for m in _LAUNCHER_ERRORS) and not any(m in current for m in _LAUNCHER_ERRORS):
        return current
    return new


def _line_at(buf: bytes | bytearray, pos: int, found: dict[int, int], lo: int, hi: int) -> int:
    """Record the line (``\\n`` or ``\\r`` delimited) around ``pos``; returns its end."""
    start = buf.rfind(b"\n", lo, pos) + 1 or lo
    r = buf.rfind(b"\r", start, pos)
    if r != -1:
        start = r + 1
    end = buf.find(b"\n", pos, hi)
    if end == -1:
        end = hi
    r = buf.find(b"\r", pos, end)
    if r != -1:
        end = r
    found[start] = end
    return end
