"""The import rules hold, and break when they should: a copy of the package with one bad import added fails
``lint-imports`` (or ruff's TID253) naming the contract. Also: the README's test command is what CI runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _tool(name: str) -> str:
    """A tool installed beside the running interpreter (the active environment), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "gputrain", tmp_path / "gputrain", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(tree), "COLUMNS": "500"}
    return subprocess.run([_tool("lint-imports"), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    proc = lint_imports(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", proc.stdout)


@pytest.mark.parametrize(("module", "code", "contract"), [
    ("registry/store.py", "def _cli():\n    from gputrain.cli import app  # noqa\n", "Layers"),
    ("render/render.py", "def _backend():\n    import gputrain.backends.slurm  # noqa\n", "Layers"),
    ("recipe/schema.py", "def _gpu():\n    import gputrain.hardware.catalog  # noqa\n", "Layers"),
    ("logs/parse.py", "def _train():\n    import gputrain.train.selftest  # noqa\n", "train/ is an island"),
    ("train/selftest.py", "def _plan():\n    import gputrain.planner  # noqa\n", "train/ imports only the leaves"),
    ("planner/estimate.py", "def _torch():\n    import torch  # noqa\n", "Training libraries only in train/"),
    ("hardware/detect.py", "def _net():\n    import httpx  # noqa\n", "Leaves use no CLI"),
    ("backends/local.py", "def _gpu():\n    import gputrain.hardware.catalog  # noqa\n", "backends import render"),
    ("render/render.py", "def _jobs():\n    import gputrain.registry.store  # noqa\n", "render imports the planner"),
])
def test_a_bad_import_even_inside_a_function_breaks_a_contract(tree: Path, module: str, code: str,
                                                                contract: str) -> None:
    _append(tree / "gputrain" / module, code)
    proc = lint_imports(tree)
    assert proc.returncode != 0, proc.stdout
    broken = [line for line in proc.stdout.splitlines() if re.search(r" BROKEN( \(.*\))?$", line)]
    assert any(line.startswith(contract) for line in broken), proc.stdout  # indirect ones may break others too


def test_heavy_libraries_stay_off_module_level_outside_train(tree: Path) -> None:
    ruff = _tool("ruff")
    core = tree / "gputrain" / "cli" / "core.py"
    _append(core, "def _later() -> None:\n    import httpx  # noqa: F401\n")
    ok = subprocess.run([ruff, "check", "--select", "TID253", "gputrain"], cwd=tree, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout  # inside a function: allowed
    _append(core, "import httpx  # noqa: E402, F401")
    bad = subprocess.run([ruff, "check", "--select", "TID253", "gputrain"], cwd=tree, capture_output=True, text=True)
    assert bad.returncode != 0 and "TID253" in bad.stdout and "cli/core.py" in bad.stdout, bad.stdout
    _append(tree / "gputrain" / "train" / "selftest.py", "import torch  # noqa: E402, F401")
    train = subprocess.run([ruff, "check", "--select", "TID253", "gputrain/train"], cwd=tree, capture_output=True,
                           text=True)
    assert train.returncode == 0, train.stdout  # the island may


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"Run the tests.*?```bash\n(.*?)\n```", readme, re.S)
    assert block is not None
    command = block.group(1).strip()
    assert "lint-imports" in command and "ruff check" in command and "mypy gputrain" in command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
