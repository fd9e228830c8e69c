"""Shared test helpers: paths, and the rule that integration tests never skip under CI."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

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


_DESELECTED: list[str] = []


def _optional_missing(item: pytest.Item) -> str | None:
    """Why an ``optional`` test cannot run here: a library outside the extras CI installs, or a secret or
    path only a person has (a live RunPod key, a transformers 4 venv)."""
    import importlib.util

    mark = item.get_closest_marker("optional")
    if mark is None:
        return None
    module, env, hint = mark.kwargs.get("module"), mark.kwargs.get("env"), mark.kwargs.get("hint", "")
    if module and importlib.util.find_spec(module) is None:
        return f"{module} not installed" + (f" ({hint})" if hint else "")
    if env and not os.environ.get(env):
        return f"{env} not set" + (f" ({hint})" if hint else "")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``optional`` tests whose library or secret is absent are deselected, not skipped: nothing that CI is
    meant to run is ever skipped there, and the summary says what was left out and why."""
    keep, drop = [], []
    for item in items:
        why = _optional_missing(item)
        (drop if why else keep).append(item)
        if why:
            _DESELECTED.append(f"{item.nodeid}: {why}")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _DESELECTED:
        terminalreporter.write_line(f"deselected (optional): {line}")


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
