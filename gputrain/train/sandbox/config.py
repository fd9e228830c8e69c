"""Limits, and what a sandboxed process may see (stdlib only, cheap to import).

The isolation levels themselves are chosen in ``probe.py``; this module holds the plain settings both
sides agree on: the limits, the allowlist of read-only paths, and the environment built from nothing.
"""

from __future__ import annotations

import functools
import glob
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


@functools.lru_cache(maxsize=1)
def hidden_paths() -> tuple[str, ...]:
    """Installed packages (site-/dist-packages) under the folders above: the sandbox sees the standard
    library only, so a benchmark's reference solutions shipped in a wheel cannot be read."""
    prefixes = {"/usr", "/usr/local", sys.base_prefix, interpreter_root()}
    found: list[str] = ["/usr/lib/python3/dist-packages"]
    for prefix in prefixes:
        for kind in ("site-packages", "dist-packages"):
            found += glob.glob(os.path.join(prefix, "lib*", "python3*", kind))
    try:
        import site

        found += site.getsitepackages()
    except (ImportError, AttributeError):
        pass
    real = (os.path.realpath(p) for p in found if os.path.isdir(p))
    return tuple(sorted(set(real)))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _expand(path: str, hidden: tuple[str, ...], out: list[str]) -> None:
    if any(_inside(path, h) for h in hidden):
        return
    if not any(_inside(h, path) for h in hidden) or not os.path.isdir(path) or os.path.islink(path):
        if not (os.path.islink(path) and any(_inside(os.path.realpath(path), h) for h in hidden)):
            out.append(path)
        return
    for name in sorted(os.listdir(path)):
        _expand(os.path.join(path, name), hidden, out)


@functools.lru_cache(maxsize=1)
def landlock_read_paths() -> tuple[str, ...]:
    """:func:`read_only_paths` for Landlock, which can only allow: a folder that holds a hidden one is
    replaced by its entries, down to the hidden folder (which is left out)."""
    hidden = tuple(h for h in hidden_paths())
    out: list[str] = []
    for path in read_only_paths():
        _expand(os.path.realpath(path), hidden, out)  # a rule on a link would allow its whole target
    return tuple(dict.fromkeys(out))


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
