"""Run a math RL entrypoint (grpo_math, gdpo) for real: the planner's cpu plan, torchrun, 2 gloo ranks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_recipe(job: Path, recipe: str, overrides: list[str], timeout: int = 300) -> tuple[int, str]:
    """Plan ``recipes/<recipe>`` for ``--gpu cpu --gpus 2`` with ``overrides``, run it, return (rc, log)."""
    if shutil.which("torchrun") is None and os.environ.get("CI") != "true":
        pytest.skip("torchrun not installed")
    from gputrain.planner.resolve import make_plan

    plan = make_plan(REPO / "recipes" / recipe, gpu="cpu", gpus_per_node=2, overrides=overrides)
    job.mkdir(parents=True, exist_ok=True)
    (job / "plan.json").write_text(plan.to_json())
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", "127.0.0.1:0", "-m", plan.module, "--plan", str(job / "plan.json"), "--job-dir", str(job),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "GPUTRAIN_JOB_DIR": str(job)}
    with open(job / "training_output.log", "w") as log:
        # Own process group: on a timeout the workers go too, not only torchrun.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -1
    return rc, (job / "training_output.log").read_text()


def metric_series(job: Path, key: str) -> list[float]:
    out: dict[int, float] = {}
    for line in (job / "metrics.jsonl").read_text().splitlines():
        rec: dict[str, Any] = json.loads(line)
        if key in rec:
            out[int(rec["step"])] = float(rec[key])
    return [out[s] for s in sorted(out)]


def first_last(values: list[float], n: int = 10) -> tuple[float, float]:
    return sum(values[:n]) / n, sum(values[-n:]) / n
