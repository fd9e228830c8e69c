"""Text from a log, made safe to print: escape and control sequences shown, never interpreted.

A training log is written by code we do not control (a model's output, a library, a hostile recipe):
an OSC 52 sequence would write the user's clipboard, others retitle the terminal or clear the screen.
Everything a terminal would act on (C0 controls but tab, DEL, C1 controls such as the one-byte CSI) is
shown as a Python-style escape (``\\x1b``) instead. Special files (``/dev/zero``, a FIFO) are refused: a
log is a regular file.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

from gputrain.errors import LogError

_UNSAFE_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x80-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character (tab kept) shown as an escape."""
    return _UNSAFE_RE.sub(lambda m: repr(m.group())[1:-1], text)


def safe_lines(text: str) -> str:
    """Multi-line text for the terminal: its own line breaks kept, everything else made visible."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


def safe_data(value: Any) -> Any:
    """A summary (nested dicts/lists) with every string made terminal-safe, for rich output."""
    if isinstance(value, str):
        return terminal_safe(value)
    if isinstance(value, dict):
        return {terminal_safe(str(k)) if isinstance(k, str) else k: safe_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe_data(v) for v in value]
    return value


def require_regular_file(path: Path) -> Path:
    """``path`` if it is a regular file; a one-line LogError for a device, FIFO or socket (never opened:
    opening a FIFO blocks, reading /dev/zero never ends)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise LogError(f"{path}: cannot read it: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise LogError(f"{path}: {kind}, not a log file; refusing to read it", exit_code=2)
    return path
