"""How command results reach the user: rich tables and colour on a terminal, plain text everywhere else.

Results go to stdout, warnings and progress to stderr, so ``gputrain plan ... > plan.txt`` or a pipe into
another program gets the result alone. rich is imported only when stdout is a terminal (it costs start-up
and its boxes would be noise in a pipe); ``NO_COLOR`` (https://no-color.org) keeps the table but drops
colour, as does ``TERM=dumb``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

STATE_STYLES = {
    "COMPLETED": "green", "RUNNING": "cyan", "PENDING": "yellow", "REQUEUED": "yellow", "PREEMPTED": "yellow",
    "FAILED": "red", "TIMEOUT": "red", "CANCELLED": "magenta", "UNKNOWN": "dim",
}


def color_allowed() -> bool:
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def warn(message: str) -> None:
    """``warning: ...`` on stderr (yellow on a colour terminal)."""
    label = "\x1b[33mwarning:\x1b[0m" if is_terminal(sys.stderr) and color_allowed() else "warning:"
    print(f"{label} {message}", file=sys.stderr, flush=True)


def progress(message: str) -> None:
    """A line about what is happening (not a result): stderr."""
    print(message, file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def cell(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None or value == "" else str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
                state_column: str | None = None) -> None:
    """A table of ``rows``: rich's on a terminal, aligned plain columns (header in capitals) otherwise.

    ``state_column`` names a column of job states to colour on a terminal.
    """
    texts = [[cell(v) for v in row] for row in rows]
    if is_terminal():
        _rich_table(headers, texts, title, state_column)
        return
    if title:
        print(title)
    widths = [max(len(h), *(len(r[i]) for r in texts)) for i, h in enumerate(headers)]
    print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in texts:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _rich_table(headers: Sequence[str], rows: list[list[str]], title: str | None, state_column: str | None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(no_color=not color_allowed(), highlight=False)
    table = Table(title=title, header_style="bold", title_justify="left")
    for header in headers:
        table.add_column(header.upper(), overflow="fold")
    state_index = list(headers).index(state_column) if state_column is not None and state_column in headers \
        else None
    for row in rows:
        cells = [Text(v) for v in row]
        if state_index is not None:
            cells[state_index].stylize(STATE_STYLES.get(row[state_index], ""))
        table.add_row(*cells)
    console.print(table)
