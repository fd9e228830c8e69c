"""Helpers for the security suite: run a trainer-side script as root or as uid 65534 (``nobody``).

An unprivileged user cannot read this checkout or the development interpreter when they live under
``/root``: :func:`portable_packages` copies gputrain and the sandbox's bindings into a world-readable
folder, and :func:`user_python` finds an interpreter any user can execute. Under ``CI=true`` nothing here
skips: a missing prerequisite is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.train.sandbox.config import blocked_ancestor

ROOT = Path(__file__).resolve().parent.parent.parent
NOBODY = 65534


def ci() -> bool:
    return os.environ.get("CI") == "true"


def require_root() -> None:
    if os.geteuid() != 0:
        if ci():
            pytest.fail("the security suite needs root (it also runs as uid 65534 through setpriv)")
        pytest.skip("needs root to run as uid 65534")


def user_python() -> str:
    """An interpreter uid 65534 can run: ours, unless it sits under a private folder (pyenv in /root)."""
    if blocked_ancestor(os.path.realpath(sys.executable)) is None:
        return sys.executable
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None or blocked_ancestor(os.path.realpath(system)) is not None:
        pytest.fail("no Python interpreter that an unprivileged user can execute")
    return system


@pytest.fixture(scope="session")
def portable_packages() -> Iterator[Path]:
    """gputrain, landlockpy, pyseccomp and tests/security's scripts, readable by every user."""
    require_root()
    import landlockpy
    import pyseccomp

    base = Path(tempfile.mkdtemp(prefix="gputrain-security-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "gputrain", base / "gputrain", ignore=ignore)
    shutil.copytree(Path(landlockpy.__file__).parent, base / "landlockpy", ignore=ignore)
    shutil.copy(pyseccomp.__file__, base / "pyseccomp.py")
    for script in Path(__file__).parent.glob("*.py"):
        shutil.copy(script, base / script.name)
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_user_argv(uid: int | None, argv: list[str]) -> list[str]:
    """``argv`` as ``uid`` (None: as we are), with no supplementary groups."""
    if uid is None:
        return argv
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


def clean_env(home: str, pythonpath: str, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "PYTHONPATH": pythonpath,
            **extra}
