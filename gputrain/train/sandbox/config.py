"""Limits, and what isolation this machine allows (probed once per process).

Levels, strongest first:

- ``namespaces``: ``unshare --mount --net --pid`` works and we are root. The child gets no network (a
  new, empty network namespace), sees only its own processes, has private folders (home, /tmp, /work,
  site-packages, ...) covered by empty tmpfs, and runs as a dedicated unprivileged uid, so ``RLIMIT_NPROC``
  applies (it is not enforced for root). Killing the namespace's init kills everything inside.
- ``uid``: no namespaces, but root and the interpreter is reachable by other users: a dedicated uid.
- ``rlimits``: neither; resource limits and a process group only. Weak; `isolation_level()` tells callers.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
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


UNSHARE_ARGS = ("--mount", "--net", "--pid", "--fork", "--mount-proc", "--kill-child")
NEVER_COVER = frozenset({"/", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/dev", "/sys"})


def interpreter_root() -> str:
    return os.path.realpath(sys.base_prefix)


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


@functools.lru_cache(maxsize=1)
def isolation_level() -> str:
    """Probe once: can we create the namespaces here? (Containers without CAP_SYS_ADMIN cannot.)"""
    if os.name != "posix" or os.geteuid() != 0:
        return "rlimits"
    unshare = shutil.which("unshare")
    if unshare:
        try:
            probe = subprocess.run(
                [unshare, *UNSHARE_ARGS, "/bin/true"], capture_output=True, timeout=10, env={}, check=False
            )
            if probe.returncode == 0:
                return "namespaces"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "uid" if blocked_ancestor(interpreter_root()) is None else "rlimits"


def default_hidden_paths() -> tuple[str, ...]:
    """Folders a program has no business reading: homes, temp space, the project, installed packages."""
    paths = {"/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/root", "/work", "/mnt", "/srv", "/opt"}
    paths.add(os.path.expanduser("~"))
    for key in ("purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    for name in ("HF_HOME", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "XDG_CACHE_HOME"):
        value = os.environ.get(name)
        if value:
            paths.add(value)
    return tuple(sorted(p for p in paths if p not in NEVER_COVER))


def mount_plan(hide: tuple[str, ...]) -> dict[str, list[str]]:
    """Split hidden folders into ``cover`` (ancestors of the interpreter, re-exposed) and ``hide``."""
    root = interpreter_root()
    cover: list[str] = []
    plain: list[str] = []
    blocked = blocked_ancestor(root)
    if blocked and blocked not in NEVER_COVER:
        cover.append(blocked)
    for path in hide:
        real = os.path.realpath(path)
        if real in NEVER_COVER or not os.path.isdir(real):
            continue
        if root == real or root.startswith(real + os.sep):
            cover.append(real)
        else:
            plain.append(real)
    cover = sorted(set(cover), key=len)
    plain = sorted(set(plain) - set(cover), key=len)
    return {"cover": cover, "keep": [root] if cover else [], "hide": plain}


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
