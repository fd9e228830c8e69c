"""``gputrain run --resume-from JOB``: the rerun the failure doctor prints really continues the old job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "gputrain", "run", "selftest", "--gpu", "cpu", "--gpus", "1",
                           "--logs-dir", str(tmp_path / "logs"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_rerun_resumes_from_the_old_jobs_newest_checkpoint(tmp_path: Path) -> None:
    first = _run(tmp_path, "--set", "train.max_steps=3")
    assert first.returncode == 0, first.stderr
    second = _run(tmp_path, "--set", "train.max_steps=5", "--resume-from", "local-1")
    assert second.returncode == 0, second.stderr
    assert "resuming from step_00000003" in second.stdout
    results = {p.parent.name.split("_job_")[1].split("_")[0]: json.loads(p.read_text())
               for p in (tmp_path / "logs").glob("*/result.json")}
    assert results["local-2"]["resumed_from_step"] == 3 and results["local-2"]["steps_this_run"] == 2
    old = next((tmp_path / "logs").glob("*local-1*/checkpoints/step_00000003"))
    assert (old / "meta.json").is_file(), "the old job's checkpoint must stay where it was"
