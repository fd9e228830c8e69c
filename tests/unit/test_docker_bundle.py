"""``gputrain docker``: the image files for a recipe — right base image for the GPU, lint-clean (hadolint,
shellcheck), recipe values inert in the scripts, files written whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gputrain.backends.runpod.bundle import image_cuda, render_bundle
from gputrain.cli.runpod import register
from gputrain.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]
# The GNN recipe is the guide's; until its entrypoint is installed the selftest recipe stands in.
GNN = ROOT / "recipes" / (
    "gnn_coloring.yaml" if (ROOT / "gputrain" / "recipe" / "algorithms" / "gnn_coloring.py").exists()
    else "selftest.yaml"
)
SCRIPTS = ("build_and_push.sh", "run.sh", "run_multigpu.sh")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} missing (pip install {name}-py)")
        pytest.skip(f"{name} missing")
    return path


@pytest.fixture(scope="module")
def b200():
    return render_bundle(make_plan(GNN, gpu="B200", gpus_per_node=8, target="docker"))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


@pytest.mark.parametrize("gpu,min_cuda,min_torch", [("B200", "12.8", "2.7"), ("H100", "12.4", "2.4")])
def test_base_image_supports_the_gpu(gpu, min_cuda, min_torch):
    files = render_bundle(make_plan(GNN, gpu=gpu, gpus_per_node=1, target="docker"))
    match = re.search(r"^FROM pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn\d+-runtime$",
                      files["Dockerfile"], re.MULTILINE)
    assert match, files["Dockerfile"]
    torch, cuda = match.groups()
    assert _version(cuda) >= _version(min_cuda) and _version(torch) >= _version(min_torch)
    assert image_cuda(files["Dockerfile"]) == cuda


def test_b200_meets_the_issue_floor(b200):
    torch, cuda = re.search(r"pytorch:(\S+)-cuda(\S+)-cudnn", b200["Dockerfile"]).groups()
    assert _version(cuda) >= (12, 4) and _version(torch) >= (2, 4)


def test_dockerfile_passes_hadolint(b200, tmp_path):
    hadolint = _tool("hadolint")
    (tmp_path / "Dockerfile").write_text(b200["Dockerfile"])
    proc = subprocess.run([hadolint, str(tmp_path / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_pass_shellcheck(b200, tmp_path, script):
    shellcheck = _tool("shellcheck")
    (tmp_path / script).write_text(b200[script])
    argv = [shellcheck, "--severity=info", str(tmp_path / script)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_entry_script_installs_key_and_starts_sshd(b200):
    run = b200["run.sh"]
    assert "PUBLIC_KEY" in run and "/usr/sbin/sshd" in run and "unset PUBLIC_KEY" in run
    assert "EXPOSE 22" in b200["Dockerfile"] and 'ENTRYPOINT ["/opt/gputrain/run.sh"]' in b200["Dockerfile"]


def test_launcher_runs_one_process_per_gpu_of_the_plan(b200):
    text = b200["run_multigpu.sh"]
    module = json.loads(b200["plan.json"])["module"]
    assert "--nproc_per_node=8" in text and f"-m {module} " in text
    assert json.loads(b200["plan.json"])["gpus_per_node"] == 8


def test_hostile_recipe_env_stays_a_literal(tmp_path):
    shellcheck = _tool("shellcheck")
    marker = tmp_path / "pwned"
    plan = make_plan(GNN, gpu="B200", gpus_per_node=8, target="docker",
                     overrides=[f"env.RECIPE_NOTE=x'; touch {marker}; echo '$(touch {marker})"])
    text = render_bundle(plan)["run_multigpu.sh"]
    line = next(x for x in text.splitlines() if x.startswith("export RECIPE_NOTE="))
    out = subprocess.run(["bash", "-c", f"{line}; printf %s \"$RECIPE_NOTE\""], capture_output=True, text=True)
    assert out.stdout == f"x'; touch {marker}; echo '$(touch {marker})"
    assert not marker.exists()
    (tmp_path / "run_multigpu.sh").write_text(text)
    assert subprocess.run([shellcheck, str(tmp_path / "run_multigpu.sh")]).returncode == 0


def test_secrets_appear_by_name_only(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-canary-77")
    plan = make_plan(GNN, gpu="B200", gpus_per_node=8, target="docker", overrides=["secrets=[WANDB_API_KEY]"])
    files = render_bundle(plan)
    assert all("wandb-canary-77" not in text for text in files.values())
    assert "${WANDB_API_KEY:-}" in files["run_multigpu.sh"]


def test_docker_command_writes_the_build_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_docker_canary_31337")
    root = typer.Typer()
    root.command("noop")(lambda: None)
    register(root)
    out = tmp_path / "build"
    result = CliRunner().invoke(root, ["docker", str(GNN), "--gpu", "B200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("Dockerfile", "plan.json", *SCRIPTS):
        assert (out / name).is_file()
    for name in SCRIPTS:
        assert (out / name).stat().st_mode & stat.S_IXUSR
    assert (out / "gputrain" / "train" / "__init__.py").is_file()
    assert not list(out.rglob("__pycache__")) and not list(out.glob(".*"))
    assert json.loads((out / "plan.json").read_text())["gpu"]["name"] == "B200-192GB"
    for path in out.rglob("*"):
        assert not path.is_file() or b"rpa_docker_canary_31337" not in path.read_bytes()


def test_docker_command_bad_gpu_writes_nothing(tmp_path):
    root = typer.Typer()
    root.command("noop")(lambda: None)
    register(root)
    out = tmp_path / "build"
    result = CliRunner().invoke(root, ["docker", str(GNN), "--gpu", "Z9000", "--out", str(out)])
    assert result.exit_code != 0
    assert not out.exists()
