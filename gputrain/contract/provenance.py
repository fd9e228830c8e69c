"""What ran: ``provenance.json`` in the job folder, so a job that worked last month can be told from today's.

Two writers, each once: the launching machine when it writes the job folder (``launch``: library versions
as installed there, the git commit and dirty flag of the user's working directory, the NVIDIA driver where
``nvidia-smi`` exists) and rank 0 of the training when it starts (``runtime``: the versions the training
process really imports, ``torch.version.cuda``, the driver on the node). Versions come from
``importlib.metadata`` (no import of the libraries themselves: the CLI stays fast). :func:`changes` says
what differs between two records; ``gputrain logs JOB`` shows it against the previous job of the recipe.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

PROVENANCE_FILE = "provenance.json"
LIBRARIES = ("gputrain", "torch", "transformers", "trl", "accelerate", "datasets", "tokenizers", "peft", "vllm",
             "onnx", "onnxruntime", "pydantic")
_TIMEOUT_S = 5.0


def library_versions() -> dict[str, str]:
    """``{distribution: version}`` for the libraries a training depends on, as installed (absent ones left out)."""
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _quiet(cmd: list[str], cwd: Path | None = None) -> str | None:
    """The stripped stdout of ``cmd``, or None when it is missing, fails or hangs (a record never blocks a job)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(path: Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git work tree holding ``path`` (tracked files only), None outside one."""
    commit = _quiet(["git", "rev-parse", "HEAD"], cwd=path)
    if not commit:
        return None
    status = _quiet(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path)
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def nvidia_driver() -> str | None:
    """The NVIDIA driver version (``nvidia-smi``), None where there is none."""
    out = _quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def launch_record(cwd: Path | None = None) -> dict[str, Any]:
    """The ``launch`` half: what the machine that writes the job folder has installed and checked out."""
    return {"recorded_at": time.time(), "host": platform.node(), "platform": sys.platform,
            "libraries": library_versions(), "git": git_state(cwd or Path.cwd()), "driver": nvidia_driver()}


def launch_json(cwd: Path | None = None) -> str:
    """The text of a fresh job folder's ``provenance.json``."""
    return json.dumps({"launch": launch_record(cwd)}, indent=2, sort_keys=True) + "\n"


def _flat(record: dict[str, Any]) -> dict[str, str]:
    """One comparable value per fact: runtime figures win over the launching machine's."""
    out: dict[str, str] = {}
    for part in ("launch", "runtime"):
        section = record.get(part)
        if not isinstance(section, dict):
            continue
        libs = section.get("libraries")
        for name, version in (libs.items() if isinstance(libs, dict) else ()):
            out[str(name)] = str(version)
        git = section.get("git")
        if isinstance(git, dict) and git.get("commit"):
            out["git commit"] = str(git["commit"])[:12]
            out["git dirty"] = "yes" if git.get("dirty") else "no"
        for key in ("cuda", "driver"):
            if section.get(key):
                out[key] = str(section[key])
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``["torch 2.12.0 → 2.13.0", "git commit 1a2b… → 3c4d…"]``: facts recorded in both that differ, then
    facts recorded in one only (``vllm — → 0.9``)."""
    a, b = _flat(old), _flat(new)
    return [f"{key} {a.get(key, '—')} → {b.get(key, '—')}" for key in sorted(a.keys() | b.keys())
            if a.get(key) != b.get(key)]
