"""One log line → one record, for the logs a person is likely to point ``gputrain logs`` at.

Before a format parser (:mod:`gputrain.logs.formats`) sees a line, this module removes what launchers and
terminals add: torchrun ``--tee``'s ``[default0]:`` (role + local rank) and torch's own ``[rank1]:``, both
often on one line (``[default1]:[rank1]: Traceback``), a prefix in the middle of a line where two ranks'
output met, ANSI colours (torchtitan, tqdm's cursor-up), and the progress-bar updates that a ``\r`` later
in the line overwrote (the terminal shows only the last one; the last bar before an HF log dict is kept as
``seen_step``). Multi-line Python tracebacks are assembled per rank by :class:`LogParser`. Anything else
stays text: parsing never raises.
"""

from __future__ import annotations

import re

from gputrain.logs import formats
from gputrain.logs.classify import classify_line
from gputrain.logs.record import LogRecord

MAX_LINE_CHARS = 64 * 1024  # longer lines are cut: a 2 GB line must not become a 2 GB string
MAX_TRACEBACK_LINES = 120
ALIASES = formats.ALIASES

_PREFIX_RE = re.compile(r"\[(?:[A-Za-z_]*?)(\d+)\]:\s?")  # [default0]: [trainer3]: [rank1]: [3]:
_MID_PREFIX_RE = re.compile(r"\[(?:default|rank)\d+\]:")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_RE = re.compile(r"^\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*")  # Ray actors' prefix (verl)
#: Words of a ``key: value`` metric line (the generic parser is tried only on lines with one): OpenNMT's
#: ``Step 2650/200000; acc: 32.97; ppl: 46.77; xent: 3.85`` carries no "loss".
_KV_WORDS = ("oss", "step", "Step", "iter", "reward", "ppl", "xent", "acc")
#: Python logging's default format (``logging.basicConfig()``): ``INFO:tensorflow:loss = 2.3, step = 1``.
_PY_LOGGING_RE = re.compile(r"^(?:INFO|DEBUG|WARNING|ERROR|CRITICAL):[\w.]+:")
_TRACEBACK_START = "Traceback (most recent call last):"
_EXC_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(?::\s.*|:)?$")


def split_rank(line: str) -> tuple[int | None, str]:
    """``[default1]:[rank1]: text`` → (1, "text"); the outermost prefix is the launcher's and wins."""
    match = _PREFIX_RE.match(line)
    if match is None:
        return None, line
    rank = int(match.group(1))
    pos = match.end()
    while (inner := _PREFIX_RE.match(line, pos)) is not None:
        pos = inner.end()
    return rank, line[pos:]


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def parse_line(line: str) -> LogRecord:
    """Classify one line (newline already removed); unknown lines come back as ``kind="text"``."""
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + "…"
    rank, text = split_rank(line)
    text = strip_ansi(text)
    if _MID_PREFIX_RE.search(text):  # two ranks' output met on one line: the last one's part counts
        pieces = _MID_PREFIX_RE.split(text)
        starts = [m for m in _MID_PREFIX_RE.finditer(text)]
        for index in range(len(pieces) - 1, -1, -1):
            if pieces[index].strip():
                if index:
                    rank = split_rank(starts[index - 1].group(0))[0]
                text = pieces[index]
                break
    seen_step: int | None = None
    if "\r" in text:  # tqdm rewrites its bar with carriage returns: the last update is the current one
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
        if len(parts) > 1 and "%|" in parts[-2]:
            bar = formats._TQDM_RE.search(parts[-2])
            seen_step = int(bar.group("n")) if bar else None
        inner, text = split_rank(text)
        rank = rank if inner is None else inner
    record = _parse_text(text.rstrip())
    record.rank = rank if rank is not None or record.rank is None else record.rank
    record.seen_step = seen_step
    return record


def _parse_text(text: str) -> LogRecord:
    stripped = text.lstrip()
    if stripped.startswith("("):
        stripped = _RAY_RE.sub("", stripped, count=1)
    elif stripped[:1] in "IDWEC" and ":" in stripped[:10]:
        stripped = text = _PY_LOGGING_RE.sub("", stripped, count=1)
    record: LogRecord | None = None
    if stripped.startswith('{"'):
        record = formats.parse_json(stripped)
    elif '{"' in stripped:  # a JSON record after a prefix: fairseq's "... | train | {...}", Detectron's "json_stats: {"
        record = formats.parse_json(stripped[stripped.index('{"') :])
    elif "{'" in stripped:
        record = formats.parse_hf(stripped[stripped.index("{'") :])
    elif stripped.startswith("step"):
        match = formats._VERL_RE.match(stripped)
        if match:
            record = formats.parse_verl(stripped, match)
        elif " | " in stripped:
            record = formats.parse_ours(stripped)
    if record is None and stripped.startswith(("iteration", "validation loss at")) and "|" in stripped:
        record = formats.parse_pipes(stripped)
    if record is None and "%|" in text:
        tqdm = formats._TQDM_RE.search(text)
        if tqdm:
            record = formats.parse_tqdm(text, tqdm)
    if record is None and stripped.startswith("Epoch ") and "•" in stripped:
        record = formats.parse_rich_bar(stripped)
    if record is None and ("=" in text or "throughput" in text or "train loss" in text or "time (ms)" in text):
        record = formats.parse_special(stripped)
    if record is None and any(word in text for word in _KV_WORDS):
        record = formats.parse_kv(text)
    if record is None:
        record = LogRecord("text", text, event=classify_line(text))
    return record


class LogParser:
    """Feeds lines, returns records; assembles multi-line tracebacks, one per rank (ranks interleave)."""

    def __init__(self, events_only: bool = False) -> None:
        self._tracebacks: dict[int | None, list[str]] = {}
        self._events_only = events_only  # skip metric parsing: only failure events and tracebacks

    def feed(self, line: str) -> list[LogRecord]:
        rank, text = split_rank(line[:MAX_LINE_CHARS].rstrip("\n"))
        text = strip_ansi(text)
        out: list[LogRecord] = []
        buffer = self._tracebacks.get(rank)
        if buffer is not None:
            if text.startswith((" ", "\t")) or not text.strip():
                if len(buffer) >= MAX_TRACEBACK_LINES:
                    del buffer[1:2]
                buffer.append(text.rstrip())
                return out
            del self._tracebacks[rank]
            if _EXC_LINE_RE.match(text.rstrip()) and not text.startswith(_TRACEBACK_START):
                buffer.append(text.rstrip())
                out.append(self._traceback_record(rank, buffer, complete=True))
                return out
            out.append(self._traceback_record(rank, buffer, complete=False))
        if text.startswith(_TRACEBACK_START):
            self._tracebacks[rank] = [_TRACEBACK_START]
            return out
        if self._events_only:
            text = text[:MAX_LINE_CHARS]
            out.append(LogRecord("text", text, rank=rank, event=classify_line(text)))
        else:
            out.append(parse_line(line))
        return out

    def flush(self) -> list[LogRecord]:
        """Tracebacks still open at the end of the input (a log cut off mid-traceback)."""
        out = [self._traceback_record(rank, buf, complete=False) for rank, buf in self._tracebacks.items()]
        self._tracebacks.clear()
        return out

    @staticmethod
    def _traceback_record(rank: int | None, lines: list[str], complete: bool) -> LogRecord:
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        text = "\n".join(lines)
        event = classify_line(lines[-1]) if complete else None
        return LogRecord("traceback", text, rank=rank, fmt="python", event=event or "exception")
