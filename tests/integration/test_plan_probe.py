"""``gputrain plan --probe --steps N`` runs N real steps here (a local job: torchrun, 2 gloo ranks) and plans
from them: the plan that follows is calibrated by exactly that job's measurement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "gnn_coloring.yaml")
SETS = ["--set", "algorithm.onnx_export=false", "--set", "algorithm.search_moves=50",
        "--set", "algorithm.eval_graphs=8", "--set", "train.log_every=1"]


def _gputrain(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if (shutil.which("torchrun") is None or shutil.which("bash") is None) and os.environ.get("CI") != "true":
        pytest.skip("torchrun/bash not available")
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp / "home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "gputrain.cli.main", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=900)


def test_probe_runs_n_real_steps_and_the_plan_uses_them(tmp_path: Path) -> None:
    proc = _gputrain(tmp_path, "plan", RECIPE, "--gpu", "cpu", "--gpus", "2", *SETS, "--probe", "--steps", "5",
                     "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "probe: job" in proc.stderr
    plan = json.loads(proc.stdout)
    jobs = list((tmp_path / "logs").iterdir())
    assert len(jobs) == 1  # the probe's own job folder, nothing else ran
    job_dir = jobs[0]
    steps = [json.loads(line)["step"] for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 5  # --steps 5 real optimizer steps, not the recipe's 8 epochs
    perf = json.loads((job_dir / "perf.json").read_text())
    assert perf["step_seconds"] > 0 and perf["world_size"] == 2

    cal = plan["estimate"]["calibration"]
    assert cal is not None and cal["match"] == "exact" and cal["job_dir"].endswith(job_dir.name)
    assert plan["estimate"]["step_seconds"] == pytest.approx(perf["step_seconds"])
    # the probe's shortened run does not shorten the plan: it still plans the recipe's whole run
    assert plan["recipe"]["train"]["max_steps"] is None and plan["estimate"]["total_steps"] == 8 * 12


def test_probe_of_another_gpu_type_is_a_one_line_error(tmp_path: Path) -> None:
    proc = _gputrain(tmp_path, "plan", RECIPE, "--gpu", "H100", "--gpus", "2", "--probe", "--steps", "3")
    assert proc.returncode == 2
    assert "--probe runs here, on cpu" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists()
