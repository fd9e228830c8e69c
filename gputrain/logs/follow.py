"""``gputrain logs JOB -f``: stream new lines until the job ends, like ``tail -F`` but job-aware.

Survives truncation (the file shrinks: start again from its beginning) and rotation (the path now names
another inode: drain the old file, then open the new one). Several files (one per rank) are followed
together, their lines prefixed with the rank. Memory is bounded: reads are at most :data:`READ_BYTES`
and a line longer than :data:`~gputrain.logs.parse.MAX_LINE_CHARS` is cut. The caller decides when
the job has ended through ``is_finished`` (local pid, Slurm state, RunPod pod state, final summary).
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from gputrain.logs.parse import MAX_LINE_CHARS, split_rank

READ_BYTES = 1 << 20


def display_line(raw: bytes) -> str:
    """Bytes of one line → text to show: undecodable bytes replaced, tqdm's last update only, escape and
    control sequences made visible (``gputrain.logs.display``)."""
    from gputrain.logs.display import terminal_safe

    text = raw[: MAX_LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return terminal_safe(text[:MAX_LINE_CHARS])


class LineFilter:
    """``--rank N`` and ``--grep RE`` applied to one displayed line."""

    def __init__(self, rank: int | None = None, grep: re.Pattern[str] | None = None) -> None:
        self.rank, self.grep = rank, grep

    def __call__(self, line: str, file_rank: int | None = None) -> bool:
        prefix_rank, text = split_rank(line)
        rank = prefix_rank if prefix_rank is not None else file_rank
        if self.rank is not None and rank is not None and rank != self.rank:
            return False
        return self.grep is None or self.grep.search(text) is not None


class Tail:
    """One followed file: position, inode and the partial last line."""

    def __init__(self, path: Path, rank: int | None = None) -> None:
        self.path, self.rank = path, rank
        self.fh: BinaryIO | None = None
        self.inode = 0
        self.partial = b""
        self.overlong = False

    def open(self, at_end_lines: int | None) -> list[bytes]:
        """Open (when the file exists); returns the last ``at_end_lines`` lines already there."""
        try:
            self.fh = open(self.path, "rb")  # noqa: SIM115 - kept open while following
        except OSError:
            return []
        self.inode = os.fstat(self.fh.fileno()).st_ino
        if at_end_lines is None:
            return []
        return last_lines(self.fh, at_end_lines)

    def read(self) -> list[bytes]:
        """Complete new lines since the last call; handles truncation and rotation."""
        if self.fh is None:
            self.open(None)
            if self.fh is None:
                return []
        assert self.fh is not None
        out: list[bytes] = []
        if os.fstat(self.fh.fileno()).st_size < self.fh.tell():  # truncated in place
            self.fh.seek(0)
            self.partial, self.overlong = b"", False
        out += self._drain()
        try:
            rotated = os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            rotated = False  # removed; a new file may appear under the name later
        if rotated:
            out += self._drain()
            if self.partial:
                out.append(self.partial)
            self.fh.close()
            self.fh, self.partial, self.overlong = None, b"", False
            self.open(None)
            if self.fh is not None:
                out += self._drain()
        return out

    def _drain(self) -> list[bytes]:
        assert self.fh is not None
        out: list[bytes] = []
        while data := self.fh.read(READ_BYTES):
            data = self.partial + data
            lines = data.split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                if self.overlong:
                    self.overlong = False  # the end of a line already shown cut
                    continue
                out.append(line)
            if len(self.partial) > MAX_LINE_CHARS:
                if not self.overlong:
                    out.append(self.partial[: MAX_LINE_CHARS - 32] + " … (line cut)".encode())
                self.partial, self.overlong = b"", True
        return out

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


def last_lines(fh: BinaryIO, n: int, block: int = 64 << 10) -> list[bytes]:
    """The last ``n`` complete lines, reading backwards in blocks; leaves ``fh`` at the end."""
    end = fh.seek(0, os.SEEK_END)
    if n <= 0 or end == 0:
        return []
    pos, data = end, b""
    while pos > 0 and data.count(b"\n") <= n and len(data) < 64 * MAX_LINE_CHARS:
        step = min(block, pos)
        pos -= step
        fh.seek(pos)
        data = fh.read(step) + data
    fh.seek(end)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if pos > 0 and lines:
        lines = lines[1:]  # the first one is probably cut
    return list(deque(lines, maxlen=n))


def follow(
    paths: Iterable[Path],
    emit: Callable[[str], None],
    is_finished: Callable[[], bool],
    *,
    line_filter: LineFilter | None = None,
    initial_lines: int = 10,
    poll_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Emit lines as they are written until ``is_finished()``; returns how many lines were emitted.

    ``is_finished`` is asked only after a poll found nothing new, and one last read follows a True, so
    the final lines a job writes before it exits are never lost.
    """
    files = list(paths)
    keep = line_filter or LineFilter()
    tails = [Tail(p, _file_rank(p) if len(files) > 1 else None) for p in files]
    emitted = 0

    def show(tail: Tail, raws: list[bytes]) -> int:
        count = 0
        for raw in raws:
            line = display_line(raw)
            if keep(line, tail.rank):
                emit(
                    line
                    if tail.rank is None or split_rank(line)[0] is not None
                    else f"[rank{tail.rank}]: {line}"
                )
                count += 1
        return count

    try:
        for tail in tails:
            emitted += show(tail, tail.open(initial_lines))
        while True:
            new = 0
            for tail in tails:
                new += show(tail, tail.read())
            emitted += new
            if new == 0:
                if is_finished():
                    for tail in tails:
                        emitted += show(tail, tail.read())
                        if tail.partial:
                            emitted += show(tail, [tail.partial])
                    return emitted
                sleep(poll_s)
    finally:
        for tail in tails:
            tail.close()


def _file_rank(path: Path) -> int | None:
    """Rank of a per-rank file: torchrun's ``.../attempt_0/3/stdout.log`` or ``rank3.log``/``*_rank3.*``."""
    if path.parent.name.isdigit():
        return int(path.parent.name)
    match = re.search(r"rank[_-]?(\d+)", path.name)
    return int(match.group(1)) if match else None
