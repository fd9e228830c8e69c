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


#: (module, bad import appended inside a function, the import as lint-imports reports it, the contract it breaks)
BAD_IMPORTS = [
    ("registry/store.py", "from gputrain.cli import app", "gputrain.registry.store -> gputrain.cli", "Layers"),
    ("render/render.py", "import gputrain.backends.slurm", "gputrain.render.render -> gputrain.backends", "Layers"),
    ("recipe/schema.py", "import gputrain.hardware.catalog", "gputrain.recipe.schema -> gputrain.hardware",
     "Layers"),
    ("logs/parse.py", "import gputrain.train.selftest", "gputrain.logs.parse -> gputrain.train",
     "train/ is an island"),
    ("train/selftest.py", "import gputrain.planner", "gputrain.train.selftest -> gputrain.planner",
     "train/ imports only the leaves"),
    ("planner/estimate.py", "import torch", "gputrain.planner.estimate -> torch", "Training libraries only in train/"),
    ("hardware/detect.py", "import httpx", "gputrain.hardware.detect -> httpx", "Leaves use no CLI"),
    ("backends/local.py", "import gputrain.hardware.catalog", "gputrain.backends.local -> gputrain.hardware",
     "backends import render"),
    ("render/render.py", "import gputrain.registry.store", "gputrain.render.render -> gputrain.registry",
     "render imports the planner"),
    ("planner/workload.py", "from gputrain.planner import workload_rl",
     "gputrain.planner.workload -> gputrain.planner.workload_rl", "planner step-time models import one way"),
]


def test_a_bad_import_even_inside_a_function_breaks_its_contract(tree: Path) -> None:
    """Every bad import in one copy of the tree and one lint-imports run (each run costs seconds): each
    contract must be reported broken, and by the very import added for it."""
    for n, (module, code, _, _) in enumerate(BAD_IMPORTS):
        _append(tree / "gputrain" / module, f"def _bad_{n}():\n    {code}  # noqa\n")
    proc = lint_imports(tree)
    assert proc.returncode != 0, proc.stdout
    broken = [line for line in proc.stdout.splitlines() if re.search(r" BROKEN( \(.*\))?$", line)]
    flat = re.sub(r"\s+", " ", proc.stdout)
    for module, _, reported, contract in BAD_IMPORTS:
        assert any(line.startswith(contract) for line in broken), (contract, proc.stdout)
        assert re.search(re.escape(reported) + r"[\w.]* \(l\.\d+", flat), (module, reported, proc.stdout)


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
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
    script = (ROOT / command).read_text() if command.startswith("scripts/") else command
    for step in ("ruff check gputrain tests", "lint-imports", "vulture", "mypy gputrain",
                 "pytest -n 4 --dist loadgroup"):
        assert step in script, step
