"""Limits, and what a sandboxed process may see (stdlib only, cheap to import).

The isolation levels themselves are chosen in ``probe.py``; this module holds the plain settings both
sides agree on: the limits, the allowlist of read-only paths, and the environment built from nothing.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits. ``wall_seconds`` bounds the whole program (all its tests), ``test_seconds`` one."""

    wall_seconds: float = 10.0
    test_seconds: float = 3.0
    cpu_seconds: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 8
    tmpfs_mb: int = 32
    max_processes: int = 32
    output_bytes: int = 1 << 20

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


SYSTEM_READ_ONLY = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                    "/etc/localtime")


def interpreter_root() -> str:
    return os.path.realpath(sys.base_prefix)


def interpreter() -> str:
    """The real interpreter binary (a venv's ``python`` is a link to it; ``-I`` ignores the venv anyway)."""
    return os.path.realpath(sys.executable)


def read_only_paths() -> list[str]:
    """Everything a sandboxed program may read: system folders and the interpreter's own installation.

    An allowlist, not a list of things to hide: homes, ``~/.ssh``, the job folder, the project, caches and
    site-packages of a virtual environment are not on it, wherever they live.
    """
    paths = [p for p in SYSTEM_READ_ONLY if os.path.lexists(p)]
    for extra in (interpreter_root(), os.path.dirname(interpreter())):
        if not any(extra == p or extra.startswith(p.rstrip("/") + "/") for p in paths):
            paths.append(extra)
    return paths


def _others_can_enter(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return False


def blocked_ancestor(path: str) -> str | None:
    """The topmost folder on ``path`` that other users cannot enter (e.g. ``/root`` for pyenv)."""
    parts = os.path.realpath(path).split(os.sep)[1:]
    for i in range(1, len(parts) + 1):
        prefix = os.sep + os.sep.join(parts[:i])
        if not _others_can_enter(prefix):
            return prefix
    return None


def minimal_env(workdir: str) -> dict[str, str]:
    """Built from nothing: no variable of the parent (tokens, keys, proxies) reaches the program."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }


def count_tasks(uid: int) -> int:
    """Threads of ``uid`` alive now: what ``RLIMIT_NPROC`` counts for a sandbox sharing the trainer's uid."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields.get("Threads", "1"))
        except (OSError, KeyError, ValueError):
            continue
    return total
