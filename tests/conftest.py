"""Shared test helpers: paths, and the rule that integration tests never skip under CI."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
DATA = Path(__file__).resolve().parent / "unit" / "data"


def require_tool(name: str) -> str:
    """Path of an external tool; skip when missing, except under CI where a missing tool is a failure."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is required under CI=true but is not on PATH")
        pytest.skip(f"{name} not installed")
    return path


@pytest.fixture
def gputrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private registry/config home so tests never touch the user's."""
    home = tmp_path / "gputrain-home"
    home.mkdir()
    monkeypatch.setenv("GPUTRAIN_HOME", str(home))
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(home / "clusters.yaml"))
    return home


def gputrain_command() -> list[str]:
    """The installed ``gputrain`` script of the running interpreter's environment (a venv's, or the system
    Python's), else ``python -m gputrain``: never a hard-coded interpreter or whatever is first on PATH."""
    script = Path(sys.executable).with_name("gputrain")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gputrain"]
