"""The metrics record every bundled training writes to ``<job_dir>/metrics.jsonl``, defined once.

One JSON object per logged step, one per line, written by rank 0 and flushed per line so that
``gputrain logs JOB -f`` and the summary see a step as soon as it is logged::

    {"step": 120, "time": 1763731200.5, "epoch": 0.4, "loss": 2.31, "lr": 3e-4, "tokens_per_s": 51234.0}

Required: ``step`` (int, >= 0) and ``time`` (unix seconds). Standard optional keys are listed in
:data:`STANDARD_KEYS`; a training adds its own numeric keys (``reward_mean``, ``kl``, ``nelbo``,
``conflicts_per_edge``...). Values are numbers only: a summary must never carry text a training
happened to put in a metric (a path, a token). Use from a training::

    from gputrain.logs.schema import MetricsWriter
    with MetricsWriter(job_dir / "metrics.jsonl", enabled=rank == 0) as metrics:
        metrics.log(step, loss=loss.item(), lr=sched.get_last_lr()[0], tokens_per_s=tps)

Stdlib only: the training island imports this module.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
import time as _time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from gputrain.errors import LogError

METRICS_FILE = "metrics.jsonl"

REQUIRED_KEYS = ("step", "time")

#: Standard optional keys and their meaning; trainings may add any other numeric key.
STANDARD_KEYS: dict[str, str] = {
    "epoch": "fractional epoch (0.5 = half-way through the first epoch)",
    "loss": "training loss at this step",
    "lr": "learning rate used for this step",
    "grad_norm": "global gradient norm before clipping",
    "tokens_per_s": "training throughput, tokens per second (all ranks)",
    "samples_per_s": "training throughput, samples per second (all ranks)",
    "gpu_mem_gib": "peak GPU memory allocated on rank 0 so far, GiB",
}

_MAX_RECORD_BYTES = 1 << 20
_KEY_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_./-]{0,127}\Z")
# A key "looks like a secret" when one of its words is one of these (``hf_token``, ``wandb_api_key``,
# ``db_password``). Plural/compound words such as ``tokens_per_s`` are fine.
_SECRET_WORDS = frozenset(
    {"token", "key", "apikey", "secret", "password", "passwd", "pwd", "credential", "credentials", "auth"}
)


def looks_like_secret(key: str) -> bool:
    """True for metric names that could carry a credential; such keys are refused outright."""
    words = [w for w in re.split(r"[^a-z0-9]+", key.lower()) if w]
    return any(w in _SECRET_WORDS for w in words)


def clean_value(value: Any) -> int | float | None:
    """A JSON-safe number, or None when ``value`` is not a finite number (text, NaN, inf, a list...).

    Accepts ints, floats, bools (as 0/1) and scalar-like objects (numpy scalars, 0-d tensors) without
    importing their libraries.
    """
    if isinstance(value, (str, bytes, bytearray)) or value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        if getattr(value, "dtype", None) is not None and "int" in str(value.dtype):
            return operator.index(value)
        number = float(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def validate_record(obj: Any) -> dict[str, int | float] | None:
    """The record with only its valid keys, or None when it lacks a usable ``step``/``time``.

    Readers use this on every line, so a hand-edited or foreign ``metrics.jsonl`` degrades to fewer
    fields instead of an error.
    """
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
        return None  # json.loads accepts NaN/Infinity, which int() would refuse with a traceback
    if step < 0 or step != int(step):
        return None
    stamp = clean_value(obj.get("time"))
    if stamp is None:
        return None
    record: dict[str, int | float] = {"step": int(step), "time": float(stamp)}
    for key, value in obj.items():
        if key in record or not isinstance(key, str) or not _KEY_RE.match(key) or looks_like_secret(key):
            continue
        number = clean_value(value)
        if number is not None:
            record[key] = number
    return record


class MetricsWriter:
    """Appends one flushed JSON line per :meth:`log` call; a no-op when ``enabled`` is False.

    Appending (never truncating) keeps the history of a run that resumed from a checkpoint; readers
    take the last record of a repeated step. Values that are not finite numbers are dropped and
    counted in :attr:`dropped` (a NaN loss must not make the file unreadable to strict JSON parsers).
    Keys that look like secrets raise ``ValueError``: that is a bug in the caller.
    """

    def __init__(self, path: str | os.PathLike[str], *, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.dropped: dict[str, int] = {}
        self._fh = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, step: int, **values: Any) -> dict[str, int | float] | None:
        """Write one record; returns what was written (None when disabled)."""
        if isinstance(step, bool) or not isinstance(step, int):
            try:
                step = operator.index(step)
            except TypeError:
                raise TypeError(f"metrics step must be an int, got {type(step).__name__}") from None
        if step < 0:
            raise ValueError(f"metrics step must be >= 0, got {step}")
        for key in values:
            if looks_like_secret(key):
                raise ValueError(f"refusing to log metric {key!r}: the name looks like a secret")
            if not _KEY_RE.match(key):
                raise ValueError(f"invalid metric name {key!r} (letters, digits, _ . / - only)")
        stamp = clean_value(values.pop("time", None))
        record: dict[str, int | float] = {"step": step, "time": _time.time() if stamp is None else stamp}
        for key, value in values.items():
            number = clean_value(value)
            if number is None:
                self.dropped[key] = self.dropped.get(key, 0) + 1
            else:
                record[key] = number
        if self._fh is None:
            return None
        self._fh.write(json.dumps(record, separators=(", ", ": "), allow_nan=False) + "\n")
        self._fh.flush()
        return record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            try:
                os.fsync(self._fh.fileno())
            except OSError:
                pass
            self._fh.close()
            self._fh = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def format_step_line(step: int, values: dict[str, Any], total: int | None = None) -> str:
    """The human log line trainings print next to each metrics record; ``gputrain logs`` parses it back.

    ``step 120/1000 | loss 2.3100 | lr 3.000e-04 | tokens_per_s 51234``
    """
    head = f"step {step}" if total is None else f"step {step}/{total}"
    parts = [head]
    for key, value in values.items():
        number = clean_value(value)
        if number is None or key in REQUIRED_KEYS:
            continue
        if isinstance(number, int):
            parts.append(f"{key} {number}")
        elif number != 0 and (abs(number) < 1e-3 or abs(number) >= 1e6):
            parts.append(f"{key} {number:.3e}")
        else:
            parts.append(f"{key} {number:.4f}")
    return " | ".join(parts)


def iter_metrics(path: str | os.PathLike[str]) -> Iterator[dict[str, int | float]]:
    """Valid records in file order; broken lines (a partial last line, garbage) are skipped."""
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise LogError(f"{p}: no such metrics file") from None
    except OSError as exc:
        raise LogError(f"{p}: cannot read metrics ({exc.strerror})") from None
    with fh:
        while raw := fh.readline(_MAX_RECORD_BYTES):
            if not raw.endswith(b"\n"):
                # Either the partial line a writer is still appending, or an absurdly long one: skip it
                # without ever holding more than _MAX_RECORD_BYTES.
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(_MAX_RECORD_BYTES)
                continue
            if not raw.lstrip().startswith(b"{"):
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            record = validate_record(obj)
            if record is not None:
                yield record


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, int | float]]:
    """All valid records of a ``metrics.jsonl``; raises :class:`LogError` when the file is missing."""
    return list(iter_metrics(path))
