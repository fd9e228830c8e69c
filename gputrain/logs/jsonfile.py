"""Reading a job folder's JSON files (``result.json``, ``summary.json``, ``plan.json``, the summary state)
when the folder may come from someone else: a pod's salvage, a shared project directory.

A hostile folder plants ``result.json`` as a link to ``/dev/zero`` (reading never ends: MemoryError), as a
FIFO (opening blocks), as a link to another of the user's files, or as one line of 50 000 nested brackets
(RecursionError in ``json``). Here a JSON file is read only if it is a regular file, not a link, of at most
:data:`MAX_JSON_BYTES`; anything else is ignored (``None``) with one warning line, as a damaged file would be.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

#: Largest JSON file of a job folder read (the summary's saved metric table of a long run is a few MiB).
MAX_JSON_BYTES = 64 << 20


def _warn(path: Path, why: str) -> None:
    from gputrain.logs.display import terminal_safe

    print(f"gputrain: warning: {terminal_safe(str(path))}: {why}; ignored", file=sys.stderr)


def plain_file(path: Path, max_bytes: int = MAX_JSON_BYTES) -> bool:
    """Is ``path`` a regular file (not a link) of at most ``max_bytes``? (For readers that parse the file
    themselves, such as the plan contract; they still catch ``RecursionError``.)"""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= max_bytes


def read_json_object(path: Path, *, warn: bool = True, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, not a regular file (a link, a device, a FIFO),
    larger than ``max_bytes``, nested too deep, not JSON or not an object. ``warn``: say why in one line on
    stderr for the hostile cases (a missing or half-written file is normal and silent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if warn and exc.errno == errno.ELOOP:
            _warn(path, "a symbolic link, not a file of the job")
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            if warn:
                _warn(path, "not a regular file")
            return None
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        if warn:
            _warn(path, f"larger than {max_bytes >> 20} MiB")
        return None
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except RecursionError:
        if warn:
            _warn(path, "JSON nested too deep")
        return None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
