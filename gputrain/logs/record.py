"""The record one parsed log line becomes (shared by the format parsers and the line dispatcher)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class LogRecord:
    """``kind`` is metrics, progress, traceback or text; ``event`` is a failure cause seen on the line.

    ``rank`` is the launcher's rank (the outermost prefix); ``seen_step`` the step of the progress bar drawn
    on the same physical line just before this record (HF Trainer dicts carry no step of their own).
    """

    kind: str
    text: str
    rank: int | None = None
    fmt: str = ""
    step: int | None = None
    total: int | None = None
    values: dict[str, float] = field(default_factory=dict)
    time: float | None = None
    event: str | None = None
    seen_step: int | None = None
