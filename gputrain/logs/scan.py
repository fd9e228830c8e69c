"""Scan a (possibly huge, possibly growing) log file in bounded memory, resuming where the last scan ended.

Speed comes from looking at few lines in Python. Each 8 MiB chunk is searched at C speed for needles:
``{`` and ``|`` (single bytes: ``memchr``, ~20x faster than a multi-byte search) find HF/JSON dicts,
progress bars and ``step N | loss`` lines, ``Traceback (most recent call last)`` finds exceptions, and the
multi-byte needles of the other formats (``loss``, ``step:``, ``skipped=``, ``throughput``, ``time (ms)``)
are switched on only once a *probe* (every chunk's last 256 KiB, searched with all needles) has seen one:
a log of NCCL chatter with a metric line now and then pays for three cheap searches, not ten. The final
:data:`TAIL_BYTES` are always parsed line by line, for failures that carry no needle (``Killed``, watchdog
timeouts, ``slurmstepd`` messages).

A file up to :data:`EXACT_FILE_BYTES` is read exactly: every metric line is parsed. In a larger file, a
*dense* chunk (a quarter of the lines of its first 64 KiB carry a needle) is sampled instead: the lines at
:data:`SAMPLE_LINES` evenly spaced offsets plus its last :data:`LAST_LINES` lines, so the last values stay
exact while min/max/best come from the sample (parsing 1.6 million metric lines in Python would take
minutes). A chunk that is not dense but still has more metric lines than that sample (a sparse log's
8 MiB holds ~140 HF dicts) has the same sample of its metric lines parsed. ``table.skipped`` counts the
bytes left unread; the summary says so.

The state (offset, inode, partial last line, metric statistics) is JSON, so ``--summary`` after the log
grew reads only the new bytes.
"""

from __future__ import annotations

import mmap
import os
from functools import partial
from pathlib import Path
from typing import Any

from gputrain.errors import LogError
from gputrain.logs.parse import LogParser, parse_line
from gputrain.logs.record import LogRecord
from gputrain.logs.stats import MetricTable
from gputrain.logs.tables import TableRows

CHUNK_BYTES = 8 << 20
TAIL_BYTES = 64 << 10
PROBE_BYTES = 256 << 10
MAX_CARRY = 64 << 10  # a partial line longer than this is cut (the rest of that line is skipped)
EXACT_FILE_BYTES = 16 << 20
SAMPLE_LINES = 48
LAST_LINES = 16
DENSITY_WINDOW = 64 << 10
MAP_MIN_BYTES = 4 << 20  # this many new bytes or more are searched in place (mmap), not copied
ALWAYS_NEEDLES = (b"{", b"|", b"Traceback (most recent call last)")
#: Needles switched on when a probe sees them (metric formats without ``{`` or ``|``).
PROBED_NEEDLES = (b"loss", b"Loss", b"step:", b"skipped=", b"throughput", b"time (ms)", b"reward", b"Epoch ", b"Step ")
_TB_START = b"Traceback (most recent call last):"
#: Switched on by a column header whose next line is a row (:mod:`gputrain.logs.tables`): the rows' bar ending.
ROW_NEEDLE = "it]"
Buffer = bytes | bytearray | mmap.mmap

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
        self.hf_table = MetricTable()  # HF Trainer dicts, x = epoch until the summary knows steps per epoch
        self.implicit_step = 0
        self.last_step: int | None = None
        self.epoch_x = False  # HF Trainer dicts carry an epoch, not a step: their x is the epoch until the end
        self.last_epoch = 0.0
        self.progress: dict[str, float] = {}
        self.events: dict[str, str] = {}
        self.tracebacks: list[dict[str, Any]] = []
        self.ranks: set[int] = set()
        self.formats: dict[str, int] = {}
        self.needles: list[str] = []
        self.dense_chunks = 0
        self.exact = True
        self.tables = TableRows()  # not saved: a resumed scan learns the current table group again

    # -- persistence -------------------------------------------------------------------------------------
    _FIELDS = ("rank", "offset", "inode", "skipping", "implicit_step", "last_step", "epoch_x", "last_epoch", "progress",
               "events", "tracebacks", "formats", "needles", "dense_chunks")

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self._FIELDS}
        data.update(path=str(self.path), carry=self.carry.decode("latin-1"), table=self.table.to_json(),
                    hf_table=self.hf_table.to_json(), ranks=sorted(self.ranks))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogScanner:
        scanner = cls(data["path"], rank=data.get("rank"))
        for name in cls._FIELDS:
            setattr(scanner, name, data[name])
        scanner.carry = str(data["carry"]).encode("latin-1")
        scanner.table = MetricTable.from_json(data["table"])
        scanner.hf_table = MetricTable.from_json(data["hf_table"])
        scanner.ranks = set(data["ranks"])
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
        with fh:
            st = os.fstat(fh.fileno())
            if st.st_ino != self.inode or st.st_size < self.offset:  # rotated or truncated: start over
                self.reset()
                self.inode = st.st_ino
            self.exact = st.st_size <= EXACT_FILE_BYTES
            if st.st_size - self.offset >= MAP_MIN_BYTES:
                mapped = self._scan_mapped(fh.fileno(), st.st_size)
                if mapped is not None:
                    return mapped
            return self._scan_read(fh)

    def _scan_mapped(self, fd: int, size: int) -> int | None:
        """Search the new bytes where the page cache holds them: copying 256 MiB into a buffer cost twice
        the search itself. One chunk is mapped at a time (the mapped pages count in the resident size).
        None when the file cannot be mapped (a pipe, a FUSE file...). A file cut shorter *while* a chunk of
        it is being searched would raise SIGBUS, a risk taken for large stretches only (a growing log's
        appended bytes are read, not mapped)."""
        pos = self.offset - len(self.carry)
        first = True
        while True:
            hi = min(size, pos + CHUNK_BYTES)
            base = pos - pos % mmap.ALLOCATIONGRANULARITY
            try:
                view = mmap.mmap(fd, hi - base, access=mmap.ACCESS_READ, offset=base)
            except (OSError, ValueError) as exc:
                if first:
                    return None
                raise LogError(f"{self.path}: cannot read log ({exc})") from None
            with view:
                if first and view[pos - base : self.offset - base] != self.carry:
                    return None  # rewritten in place: the carried line is not there
                first = False
                self._feed(view, hi - base, pos - base)
            if hi == size:  # what is left is the carried partial line: the next scan completes it
                break
            pos = hi - len(self.carry)
        read = size - self.offset
        self.offset = size
        return read

    def _scan_read(self, fh: Any) -> int:
        read = 0
        # One buffer for the whole scan: allocating a fresh 8 MiB object per chunk costs page faults
        # that, on a busy machine, take as long as the search itself.
        buf = bytearray(CHUNK_BYTES + MAX_CARRY)
        with memoryview(buf) as view:
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

    def _feed(self, buf: Buffer, end: int, start: int = 0) -> None:
        """``buf[start:end]`` is the carried partial line followed by new bytes."""
        if self.skipping:  # the rest of an overlong line: drop up to its end
            newline, cr = buf.find(b"\n", start, end), buf.find(b"\r", start, end)
            cut = min(x for x in (newline, cr, end) if x != -1)
            if cut == end:
                return
            self.skipping = False
            start = cut + 1
        newline = buf.rfind(b"\n", start, end)  # a \r counts only after it: not a second pass over 8 MiB
        cut = max(newline, buf.rfind(b"\r", max(start, newline), end))
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

    def _scan_lines(self, buf: Buffer, lo: int, hi: int) -> None:
        self._probe(buf, max(lo, hi - PROBE_BYTES), hi)
        pos = buf.find(_TB_START, lo, hi)
        while pos != -1:
            self._take_traceback(buf, buf.rfind(b"\n", lo, pos) + 1 or lo, hi)
            pos = buf.find(_TB_START, pos + len(_TB_START), hi)
        needles = (*ALWAYS_NEEDLES[:2], *(n.encode("latin-1") for n in self.needles))
        if not self.exact and hi - lo > 4 * DENSITY_WINDOW and self._dense(buf, lo, lo + DENSITY_WINDOW, needles):
            self._scan_sampled(buf, lo, hi)
            return
        found: dict[int, int] = {}
        for needle in needles:
            find = buf.find
            pos = find(needle, lo, hi)
            while pos != -1:
                pos = find(needle, _line_at(buf, pos, found, lo, hi), hi)
        starts = sorted(found)
        if not self.exact and len(starts) > SAMPLE_LINES + LAST_LINES:
            starts = self._thin(starts, found)
        for start in starts:
            end = found[start]
            at = buf.find(b"Traceback (most", start, end)
            self._take_line(bytes(buf[start : min(end, start + MAX_CARRY)]), at - start if at != -1 else -1,
                            (buf, lo, start))

    def _thin(self, starts: list[int], found: dict[int, int]) -> list[int]:
        """A large file's chunk with more metric lines than a dense chunk's sample: the same sample of them
        (evenly spaced, plus the last :data:`LAST_LINES`). Parsing is ~25 us of Python per line, the only
        cost of a sparse log that grows with its metric lines; the lines left out count as skipped."""
        every = len(starts) / SAMPLE_LINES
        keep = {starts[int(i * every)] for i in range(SAMPLE_LINES)} | set(starts[-LAST_LINES:])
        self.table.skipped += sum(found[start] - start for start in starts if start not in keep)
        return sorted(keep)

    @staticmethod
    def _dense(buf: Buffer, lo: int, hi: int, needles: tuple[bytes, ...]) -> bool:
        """Do at least a quarter of the lines in ``buf[lo:hi]`` carry a needle?"""
        found: dict[int, int] = {}
        for needle in needles:
            pos = buf.find(needle, lo, hi)
            while pos != -1:
                pos = buf.find(needle, _line_at(buf, pos, found, lo, hi), hi)
        return len(found) * 4 > buf[lo:hi].count(b"\n") > 16

    def _scan_sampled(self, buf: Buffer, lo: int, hi: int) -> None:
        """A dense chunk of a large file: lines at evenly spaced offsets, and the chunk's last lines."""
        self.dense_chunks += 1
        starts: set[int] = set()
        step = max(1, (hi - lo) // SAMPLE_LINES)
        for offset in range(lo, hi, step):
            starts.add(buf.rfind(b"\n", lo, offset) + 1 or lo)
        end = hi - 1
        for _ in range(LAST_LINES):
            start = buf.rfind(b"\n", lo, end) + 1 or lo
            starts.add(start)
            if start <= lo:
                break
            end = start - 1
        read = 0
        for start in sorted(starts):
            stop = buf.find(b"\n", start, hi)
            stop = hi if stop == -1 else stop
            read += stop - start
            line = bytes(buf[start : min(stop, start + MAX_CARRY)])
            if line:
                self._take_line(line, line.find(b"Traceback (most"))
        self.table.skipped += (hi - lo) - read

    def _probe(self, buf: Buffer, lo: int, hi: int) -> None:
        """Switch on a format's needle once a metric line of that format shows up."""
        for needle in PROBED_NEEDLES:
            name = needle.decode("latin-1")
            if name in self.needles:
                continue
            pos = buf.find(needle, lo, hi)
            while pos != -1:
                found: dict[int, int] = {}
                end = _line_at(buf, pos, found, lo, hi)
                start = next(iter(found))
                line = bytes(buf[start:end])
                covered = b"{" in line or b"|" in line  # the always-on needles find this line already
                if not covered and parse_line(line.decode("utf-8", "replace")).kind == "metrics":
                    self.needles.append(name)
                    break
                if name == "Epoch " and ROW_NEEDLE not in self.needles and end < hi:
                    # a column header ("Epoch GPU_mem box obj ..."): its rows end in a bar's "s/it]" or "it/s]"
                    below = bytes(buf[end + 1 : (buf.find(b"\n", end + 1, hi) + 1 or hi)]).decode("utf-8", "replace")
                    if TableRows().read(below, partial(str, line.decode("utf-8", "replace"))):
                        self.needles.append(ROW_NEEDLE)
                pos = buf.find(needle, end, hi)

    def _take_line(self, raw: bytes, traceback_at: int = -1, where: tuple[Buffer, int, int] | None = None) -> None:
        """One metric line. A traceback's first line is the traceback's (assembled apart), except what stands
        before it: a progress bar that a rank's ``[rank3]: Traceback`` was printed onto is still a bar. A line
        no format reads may be a table's row (:mod:`gputrain.logs.tables`); ``where`` (buffer, its start, the
        line's start) finds the line above it, for a column header."""
        if traceback_at != -1:
            raw = raw[:traceback_at]
        if not raw.strip():
            return
        text = raw.decode("utf-8", "replace")
        record = parse_line(text)
        if record.kind not in ("metrics", "progress"):
            above = (lambda: _line_above(*where)) if where is not None else None
            record = self.tables.read(text, above) or record
        self.add_record(record)

    def provisional(self) -> LogScanner:
        """This scanner with the unfinished last line read as if it were complete, for a summary only: a live
        log's newest progress bar has no newline yet (tqdm redraws it after ``\\r``), and a summary must show
        it. A value at the very end may still be being written ("loss 0.0" of "loss 0.0100"): it is left out. The
        saved state keeps the line as a partial one, so the next scan completes it, never twice."""
        text = self.carry.decode("utf-8", "replace").rstrip()
        if text[-1:].isalnum() or text.endswith("."):  # its last value may still be being written: "loss 0.0"
            text = text[: max(0, *(text.rfind(c) for c in " ,=:|"))]
        if self.skipping or not text.strip():
            return self
        record = parse_line(text)
        if record.kind not in ("metrics", "progress"):
            return self
        view = LogScanner.from_json(self.to_json())
        view.add_record(record)
        return view

    def _take_traceback(self, buf: Buffer, start: int, hi: int) -> None:
        """Assemble the traceback that starts at ``start`` (other ranks' lines may interleave)."""
        parser = LogParser(events_only=True)
        end = min(hi, start + 4 * MAX_CARRY)
        for raw in bytes(buf[start:end]).split(b"\n")[: 4 * 120]:
            for record in parser.feed(raw.decode("utf-8", "replace")):
                if record.kind == "traceback":
                    self.add_record(record)
                    return

    def add_record(self, record: LogRecord) -> None:
        """Fold one parsed record into the running state (also used by ``follow``)."""
        if record.rank is not None:
            self.ranks.add(record.rank)
        if record.event:
            self.events.setdefault(record.event, (record.text.splitlines() or [""])[-1][:500])
        if record.kind == "traceback":
            self._keep_traceback(record)
        if record.kind not in ("metrics", "progress"):
            return
        if record.rank not in ((None, 0) if self.rank is None else (self.rank,)):
            return
        self.formats[record.fmt] = self.formats.get(record.fmt, 0) + 1
        if record.kind == "progress" or "steps_per_s" in record.values:
            if record.step is not None and record.fmt == "tqdm":
                self.progress["step"] = record.step
            if record.total:
                self.progress["total"] = record.total
            if "steps_per_s" in record.values:
                self.progress["steps_per_s"] = record.values["steps_per_s"]
        if record.kind == "metrics" and record.values:
            if record.total:
                self.progress["total"] = record.total
            step = self._step_of(record)
            target = self.hf_table if record.fmt == "hf" and record.step is None and self.epoch_x else self.table
            target.add(step, record.values, record.time)

    def _step_of(self, record: LogRecord) -> float:
        """The record's step. HF Trainer dicts have none: their x is the epoch, turned into steps by
        :meth:`steps_per_epoch` when the summary is built (progress bars are often drawn late, so no bar
        seen next to a dict gives its step reliably; the last bar and the last epoch do)."""
        step: float | None = record.step
        epoch = record.values.get("epoch")
        if step is None and record.fmt == "hf" and epoch is not None:
            self.epoch_x = True
            self.last_epoch = max(self.last_epoch, epoch)
            return epoch
        if step is None:
            if self.last_step is not None and record.fmt != "hf":
                step = self.last_step  # a line without a step belongs to the step last logged
            else:
                self.implicit_step += 1
                step = self.implicit_step
        self.last_step = int(step)
        return step

    def steps_per_epoch(self) -> float | None:
        """For a log of HF dicts: training steps per epoch, from the last bar and the last epoch logged."""
        if not self.epoch_x or not self.last_epoch or not self.progress.get("step"):
            return None
        return float(self.progress["step"]) / self.last_epoch

    def metric_table(self) -> MetricTable:
        """All metrics on a step axis: HF dicts' epochs turned into steps (kept as epochs without a bar)."""
        if not self.hf_table.records:
            return self.table
        hf = self.hf_table.in_steps(self.steps_per_epoch())
        if not self.steps_per_epoch():
            hf.max_step = -1  # epochs, not steps: no step count to report
        if not self.table.records:
            hf.skipped += self.table.skipped  # sampled chunks count their bytes there, whatever the format
            return hf
        merged = MetricTable.from_json(self.table.to_json())
        for key, stats in hf.metrics.items():
            if key not in merged.metrics or merged.metrics[key].count < stats.count:
                merged.metrics[key] = stats
        merged.records += hf.records
        merged.skipped += hf.skipped
        return merged

    def _keep_traceback(self, record: LogRecord) -> None:
        """The first four tracebacks (the root cause is usually first) and the latest one."""
        entry = {"rank": record.rank, "text": record.text[-20000:]}
        if len(self.tracebacks) < 4 or len(self.tracebacks) == 4:
            self.tracebacks.append(entry)
        else:
            self.tracebacks[4] = entry

    def tail_text(self) -> str:
        """The last :data:`TAIL_BYTES` of the file as text (failure messages live there)."""
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - TAIL_BYTES))
                data = fh.read(TAIL_BYTES)
        except OSError:
            return ""
        if size > TAIL_BYTES:
            data = data[data.find(b"\n") + 1 :]
        return data.decode("utf-8", "replace")

    def tail(self) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """Failure events and the tracebacks in the last :data:`TAIL_BYTES`, parsed line by line."""
        events: dict[str, str] = {}
        tracebacks: list[dict[str, Any]] = []
        parser = LogParser(events_only=True)
        records = []
        for line in self.tail_text().splitlines():
            records += parser.feed(line)
        for record in records + parser.flush():
            if record.event:
                events[record.event] = record.text.splitlines()[-1][:500]
            if record.kind == "traceback":
                tracebacks.append({"rank": record.rank, "text": record.text[-20000:]})
        return events, tracebacks


def _line_above(buf: Buffer, lo: int, start: int) -> str:
    """The nearest non-blank line before the line at ``start`` (within ``buf[lo:]``), as text."""
    end = start - 1
    for _ in range(3):
        if end <= lo:
            return ""
        begin = buf.rfind(b"\n", lo, end) + 1 or lo
        line = bytes(buf[begin:end])
        if line.strip():
            return line.decode("utf-8", "replace")
        end = begin - 1
    return ""


def _line_at(buf: Buffer, pos: int, found: dict[int, int], lo: int, hi: int) -> int:
    """Record the line (``\\n`` or ``\\r`` delimited) around ``pos``; returns its end."""
    start = buf.rfind(b"\n", lo, pos) + 1 or lo
    end = buf.find(b"\n", pos, hi)
    if end == -1:
        end = hi
    found[start] = end
    return end
