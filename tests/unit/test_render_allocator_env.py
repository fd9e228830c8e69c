"""GPU launchers start training with the CUDA allocator's expandable segments (#27); CPU ones do not; a
recipe's own allocator setting wins. Checked by running the rendered launch.sh with a stand-in interpreter
that records the environment it was started with (the sbatch text: its golden files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gputrain.planner import make_plan
from gputrain.render import render_artifacts
from tests.conftest import RECIPES


def _launch_env(tmp_path: Path, recipe: Path, **kw: object) -> dict[str, str]:
    plan = make_plan(recipe, **kw)  # type: ignore[arg-type]
    script = tmp_path / "launch.sh"
    script.write_text(render_artifacts(plan)["launch.sh"])
    fake, seen = tmp_path / "fake-python", tmp_path / "seen.json"
    fake.write_text(f"#!{sys.executable}\nimport json, os\njson.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n")
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "PYTHON": str(fake), "GPUTRAIN_JOB_DIR": str(tmp_path)}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=60)
    out: dict[str, str] = json.loads(seen.read_text())
    return out


def test_gpu_launcher_exports_expandable_segments(tmp_path: Path) -> None:
    env = _launch_env(tmp_path, RECIPES / "bd3lm_gsm8k.yaml", gpu="H100", gpus_per_node=1, check_memory=False)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_cpu_launcher_leaves_the_allocator_alone(tmp_path: Path) -> None:
    env = _launch_env(tmp_path, RECIPES / "selftest.yaml", gpu="cpu", gpus_per_node=1)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env


@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_recipe_allocator_setting_wins(tmp_path: Path, name: str) -> None:
    recipe = tmp_path / "own.yaml"
    text = (RECIPES / "bd3lm_gsm8k.yaml").read_text() + yaml.safe_dump({"env": {name: "max_split_size_mb:512"}})
    recipe.write_text(text)
    env = _launch_env(tmp_path, recipe, gpu="H100", gpus_per_node=1, check_memory=False)
    assert env[name] == "max_split_size_mb:512"
    assert "expandable_segments:True" not in env.values()
