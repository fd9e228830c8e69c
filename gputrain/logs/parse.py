"""One log line → one record, for the log formats a person is likely to point ``gputrain logs`` at.

Understood: our ``metrics.jsonl`` lines and human ``step N/M | key value`` lines, HF Trainer dict lines
(``{'loss': 1.2, 'learning_rate': 2e-05, 'epoch': 0.5}``), verl ``step:N - key:value - ...`` lines,
tqdm / PyTorch Lightning progress bars (also the last of several carriage-return updates), ``[rankN]:``
and ``[defaultN]:`` prefixes from torchrun, generic ``iter 10: loss 2.3, mfu 30%`` lines, and multi-line
Python tracebacks (assembled by :class:`LogParser`). Anything else is kept as text: parsing never raises.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from gputrain.logs.classify import classify_line
from gputrain.logs.schema import validate_record

MAX_LINE_CHARS = 64 * 1024  # longer lines are cut: a 2 GB line must not become a 2 GB string
MAX_TRACEBACK_LINES = 120

#: Other tools' names for the standard metrics keys.
ALIASES = {"learning_rate": "lr", "global_step": "step", "train/loss": "loss", "train/learning_rate": "lr"}

_RANK_RE = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
_RAY_RE = re.compile(r"^\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*")  # Ray actors' prefix (verl)
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE = re.compile(rf"^\s*(?:np\.float\d*\()?({_NUM})\)?\s*$")
_HF_ITEM_RE = re.compile(rf"'([A-Za-z_][\w./-]*)': ({_NUM})(?=[,}}])")
_VERL_RE = re.compile(r"^step:\s*(\d+)\s+-\s+")
_OURS_HEAD_RE = re.compile(r"^step (\d+)(?:/(\d+))?$")
_TQDM_RE = re.compile(
    r"(?:(?P<desc>[^|]*?):\s*)?(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remain>[\d:?]+),\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it)?(?P<post>[^\]]*)\]"
)
_POSTFIX_RE = re.compile(rf",\s*([A-Za-z_][\w./-]*)=({_NUM})")
_KV_RE = re.compile(rf"(?:^|(?<=[\s,|;(\[]))([A-Za-z_][\w./-]*)(?:\s*[=:]\s*|\s+)({_NUM})(ms|s|%)?(?![\w.])")
_STEP_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it"})
_EVAL_BARS = ("Validation", "Sanity", "Testing", "Predicting", "Evaluat")
_TRACEBACK_START = "Traceback (most recent call last):"
_EXC_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(?::\s.*|:)?$")


@dataclass(slots=True)
class LogRecord:
    """``kind`` is metrics, progress, traceback or text; ``event`` is a failure cause seen on the line."""

    kind: str
    text: str
    rank: int | None = None
    fmt: str = ""
    step: int | None = None
    total: int | None = None
    values: dict[str, float] = field(default_factory=dict)
    time: float | None = None
    event: str | None = None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    match = _NUM_RE.match(text)
    if not match:
        return None
    value = float(match.group(1))
    return value if math.isfinite(value) else None


def _numeric_items(obj: dict[object, object]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in obj.items():
        if isinstance(key, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number):
                out[ALIASES.get(key, key)] = number
    return out


def split_rank(line: str) -> tuple[int | None, str]:
    """``[rank1]: text`` → (1, "text"); lines without a prefix → (None, line)."""
    match = _RANK_RE.match(line)
    if match is None:
        return None, line
    return int(match.group(1)), line[match.end() :]


def _parse_json(text: str) -> LogRecord | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    record = validate_record(obj)
    if record is not None:
        values = {k: float(v) for k, v in record.items() if k not in ("step", "time")}
        return LogRecord(
            "metrics", text, fmt="jsonl", step=int(record["step"]), values=values, time=float(record["time"])
        )
    values = _numeric_items(obj)
    if not values:
        return None
    step = values.pop("step", None)
    return LogRecord("metrics", text, fmt="json", step=None if step is None else int(step), values=values)


def _parse_hf(text: str) -> LogRecord | None:
    """``{'loss': 1.2, 'learning_rate': 2e-05}``: a regex, not ``ast.literal_eval`` (40x slower)."""
    values: dict[str, float] = {}
    for key, raw in _HF_ITEM_RE.findall(text, 0, 8192):
        number = float(raw)
        if math.isfinite(number):
            values[ALIASES.get(key, key)] = number
    if not values:
        return None
    step = values.pop("step", None)
    return LogRecord("metrics", text, fmt="hf", step=None if step is None else int(step), values=values)


def _parse_verl(text: str, match: re.Match[str]) -> LogRecord:
    values: dict[str, float] = {}
    for part in text[match.end() :].split(" - "):
        key, sep, raw = part.partition(":")
        number = _number(raw) if sep else None
        if number is not None and key.strip():
            values[ALIASES.get(key.strip(), key.strip())] = number
    return LogRecord("metrics", text, fmt="verl", step=int(match.group(1)), values=values)


def _parse_ours(text: str) -> LogRecord | None:
    """``step 120/1000 | loss 2.31 | lr 3e-04``: split, not a regex; this is the densest line format."""
    head, *parts = text.rstrip().split(" | ")
    match = _OURS_HEAD_RE.match(head)
    if match is None or not parts:
        return None
    values: dict[str, float] = {}
    for part in parts:
        key, _, raw = part.partition(" ")
        try:
            number = float(raw)
        except ValueError:
            continue
        if math.isfinite(number) and key:
            values[key] = number
    total = int(match.group(2)) if match.group(2) else None
    return LogRecord("metrics", text, fmt="gputrain", step=int(match.group(1)), total=total, values=values)


def _parse_progress(text: str, match: re.Match[str]) -> LogRecord:
    desc = (match.group("desc") or "").strip()
    values: dict[str, float] = {}
    rate = match.group("rate")
    if rate and rate != "?":
        r = float(rate)
        if match.group("unit") == "s/it":
            r = 1.0 / r if r > 0 else 0.0
        values["steps_per_s"] = r
    for key, raw in _POSTFIX_RE.findall(match.group("post") or ""):
        if key != "v_num":
            values[ALIASES.get(key, key)] = float(raw)
    n, total = int(match.group("n")), int(match.group("total"))
    if desc.startswith(_EVAL_BARS):
        return LogRecord("text", text, fmt="tqdm")
    fmt, step = "tqdm", n
    epoch = re.match(r"Epoch (\d+)", desc)
    if epoch:  # Lightning: n/total counts batches within the epoch
        fmt = "lightning"
        values["epoch"] = float(epoch.group(1))
        step = int(epoch.group(1)) * total + n
        total = 0
    kind = "progress" if set(values) <= {"steps_per_s"} else "metrics"
    return LogRecord(kind, text, fmt=fmt, step=step, total=total or None, values=values)


def _parse_kv(text: str) -> LogRecord | None:
    values: dict[str, float] = {}
    step: int | None = None
    for key, raw, unit in _KV_RE.findall(text):
        low = key.lower()
        if low in _STEP_KEYS and step is None and raw.isdigit():  # not "1e5": int() would raise
            step = int(raw)
            continue
        if low == "time" and unit:
            key = f"step_time_{unit}"
        values[ALIASES.get(key, key)] = float(raw)
    if not any("loss" in k or "reward" in k for k in values) and (step is None or not values):
        return None
    return LogRecord("metrics", text, fmt="kv", step=step, values=values)


def parse_line(line: str) -> LogRecord:
    """Classify one line (newline already removed); unknown lines come back as ``kind="text"``."""
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + "…"
    rank, text = split_rank(line)
    if "\r" in text:  # tqdm rewrites its bar with carriage returns: the last update is the current one
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
        rank2, text = split_rank(text)
        rank = rank if rank2 is None else rank2
    record = _parse_text(text.rstrip())
    record.rank = rank
    return record


def _parse_text(text: str) -> LogRecord:
    stripped = text.lstrip()
    if stripped.startswith("("):
        stripped = _RAY_RE.sub("", stripped, count=1)
    record: LogRecord | None = None
    if stripped.startswith('{"'):
        record = _parse_json(stripped)
    elif stripped.startswith("{'"):
        record = _parse_hf(stripped)
    elif stripped.startswith("step"):
        match = _VERL_RE.match(stripped)
        if match:
            record = _parse_verl(stripped, match)
        elif stripped.startswith("step "):
            record = _parse_ours(stripped)
    if record is None and "%|" in text:
        tqdm = _TQDM_RE.search(text)
        if tqdm:
            record = _parse_progress(text, tqdm)
    if record is None and ("loss" in text or "step" in text or "iter" in text or "reward" in text):
        record = _parse_kv(text)
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
