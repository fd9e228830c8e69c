"""Trainings that several integration tests read, each run once per worker (#26).

``gnn_cpu_run`` is ``gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2`` (the shipped ``cpu``
profile, real torchrun, 2 gloo ranks), with ``gputrain plan`` of the same command taken just before it: the
GNN end-to-end test reads what the run wrote, the calibration test how the plan changes once the run is
measured. Both modules are one serial group (``tests/conftest.py``), so under xdist they share one run;
before, the calibration test trained a run of its own (~40 CPU-s). Tests only read the run's files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GNN_RECIPE = str(REPO / "recipes" / "gnn_coloring.yaml")

#: The GNN recipe's ``cpu`` profile made small (#26), for the tests about where it runs (a pod, two Slurm nodes)
#: rather than what it learns (``test_gnn_run.py`` holds the whole profile to that): one epoch of 64 graphs, a
#: short report and a small ONNX check still train, export ``model.onnx`` and write ``metrics.jsonl``.
SMALL_GNN_TRAINING = ("train.epochs=1", "data.train_size=64", "data.val_size=16", "algorithm.eval_graphs=8",
                      "algorithm.benchmarks=[myciel3]", "algorithm.search_moves=200",
                      "algorithm.onnx_check_nodes=500", "algorithm.onnx_check_runs=2")


def gputrain(tmp: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``gputrain ARGS`` in ``tmp`` with ``tmp/home`` as the registry home."""
    if (shutil.which("torchrun") is None or shutil.which("bash") is None) and os.environ.get("CI") != "true":
        pytest.skip("torchrun/bash not available")
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp / "home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "gputrain.cli.main", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class GnnRun:
    tmp: Path  # cwd and registry home (tmp/home) of the run
    proc: subprocess.CompletedProcess[str]
    plan_before: dict[str, Any]  # `gputrain plan --json` of the same command, before the run


@pytest.fixture(scope="session")
def gnn_cpu_run(tmp_path_factory: pytest.TempPathFactory) -> GnnRun:
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("gnn-cpu-run")
    plan = gputrain(tmp, "plan", GNN_RECIPE, "--gpu", "cpu", "--gpus", "2", "--json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    proc = gputrain(tmp, "run", GNN_RECIPE, "--gpu", "cpu", "--gpus", "2", "--logs-dir", str(tmp / "logs"))
    return GnnRun(tmp, proc, json.loads(plan.stdout))
