"""The CLI as a user meets it: one-line errors, JSON contract, --out files, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.contract.plan import load_job_plan
from tests.conftest import DATA, RECIPES
from tests.support.cli import gputrain as run_gputrain

R = DATA / "recipes"
HEAVY = ("torch", "transformers", "trl", "httpx", "matplotlib", "networkx", "onnx")


def gputrain(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_gputrain(*args, cwd=cwd, timeout=None)


@pytest.mark.parametrize("argv", [["--help"], ["plan", str(RECIPES / "selftest.yaml"), "--gpu", "H100", "--json"],
                                  ["validate", str(RECIPES / "grpo_math_fsdp.yaml")], ["recipes"]])
def test_cli_start_up_imports_nothing_heavy(argv: list[str]) -> None:
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['gputrain', *{argv!r}]\n"
        "try:\n    runpy.run_module('gputrain.cli.main', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY=\n" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("bad_yaml.yaml", "invalid YAML"), ("bad_type.yaml", "train.batch_size"),
     ("unknown_key.yaml", "did you mean"), ("missing.yaml", "missing required field"),
     ("negative_gpus.yaml", "resources.gpus")],
)
def test_malformed_recipes_get_one_line_and_exit_2(name: str, fragment: str) -> None:
    for command in (["validate"], ["plan"]):
        proc = gputrain(*command, str(R / name), *(["--gpu", "cpu"] if command == ["plan"] else []))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {R / name}:"), proc.stderr
        assert fragment in lines[0]
        assert "Traceback" not in proc.stderr


def test_unknown_gpu_and_negative_flag() -> None:
    proc = gputrain("plan", str(RECIPES / "selftest.yaml"), "--gpu", "Z9999")
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown GPU type 'Z9999'; known:")
    proc = gputrain("plan", str(RECIPES / "selftest.yaml"), "--gpu", "cpu", "--gpus", "-2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_plan_json_contract_and_provenance() -> None:
    proc = gputrain("plan", str(RECIPES / "bd3lm_gsm8k.yaml"), "--gpu", "H200", "--gpus", "1",
                    "--set", "train.batch_size=192", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["gpu"]["name"] == "H200-141GB" and data["precision"] == "bf16"
    assert data["global_batch_size"] == 192 * 4
    assert data["provenance"]["train.batch_size"] == "--set"
    assert data["provenance"]["train.grad_accum"] == "profile:H200-141GB"
    assert set(data["estimate"]) >= {"memory_gib_per_gpu", "step_seconds", "total_hours", "cost_usd"}
    assert "launch.sh" in data["artifacts"] and data["artifacts"]["launch.sh"].startswith("#!/usr/bin/env bash")


def test_plan_out_writes_scripts_plan_and_resolved_recipe(tmp_path: Path) -> None:
    out = tmp_path / "build"
    proc = gputrain("plan", str(RECIPES / "selftest.yaml"), "--gpu", "cpu", "--gpus", "2", "--out", str(out),
                    "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert Path(data["artifacts"]["launch.sh"]).is_file()
    saved = load_job_plan(out / "plan.json")
    assert saved.recipe.resources.gpus == 2 and saved.artifacts["plan.json"] == str(out / "plan.json")
    assert (out / "recipe.resolved.yaml").read_text().startswith("name: selftest")
    assert (out / "launch.sh").stat().st_mode & 0o111
    assert not list(out.glob(".*")), "temporary files left behind"


def test_plan_text_shows_sources_estimates_and_script() -> None:
    proc = gputrain("plan", str(RECIPES / "bd3lm_gsm8k.yaml"), "--gpu", "H200")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "preset:recommended" in out and "sqrt scaling" in out and "source table" in out
    assert "memory per GPU" in out and "cost" in out
    assert "# ---- launch.sh ----" in out


def test_compare_lists_gpu_types() -> None:
    proc = gputrain("plan", str(RECIPES / "gdpo_deepscaler.yaml"), "--gpu", "B200", "--gpus", "4", "--compare",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert rows[0]["gpu"] == "B200-192GB"
    by_gpu = {r["gpu"]: r for r in rows if r["where"] == "cloud"}
    assert by_gpu["V100-32GB"]["precision"] == "fp16" and by_gpu["H100-80GB"]["precision"] == "bf16"
    assert by_gpu["V100-16GB"]["fits"] is False
    assert by_gpu["RTX-4090"]["work_per_step"] == by_gpu["B200-192GB"]["work_per_step"] == "1024×8"  # like for like


def test_schema_is_json_schema() -> None:
    proc = gputrain("schema")
    doc = json.loads(proc.stdout)
    assert doc["title"] == "gputrain recipe"
    assert "train" in doc["properties"] and doc["additionalProperties"] is False
    algorithm = {ref["$ref"].rsplit("/", 1)[-1] for ref in doc["properties"]["algorithm"]["anyOf"]}
    assert algorithm == {"SelftestAlgorithm", "GNNColoringAlgorithm", "DiffusionAlgorithm", "GRPOAlgorithm",
                         "GDPOAlgorithm"}  # gdpo: GRPO's settings with its aggregation fixed (issue 29)


def test_schema_plan_is_the_plan_json_schema(tmp_path: Path) -> None:
    proc = gputrain("schema", "--plan")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["title"].startswith("gputrain plan (schema version")
    assert {"schema_version", "recipe", "gpu", "world_size", "estimate"} <= set(doc["properties"])
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "build"
    assert gputrain("plan", str(RECIPES / "selftest.yaml"), "--gpu", "cpu", "--out", str(out)).returncode == 0
    jsonschema.validate(json.loads((out / "plan.json").read_text()), doc)  # plan.json is what the schema says


def test_recipes_lists_the_bundled_ones() -> None:
    proc = gputrain("recipes")
    names = {line.split()[0] for line in proc.stdout.splitlines()}
    assert {"gdpo_deepscaler", "bd3lm_gsm8k", "hdp_diffusion", "grpo_code_mbpp", "grpo_math_fsdp",
            "gnn_coloring"} <= names


def test_gpus_on_a_machine_without_gpus_says_none() -> None:
    proc = gputrain("gpus")
    assert proc.returncode == 0
    assert proc.stdout.startswith("none") or "canonical" in proc.stdout.lower()
