"""``$GPUTRAIN_HOME`` (default ``$XDG_DATA_HOME/gputrain``, i.e. ``~/.local/share/gputrain``) and the only way
to name a path inside it; the config folder (``$XDG_CONFIG_HOME/gputrain``, i.e. ``~/.config/gputrain``).

Names that come from outside (a pod name from RunPod's API, a job name) are data: they become one path
component each, are checked against a strict pattern (no ``/``, no leading ``.`` or ``-``, no control
characters) and the result is resolved and checked to stay inside the home before anything is created or
deleted there. ``runpod down`` with a pod named ``../../x`` must not remove ``~/x``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gputrain.errors import UserError

_NAME_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")


class UnsafeNameError(UserError):
    """A name from outside cannot be used as a path component (exit code 2)."""


def _xdg(variable: str, default: str) -> Path:
    """``$variable`` when it is an absolute path (the XDG spec ignores relative ones), else ``default``."""
    value = os.environ.get(variable, "")
    return Path(value) if value and os.path.isabs(value) else Path(default).expanduser()


def gputrain_home() -> Path:
    home = os.environ.get("GPUTRAIN_HOME")
    return Path(home).expanduser() if home else _xdg("XDG_DATA_HOME", "~/.local/share") / "gputrain"


def config_home() -> Path:
    """Where the user's own settings live (cluster profiles): ``$XDG_CONFIG_HOME/gputrain``."""
    return _xdg("XDG_CONFIG_HOME", "~/.config") / "gputrain"


def safe_name(name: str, what: str = "name") -> str:
    """``name`` if it is a plain name (letters, digits, ``_ . -``; not starting with ``.`` or ``-``)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        shown = repr(name)[:60]
        raise UnsafeNameError(f"{what} {shown} is not a plain name (letters, digits, '_', '.', '-')")
    return name


def under_home(*parts: str, what: str = "name") -> Path:
    """``$GPUTRAIN_HOME/part/part...``, each part a plain name, resolved and checked to stay inside."""
    home = gputrain_home()
    path = home.joinpath(*(safe_name(p, what) for p in parts))
    root = home.resolve()
    resolved = path.resolve()
    if resolved != root and root not in resolved.parents:
        raise UnsafeNameError(f"{what} {'/'.join(parts)!r} leads outside {home}")
    return path
