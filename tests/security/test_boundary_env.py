"""#25.9 — a recipe is data: its ``env`` may not run a command or weaken the sandbox.

The attack: a shared recipe sets ``BASH_ENV`` (each ``bash -c`` of a multi-node Slurm job runs that file),
``LD_PRELOAD``/``PYTHONPATH``/``PATH`` (choose the code every process runs) or gputrain's own
``GPUTRAIN_SANDBOX_DISABLE`` (scores model-written code without isolation). Each must be refused with one
line naming the key where it was written (file:line), exit 2 — in the recipe, through ``--set env.X=...``
and through a profile's ``set:``. What shipped recipes and the log doctor's remedies set stays allowed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputrain.doctor import prescribe, rerun_command
from gputrain.errors import RecipeError
from gputrain.planner import make_plan
from gputrain.recipe.env_policy import env_name_allowed
from gputrain.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
SELFTEST = RECIPES / "selftest.yaml"
CLI = [sys.executable, "-m", "gputrain.cli.main"]

HOSTILE = ["BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
           "PATH", "PROMPT_COMMAND", "SHELLOPTS", "GPUTRAIN_SANDBOX_DISABLE", "GPUTRAIN_SANDBOX_ALLOW_WEAK",
           "GPUTRAIN_CHECKPOINT_STAGE", "HF_ALLOW_CODE_EVAL", "HF_DATASETS_TRUST_REMOTE_CODE", "PYTHONWARNINGS",
           "PYTHONBREAKPOINT", "IFS"]


def _recipe_with_env(tmp_path: Path, env: dict[str, str]) -> Path:
    text = SELFTEST.read_text(encoding="utf-8")
    text += "\n" + yaml.safe_dump({"env": env})
    path = tmp_path / "hostile.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _line_of(path: Path, key: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip().startswith(f"{key}:"))


@pytest.mark.parametrize("name", HOSTILE)
def test_a_recipe_cannot_set_a_variable_that_runs_code(tmp_path: Path, name: str) -> None:
    path = _recipe_with_env(tmp_path, {"NCCL_DEBUG": "WARN", name: "/tmp/evil"})
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "\n" not in message and name in message
    assert message.startswith(f"{path}:{_line_of(path, name)}:"), message  # file:line of the key itself


def test_bash_env_in_a_multi_node_recipe_is_refused_by_the_cli_before_any_script(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"touch {marker}\n")
    path = _recipe_with_env(tmp_path, {"BASH_ENV": str(hook)})
    proc = subprocess.run([*CLI, "submit", str(path), "--cluster", "testbed", "--gpus", "2", "--nodes", "2",
                           "--dry-run", "--logs-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "BASH_ENV" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").rglob("*.sbatch"))
    assert not marker.exists()


def test_set_override_cannot_switch_the_sandbox_off(tmp_path: Path) -> None:
    proc = subprocess.run([*CLI, "plan", str(SELFTEST), "--gpu", "cpu", "--gpus", "2",
                           "--set", "env.GPUTRAIN_SANDBOX_DISABLE=all"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "GPUTRAIN_SANDBOX_DISABLE" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_profile_cannot_set_ld_preload(tmp_path: Path) -> None:
    data = yaml.safe_load(SELFTEST.read_text())
    data["profiles"]["cpu"]["set"]["env"] = {"LD_PRELOAD": "/tmp/x.so"}
    path = tmp_path / "profiled.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="LD_PRELOAD"):
        make_plan(path, gpu="cpu", gpus_per_node=2, check_memory=False)


def _env_blocks(data: Any) -> list[dict[str, Any]]:
    out = [data.get("env") or {}]
    for profile in (data.get("profiles") or {}).values():
        out.append(((profile or {}).get("set") or {}).get("env") or {})
    return out


def test_every_shipped_recipe_sets_only_allowed_variables() -> None:
    seen = set()
    for path in sorted(RECIPES.glob("*.yaml")):
        for block in _env_blocks(yaml.safe_load(path.read_text())):
            for name in block:
                assert env_name_allowed(name), f"{path.name} sets {name}"
                seen.add(name)
        load_recipe(path)  # and the loader agrees
    assert seen, "no shipped recipe sets env: the check would prove nothing"


_ASSIGN = re.compile(r"\b([A-Z][A-Z0-9_]{2,})=")
CAUSES = ["cuda_oom", "time_limit", "host_oom", "nccl_timeout", "nccl", "node_fail", "preempted", "python"]


def test_every_doctor_remedy_sets_only_allowed_variables() -> None:
    plan = make_plan(SELFTEST, gpu="cpu", gpus_per_node=2, check_memory=False)
    names: set[str] = set()
    for kind in CAUSES:
        summary = {"name": "j", "root_cause": {"kind": kind, "label": kind, "rank": 0, "host": "n1",
                                               "details": {"collective": "ALLREDUCE"}},
                   "steps": {"done": 10, "planned": 100}, "steps_per_hour": 60.0, "duration_s": 600}
        for job_plan in (None, plan):
            remedy = prescribe(summary, job_plan)
            assert remedy is not None
            names |= {o.split("=", 1)[0][4:] for o in remedy.overrides if o.startswith("env.")}
            names |= set(_ASSIGN.findall(remedy.text))
            names |= set(_ASSIGN.findall(rerun_command(plan, remedy, "local-1")))
    assert {"NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG"} <= names  # the --debug remedy was among them
    refused = sorted(n for n in names if not env_name_allowed(n))
    assert not refused, f"remedies set variables a recipe may not: {refused}"
