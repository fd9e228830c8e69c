"""The sandbox levels the security suite runs at, and how to start a trainer side at one of them.

- ``root-namespaces``: the trainer is root (mount/PID/net/IPC namespaces, a dedicated uid, seccomp);
- ``root-landlock``: root with namespaces switched off (Landlock + seccomp + a dedicated uid);
- ``nobody-userns``: uid 65534 with unprivileged user namespaces;
- ``nobody-landlock``: uid 65534 with user namespaces switched off (Landlock + seccomp, same uid).

A level this machine does not offer is skipped outside CI and fails under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import NOBODY, as_user_argv, ci, clean_env, require_root, user_python

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@dataclass(frozen=True)
class Level:
    name: str
    uid: int | None
    disable: str
    expected: str
    portable: bool  # run from the world-readable copy under the system interpreter


LEVELS = (
    Level("root-namespaces", None, "", "namespaces", False),
    Level("root-landlock", None, "namespaces", "landlock", True),
    Level("nobody-userns", NOBODY, "", "userns", True),
    Level("nobody-landlock", NOBODY, "userns", "landlock", True),
)


def _runnable(level: Level) -> str:
    """'' when this machine offers ``level``; else why not."""
    if level.expected == "landlock":
        import landlockpy

        return "" if landlockpy.abi_version() >= 1 else "Landlock is not enabled in this kernel"
    if level.expected == "userns":
        probe = subprocess.run(as_user_argv(level.uid, ["unshare", "--user", "--map-root-user", "--mount", "--pid",
                                                        "--net", "--ipc", "--fork", "true"]),
                               capture_output=True, timeout=30)
        return "" if probe.returncode == 0 else "unprivileged user namespaces are off"
    return ""


def run_level(level: Level, packages: Path, mode: str, *, popen: bool = False, python: str = "") -> Any:
    """Run ``sandbox_attacker.py MODE`` at ``level``: its JSON report (or the running process, ``popen``)."""
    require_root()
    why = _runnable(level)
    if why:
        if ci():
            pytest.fail(f"{level.name}: {why} (CI runs every level)")
        pytest.skip(f"{level.name}: {why}")
    home = tempfile.mkdtemp(prefix="gputrain-sec-home-")
    os.chmod(home, 0o777)
    extra = {"GPUTRAIN_SANDBOX_DISABLE": level.disable} if level.disable else {}
    if level.portable:
        argv = [python or user_python(), str(packages / "sandbox_attacker.py")]
        env = clean_env(home, str(packages), **extra)
    else:
        argv = [python or sys.executable, str(HERE / "sandbox_attacker.py")]
        env = clean_env(home, str(ROOT), **extra)
    argv = as_user_argv(level.uid, [*argv, mode, "{}"])
    if popen:  # the caller removes ``proc.home`` when done
        proc = subprocess.Popen(argv, env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.home = home  # type: ignore[attr-defined]
        return proc
    try:
        proc = subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=400)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode == 0, f"{level.name}: the trainer side died (exit {proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "refused" not in report, report
    assert report["sandbox"]["level"] == level.expected, report["sandbox"]
    return report
