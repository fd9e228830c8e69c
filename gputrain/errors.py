"""Error types that carry a message meant for a person, and the exit codes the CLI gives them.

The CLI catches :class:`GputrainError` at the top, prints ``error: <message>`` on one line (or, with
``--json``, an ``{"error": {...}}`` object on stdout) and exits with ``exit_code``; anything else is a bug
and keeps its traceback. Raise these where the cause is known, so the message can say what went wrong and
what to do.

One rule for exit codes, so scripts can tell "fix your command" from "try again later":

- :data:`USER_ERROR` (2): something the user gave is wrong — a recipe, a flag, a name (recipe, GPU,
  cluster, preset, target, job), a cluster profile, a plan that does not fit. Running the same command
  again will fail again. Subclasses of :class:`UserError`.
- :data:`WORLD_ERROR` (1): something outside failed — Slurm unreachable or refusing a job, the network,
  the RunPod API, a job that failed, a disk that cannot be written. The same command may work later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

WORLD_ERROR = 1
USER_ERROR = 2
#: C0, DEL and C1 (U+0080-U+009F: a terminal takes U+009B as CSI and U+009D as OSC, as ESC [ and ESC ]).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\n``, ``\\x1b``): a file name or a value that
    holds one can neither break the one-line message nor drive the terminal."""
    return _CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text)


class GputrainError(Exception):
    """Base class: a user-facing, one-line failure. Default: a failure of the world (exit code 1)."""

    exit_code: int = WORLD_ERROR

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        message = visible(message)
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message

    @property
    def kind(self) -> str:
        """What went wrong, for ``--json`` errors: ``recipe``, ``cluster``, ``unknown_name``, ..."""
        name = type(self).__name__.removesuffix("Error") or "error"
        return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


class UserError(GputrainError):
    """The user's input is wrong (exit code 2): fixing the command, recipe or profile is the way out."""

    exit_code = USER_ERROR


class RecipeError(UserError):
    """A recipe (or an override) is malformed; the message starts with ``file:line:col``."""

    lines: tuple[str, ...] = ()  # every problem found, one line each (the message names the first), when known


class PlanFileError(UserError):
    """A ``plan.json`` that is missing, not a plan, of another schema version, or invalid."""


class HardwareError(UserError):
    """Unknown GPU name, or a GPU the catalog does not describe well enough for the request."""


class PlanError(UserError):
    """The recipe cannot run on the requested hardware (it does not fit in memory, no such preset, ...)."""


class RenderError(UserError):
    """A value cannot go into a script (unsafe characters, a missing value)."""


class UnknownNameError(UserError):
    """A name the user typed is not one gputrain knows (recipe, GPU, cluster, preset, target, job)."""


class ClusterError(GputrainError):
    """Slurm commands failing, missing or unreachable (exit code 1)."""


class ClusterProfileError(UserError, ClusterError):
    """A cluster profile is missing, malformed or unsuitable (exit code 2); still a :class:`ClusterError`."""


class RegistryError(GputrainError):
    """The job registry cannot be read or written (exit code 1)."""


class UnknownJobError(UnknownNameError, RegistryError):
    """No job with that id or name in the registry (exit code 2); still a :class:`RegistryError`."""


class LogError(UserError):
    """A log file or job folder given on the command line cannot be found or read."""


class RunPodError(GputrainError):
    """RunPod API failures, capacity errors, pods that never become ready (exit code 1)."""


class RunPodUsageError(UserError, RunPodError):
    """A RunPod command was given something unusable: a flag, a missing API key (exit code 2)."""


class SandboxError(GputrainError):
    """The code sandbox could not be set up (not: a program inside it failed)."""


class JobFailedError(GputrainError):
    """A job gputrain ran in the foreground ended unsuccessfully (exit code 1; its own code in the message)."""


def did_you_mean(name: str, known: Iterable[str] | Mapping[str, str], *, limit: int = 3) -> list[str]:
    """Known names close to ``name``: case-insensitive; completions of it first, else difflib's ranking.

    ``A100-40`` → ``A100-40GB``; ``gnn_colouring`` → ``gnn_coloring``. Empty when nothing is near. ``known``
    may map accepted spellings (aliases) to the names they stand for; the names are returned.
    """
    import difflib  # only on the error path: start-up stays lean

    canonical = dict(known) if isinstance(known, Mapping) else {n: n for n in known}
    folded = {spelling.lower(): name for spelling, name in canonical.items()}
    wanted = name.strip().lower()
    prefixed = list(dict.fromkeys(n for s, n in folded.items() if s.startswith(wanted))) if wanted else []
    if prefixed:  # completions of what was typed, in the known order
        return prefixed[:limit]
    close = difflib.get_close_matches(wanted, list(folded), n=limit * 2, cutoff=0.6)
    return list(dict.fromkeys(folded[c] for c in close))[:limit]


def suggestion(name: str, known: Iterable[str], *, spellings: Mapping[str, str] | None = None) -> str:
    """``did you mean A100-40GB?``, or ``known: a, b, c`` when nothing is near.

    ``spellings`` maps other accepted spellings (aliases) to the known name they stand for, so that a near
    alias suggests its canonical name.
    """
    names = list(dict.fromkeys(known))
    near = did_you_mean(name, {**{n: n for n in names}, **(spellings or {})})
    if near:
        return f"did you mean {' or '.join(near)}?"
    return f"known: {', '.join(names)}" if names else "none are known"


def unknown_name(
    what: str, name: str, known: Iterable[str], *, spellings: Mapping[str, str] | None = None, hint: str = ""
) -> str:
    """``unknown GPU type 'A100-40'; did you mean A100-40GB?`` (see :func:`suggestion`); ``hint`` (e.g.
    "see `gputrain recipes`") is added in parentheses."""
    tail = suggestion(name, known, spellings=spellings)
    return f"unknown {what} {name!r}; {tail}" + (f" ({hint})" if hint else "")
