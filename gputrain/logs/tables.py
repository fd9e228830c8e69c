"""Metrics printed as tables over several lines, which no one line's parser can read on its own.

Two shapes are common in training logs:

- a box of ``| name | value |`` rows under ``| group/ |`` headings (Stable-Baselines3's logger:
  ``| train/ |`` then ``|    loss | 20.1 |`` is ``train/loss``);
- a header of column names and, on the next line, one row of values (Ultralytics YOLO's
  ``Epoch GPU_mem loss Instances Size`` over ``1/3 0.673G 0.3653 24 256: 100%|███| 3/3 [...]``): read only when the
  first column is the epoch, so a row of numbers under any other words is not taken for metrics.

:class:`TableRows` keeps the one piece of state the first shape needs (the current group); the second shape asks
the scanner for the line above the row only when a row looks like one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gputrain.logs.formats import ALIASES, finite
from gputrain.logs.record import LogRecord

_NAME_RE = re.compile(r"^[A-Za-z_][\w./-]*$")
_CELL_RE = re.compile(r"^(?:\d+/\d+|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[KMGT]?)$")


class TableRows:
    """Reads table rows a line at a time (see the module docstring)."""

    def __init__(self) -> None:
        self.group = ""

    def read(self, text: str, previous: Callable[[], str] | None = None) -> LogRecord | None:
        """A metrics record for a table row, or None (other lines; a heading, which only sets the group)."""
        stripped = text.strip()
        if stripped.startswith("|") and stripped.endswith("|") and stripped.count("|") == 3:
            return self._boxed(text, stripped)
        if previous is not None and "%" in text and ":" in text:
            return _column_row(text, previous)
        return None

    def _boxed(self, text: str, stripped: str) -> LogRecord | None:
        name, value = (cell.strip() for cell in stripped[1:-1].split("|"))
        if name.endswith("/") and not value:
            self.group = name
            return None
        number = finite(value) if value else None
        if number is None or not _NAME_RE.match(name):
            return None
        key = name if "/" in name else self.group + name
        return LogRecord("metrics", text, fmt="table", values={ALIASES.get(key, key): number})


def _column_row(text: str, previous: Callable[[], str]) -> LogRecord | None:
    cells = text.split(":", 1)[0].split()
    if len(cells) < 3 or not all(_CELL_RE.match(cell) for cell in cells) or "/" not in cells[0]:
        return None
    names = previous().split()
    if len(names) != len(cells) or names[0].lower() != "epoch" or not all(_NAME_RE.match(n) for n in names):
        return None
    epoch = int(cells[0].split("/")[0])
    values: dict[str, float] = {"epoch": float(epoch)}
    for name, cell in zip(names[1:], cells[1:], strict=True):
        number = finite(cell.rstrip("KMGT"))
        if number is not None:
            values[ALIASES.get(name, name)] = number
    return LogRecord("metrics", text, fmt="columns", step=epoch, values=values)
