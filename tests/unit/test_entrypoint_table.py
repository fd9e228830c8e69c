"""One entrypoint table (``gputrain.recipe.entrypoints.ENTRYPOINTS``): every training module has a complete row,
nothing outside ``gputrain/train/`` compares entrypoint names, and a new entrypoint is one row plus its module."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from gputrain.recipe.entrypoints import ENTRYPOINTS, WORKLOADS, Entrypoint
from gputrain.recipe.schema import algorithm_model
from tests.conftest import RECIPES

PACKAGE = Path(__file__).resolve().parents[2] / "gputrain"
_NAMES = "|".join(map(re.escape, ENTRYPOINTS))


def _entrypoint_modules() -> set[str]:
    """Modules under gputrain/train/ that a launcher runs (they call run_entrypoint)."""
    found = set()
    for path in (PACKAGE / "train").rglob("*.py"):
        if "runtime" in path.parts or "run_entrypoint(main" not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return found


def test_every_training_module_has_a_complete_row() -> None:
    rows = {row.module: name for name, row in ENTRYPOINTS.items()}
    missing = _entrypoint_modules() - set(rows)
    assert not missing, f"entrypoint modules without a row in ENTRYPOINTS: {sorted(missing)}"
    for name, row in ENTRYPOINTS.items():
        assert importlib.util.find_spec(row.module) is not None, name
        assert algorithm_model(name).__name__ == row.algorithm.rpartition(":")[2]
        assert row.workload in WORKLOADS and row.packages and row.description, name
        assert row.data_split in ("train", "test", "validation"), name
    used = {json.dumps(p.read_text().split("entrypoint:")[1].split()[0]) for p in RECIPES.glob("*.yaml")}
    assert {json.loads(u) for u in used} <= set(ENTRYPOINTS)


def test_no_entrypoint_name_is_compared_outside_the_trainings() -> None:
    """The planner, offline checks, render, logs and CLI read a row's fields, never ``== "hdp"``."""
    compare = re.compile(rf"""(==|!=|\bin)\s*\(?["'](?:{_NAMES})["']|["'](?:{_NAMES})["']\s*:""")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "train" or rel == Path("recipe/entrypoints.py"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if compare.search(line) and "StepModel(" not in line and "workload_dense" not in line:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


TOY_RECIPE = """\
name: toy
entrypoint: toy
model: {name: none}
train: {batch_size: 1, max_steps: 2, learning_rate: 1.0e-3}
resources: {gpus: 1, nodes: 1, time: "00:05:00", memory_gb: 1, cpus_per_gpu: 1}
"""


def test_a_new_entrypoint_is_one_row_and_its_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy row pointing at an existing module and algorithm model plans, renders and is checked offline
    with no other edit: every consumer reads the row."""
    from gputrain.offline.needs import hub_items
    from gputrain.planner import make_plan
    from gputrain.render import render_artifacts

    row = Entrypoint("gputrain.train.selftest", "gputrain.recipe.algorithms.selftest:SelftestAlgorithm",
                     "a toy", workload="supervised", packages=("torch",))
    monkeypatch.setitem(ENTRYPOINTS, "toy", row)
    (tmp_path / "toy.yaml").write_text(TOY_RECIPE)
    plan = make_plan(tmp_path / "toy.yaml", gpu="cpu", gpus_per_node=1, nodes=1, target="local")
    assert plan.module == "gputrain.train.selftest" and plan.recipe.entrypoint == "toy"
    assert "-m gputrain.train.selftest" in render_artifacts(plan, target="local")["launch.sh"]
    assert hub_items(plan) == []
    assert plan.estimate.workload == "supervised"  # the planner chose its model from the row

