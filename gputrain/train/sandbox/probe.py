"""Which isolation this machine allows, chosen once at start by trying each level for real.

Levels, strongest first (the first that works wins):

- ``namespaces`` (trainer is root): new mount, PID, network, IPC and UTS namespaces; an allowlist root
  (system folders and the interpreter, read-only; a private tmpfs ``/tmp``); a dedicated unprivileged uid.
- ``userns`` (any user, where the kernel allows unprivileged user namespaces): the same namespaces inside
  a user namespace; every capability dropped before the program runs.
- ``landlock`` (no namespaces): Landlock keeps the same allowlist of paths and forbids ptrace of, signals
  to and ``/proc/<pid>/environ`` of processes outside; seccomp forbids sockets, ptrace, SysV IPC; the
  trainer is made non-dumpable; a child subreaper collects every orphan so all can be killed.
- ``uid`` (root, none of the above): a dedicated uid and rlimits. Weak: the network is open.
- ``rlimits``: resource limits only. Weak: the program can read your files and open connections.

Seccomp is added on top of the namespace levels where available. A level is *kept*: where the kernel
offers a namespace level (a bare ``unshare`` with the same flags works) but our sandbox cannot be built
on it, that is a fault to fix, not a reason to score under a weaker level: :func:`choose_isolation` raises
:class:`SandboxError` naming the cause (``GPUTRAIN_SANDBOX_DISABLE=<level>`` picks the weaker level on
purpose). Only a level the kernel does not offer falls through to the next. A weak level is never used
silently: :func:`require_isolation` refuses with one line unless ``GPUTRAIN_SANDBOX_ALLOW_WEAK=1``.
``GPUTRAIN_SANDBOX_DISABLE=userns,landlock,...`` switches layers off (tests use it to prove the refusal
and each fallback; it can only weaken the sandbox, never strengthen a claim).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from gputrain.errors import SandboxError
from gputrain.train.sandbox.config import SandboxLimits, blocked_ancestor, interpreter_root
from gputrain.train.sandbox.process import Isolation, SandboxDied, SandboxProcess, SandboxSetupFailed, SandboxTimeout

DISABLE_ENV = "GPUTRAIN_SANDBOX_DISABLE"
ALLOW_WEAK_ENV = "GPUTRAIN_SANDBOX_ALLOW_WEAK"
LAYER_NAMES = ("namespaces", "userns", "landlock", "seccomp")
PROBE_UID = 199_999
PR_SET_DUMPABLE = 4


@dataclass(frozen=True)
class Choice:
    """The isolation chosen, and why each stronger level was not."""

    isolation: Isolation
    missing: tuple[str, ...]


def disabled_layers() -> frozenset[str]:
    raw = os.environ.get(DISABLE_ENV, "")
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = names - set(LAYER_NAMES)
    if unknown:
        raise SandboxError(f"{DISABLE_ENV}: unknown layer(s) {', '.join(sorted(unknown))}; "
                           f"known: {', '.join(LAYER_NAMES)}")
    return frozenset(names)


def _binding_path(module: str) -> str:
    imported = __import__(module)
    path = os.path.dirname(os.path.abspath(imported.__file__ or ""))
    return os.path.dirname(path) if os.path.basename(imported.__file__ or "") == "__init__.py" else path


def landlock_status() -> tuple[bool, str, str]:
    """(usable, why not, path to put on the child's sys.path)."""
    try:
        import landlockpy
    except ImportError:
        return False, "Landlock bindings missing (pip install landlockpy)", ""
    abi = landlockpy.abi_version()
    if abi < 1:
        return False, "Landlock is not enabled in this kernel", ""
    return True, "", _binding_path("landlockpy")


def shared_libraries() -> tuple[tuple[str, str], ...]:
    """Where libc and libseccomp are, so the child need not search (pyseccomp does it at import)."""
    import ctypes.util

    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError):
        return ()
    found = {"c": ctypes.util.find_library("c"), "seccomp": getattr(pyseccomp, "_libseccomp_path", None)}
    return tuple((k, v) for k, v in found.items() if v)


def seccomp_status() -> tuple[bool, str, str]:
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: libseccomp itself is missing
        return False, f"seccomp bindings unusable ({exc}; pip install pyseccomp, apt install libseccomp2)", ""
    return True, "", _binding_path("pyseccomp")


def _works(isolation: Isolation) -> str:
    """'' when a tiny program runs and answers under ``isolation``; else why not."""
    limits = SandboxLimits(wall_seconds=20, test_seconds=20, cpu_seconds=10)
    proc = None
    try:
        proc = SandboxProcess("program", {"program": "def ok():\n    return 41 + 1\n", "setup": ""}, limits,
                              isolation)
        proc.start(20)
        reply = proc.call({"name": "ok", "args": {"l": []}, "kwargs": {"d": []}}, 20)
        return "" if reply.get("value") == 42 else f"unexpected answer {reply}"
    except (SandboxDied, SandboxTimeout, SandboxSetupFailed, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        if proc is not None:
            proc.close()


def _kernel_offers(level: str) -> bool:
    """Whether a bare ``unshare`` with the level's namespaces runs here (no sandbox of ours involved)."""
    import shutil
    import subprocess

    from gputrain.train.sandbox.process import UNSHARE

    tool = shutil.which("unshare")
    if tool is None:
        return False
    flags = [f for f in UNSHARE[level] if f != "--kill-child"]
    try:
        return subprocess.run([tool, *flags, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def choose_isolation() -> Choice:
    """Try each level, strongest first, with a real confined run; the first that works wins."""
    off = disabled_layers()
    root = os.name == "posix" and os.geteuid() == 0
    missing: list[str] = []
    ll_ok, ll_why, ll_path = landlock_status() if "landlock" not in off else (False, "Landlock disabled", "")
    sc_ok, sc_why, sc_path = seccomp_status() if "seccomp" not in off else (False, "seccomp disabled", "")
    extra = tuple(name for name, ok in (("landlock", ll_ok), ("seccomp", sc_ok)) if ok)
    paths = tuple(dict.fromkeys(p for p in (ll_path, sc_path) if p))
    libs = shared_libraries() if sc_ok else ()
    uid = PROBE_UID if root else None
    reachable = blocked_ancestor(interpreter_root()) is None
    ns_layers = ("mount", "pid", "net", "ipc")
    # In a namespace, Landlock would repeat what the allowlist root, the PID and the network namespace
    # already enforce (and cost a third of the start-up): seccomp alone is added there.
    ns_extra = tuple(x for x in extra if x == "seccomp")
    candidates: list[tuple[str, Isolation]] = []
    if root:
        candidates.append(("namespaces", Isolation("namespaces", (*ns_layers, "uid", *ns_extra, "rlimits"),
                                                   uid, uid, paths, libs)))
    else:
        candidates.append(("userns", Isolation("userns", ("userns", *ns_layers, *ns_extra, "rlimits"),
                                               binding_paths=paths, libraries=libs)))
    for name, isolation in candidates:
        if name in off:
            missing.append(f"{name}: disabled by {DISABLE_ENV}")
            continue
        why = _works(isolation)
        if not why:
            return Choice(isolation, tuple(missing))
        if _kernel_offers(name):
            raise SandboxError(
                f"the '{name}' sandbox could not be built although this kernel offers it: {why}; refusing to "
                f"score under a weaker level by accident (set {DISABLE_ENV}={name} to choose one on purpose)")
        missing.append(f"{'user namespaces' if name == 'userns' else 'namespaces'}: {why}")
    if not (ll_ok and sc_ok):
        missing += [w for w in (ll_why, sc_why) if w]
    elif root and not reachable:
        missing.append(f"landlock: the interpreter under {blocked_ancestor(interpreter_root())} is not "
                       "reachable by an unprivileged uid")
    else:
        layers = ("landlock", "seccomp", "nondumpable", "subreaper", *(("uid",) if root else ()), "rlimits")
        isolation = Isolation("landlock", layers, uid, uid, paths, libs)
        why = _works(isolation)
        if not why:
            return Choice(isolation, tuple(missing))
        raise SandboxError(
            f"the 'landlock' sandbox could not be built although this kernel offers it: {why}; refusing to "
            f"score under a weaker level by accident (set {DISABLE_ENV}=landlock to choose one on purpose)")
    if root and reachable:
        return Choice(Isolation("uid", ("uid", *extra, "subreaper", "rlimits"), uid, uid, paths, libs), tuple(missing))
    weakest = Isolation("rlimits", (*extra, "subreaper", "rlimits"), binding_paths=paths, libraries=libs)
    return Choice(weakest, tuple(missing))


def allow_weak_from_env() -> bool:
    return os.environ.get(ALLOW_WEAK_ENV, "").strip().lower() in ("1", "true", "yes")


def require_isolation(allow_weak: bool | None = None) -> Choice:
    """The chosen isolation, or a one-line :class:`SandboxError` when it is weak and not allowed."""
    choice = choose_isolation()
    allowed = allow_weak_from_env() if allow_weak is None else allow_weak
    if not choice.isolation.strong and not allowed:
        raise SandboxError(
            f"refusing to score model-written code: no sandbox layer here blocks network, files and secrets "
            f"({'; '.join(choice.missing) or 'none available'}); only '{choice.isolation.level}' is left. "
            f"Set {ALLOW_WEAK_ENV}=1 to score with that weaker isolation anyway."
        )
    if choice.isolation.level not in ("namespaces", "userns"):
        protect_trainer()
    return choice


def protect_trainer() -> None:
    """No PID namespace between the program and us: make our ``/proc/<pid>/environ`` (secrets) and memory
    unreadable to processes of the same uid."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def isolation_level() -> str:
    """The chosen level's name (kept for callers that only report it)."""
    return choose_isolation().isolation.level
