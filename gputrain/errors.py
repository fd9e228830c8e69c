"""Error types that carry a message meant for a person.

The CLI catches :class:`GputrainError` at the top, prints ``error: <message>`` on one line and exits with
``exit_code``; anything else is a bug and keeps its traceback. Raise these where the cause is known, so the
message can say what went wrong and what to do.
"""

from __future__ import annotations

import re

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def visible(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\n``, ``\\x1b``): a file name or a value that
    holds one can neither break the one-line message nor drive the terminal."""
    return _CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text)


class GputrainError(Exception):
    """Base class: a user-facing, one-line failure."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        message = visible(message)
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class RecipeError(GputrainError):
    """A recipe (or an override) is malformed: exit code 2, message starts with ``file:line:col``."""

    exit_code = 2


class HardwareError(GputrainError):
    """Unknown GPU name, failed detection, or a catalog problem."""

    exit_code = 2


class PlanError(GputrainError):
    """The recipe cannot run on the requested hardware (e.g. it does not fit in memory)."""

    exit_code = 3


class RenderError(GputrainError):
    """A template could not be rendered (missing value, unsafe value)."""


class ClusterError(GputrainError):
    """Cluster profile problems, or Slurm commands failing / missing."""


class RegistryError(GputrainError):
    """The job registry cannot be read or written, or a job is unknown."""


class LogError(GputrainError):
    """A log file or job folder cannot be read."""


class RunPodError(GputrainError):
    """RunPod API failures, capacity errors, pods that never become ready."""


class SandboxError(GputrainError):
    """The code sandbox could not be set up (not: a program inside it failed)."""
