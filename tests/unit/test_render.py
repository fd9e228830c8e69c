"""Rendering is shell-safe: hostile recipe values stay data, scripts pass bash -n and shellcheck."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.errors import RenderError
from gputrain.planner import make_plan
from gputrain.render import raw, render_artifacts, shq
from tests.conftest import DATA, RECIPES, require_tool

HOSTILE = DATA / "recipes" / "hostile.yaml"
PWNED = Path("/tmp/gputrain-pwned")


def _shellcheck(path: Path) -> None:
    exe = require_tool("shellcheck")
    proc = subprocess.run([exe, "-S", "warning", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_finalize_quotes_everything_by_default() -> None:
    assert shq("a b") == "'a b'"
    assert shq(["x", "y z"]) == "x 'y z'"
    with pytest.raises(RenderError):
        raw("$(reboot)")
    with pytest.raises(RenderError):
        raw(["list"])


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_local_launcher_for_every_recipe_passes_bash_n_and_shellcheck(recipe: Path, tmp_path: Path) -> None:
    plan = make_plan(recipe, gpu="cpu", gpus_per_node=2)
    script = tmp_path / "launch.sh"
    script.write_text(render_artifacts(plan)["launch.sh"])
    subprocess.run(["bash", "-n", str(script)], check=True)
    _shellcheck(script)


def test_hostile_values_never_run(tmp_path: Path) -> None:
    PWNED.unlink(missing_ok=True)
    plan = make_plan(HOSTILE, gpu="cpu", gpus_per_node=1)
    job = tmp_path / "job"
    job.mkdir()
    script = job / "launch.sh"
    script.write_text(render_artifacts(plan)["launch.sh"])
    _shellcheck(script)
    # A stand-in interpreter records the environment the launcher built instead of running torchrun.
    fake = tmp_path / "fake-python"
    seen_path = str(job / "seen.json")
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'env': dict(os.environ), 'argv': sys.argv}}, open({seen_path!r}, 'w'))\n")
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "PYTHON": str(fake), "GPUTRAIN_JOB_DIR": str(job)}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not PWNED.exists(), "a recipe value ran a shell command"
    seen = json.loads((job / "seen.json").read_text())
    assert seen["env"]["RECIPE_EVIL"] == plan.recipe.env["RECIPE_EVIL"]
    assert "warning: secret WANDB_API_KEY is not set" in proc.stderr
    assert seen["argv"][-4:] == ["--plan", f"{job}/plan.json", "--job-dir", str(job)]


def test_secret_values_never_reach_rendered_files(monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "canary-secret-7f3a9c"
    monkeypatch.setenv("WANDB_API_KEY", canary)
    plan = make_plan(HOSTILE, gpu="cpu", gpus_per_node=1)
    for text in render_artifacts(plan).values():
        assert canary not in text
        assert "WANDB_API_KEY" in text  # referenced by name only
    assert canary not in plan.to_json()


def test_multi_node_launcher_uses_c10d(tmp_path: Path) -> None:
    plan = make_plan(RECIPES / "selftest.yaml", gpu="cpu", gpus_per_node=2, nodes=2)
    text = render_artifacts(plan)["launch.sh"]
    assert 'NNODES="${NNODES:-2}"' in text
    assert "--rdzv_backend=c10d" in text
    assert "--nproc_per_node=2" in text


def test_supercloud_sbatch_renders_fp16_volta_job(tmp_path: Path) -> None:
    plan = make_plan(RECIPES / "grpo_code_mbpp.yaml", cluster="supercloud")
    text = render_artifacts(plan)["job.sbatch"]
    assert "#SBATCH --gres=gpu:volta:2" in text
    assert "module load" in text  # set-up lines are commands, emitted verbatim
    assert "-m gputrain.train.grpo_code" in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    _shellcheck(script)
    assert plan.recipe.train.precision == "fp16"


def test_set_up_lines_cannot_smuggle_extra_lines() -> None:
    from gputrain.render.render import shell_line

    assert shell_line("module load cuda/12.4") == "module load cuda/12.4"
    with pytest.raises(RenderError):
        shell_line("module load x\nrm -rf /")
