"""#26 on the real Slurm testbed: a submission that fails after ``sbatch`` leaves nothing in the queue.

The fault is the home disk filling (``RLIMIT_FSIZE`` on the CLI: the job registry cannot grow past its first
page, as on a full disk or quota; root is not exempt): the held jobs are in Slurm's queue when the registry
refuses them. The unit tests (tests/unit/test_submit_all_or_nothing.py) cover every fault with a stand-in
Slurm; this one proves the real ``scancel`` of held jobs and the real ``scontrol release`` of a job list.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_slurm_testbed import RECIPE, testbed  # noqa: F401  (the fixture)
from tests.support.cli import gputrain as run_gputrain

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def gt(home: Path, *args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(home / "home"), "GPUTRAIN_CONFIG": str(home / "clusters.yaml")}
    limits = {"RLIMIT_FSIZE": fsize} if fsize is not None else None
    return run_gputrain(*args, cwd=home, env=env, timeout=180, rlimits=limits)


def job_line(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout


def test_a_registry_that_cannot_record_cancels_the_held_jobs_in_the_real_queue(
        testbed: None, tmp_path: Path) -> None:  # noqa: F811
    sweep = ("submit", str(RECIPE), "--cluster", "testbed", "--gpu", "cpu", "--gpus", "1", "--no-array",
             "--begin", "now+1hours", "--sweep", "train.seed=1,2")
    failed = gt(tmp_path, *sweep, fsize=9000)
    errors = [ln for ln in failed.stderr.splitlines() if ln.startswith("error:")]
    assert failed.returncode == 1 and len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    held = re.search(r"cancelled the held job\(s\) (\d+), (\d+) before any started", errors[0])
    assert held and "job registry error" in errors[0], errors[0]
    for job_id in held.groups():
        assert "JobState=CANCELLED" in job_line(job_id) and "RunTime=00:00:00" in job_line(job_id)
    assert not (tmp_path / "logs").exists() or list((tmp_path / "logs").iterdir()) == []

    ok = gt(tmp_path, *sweep, "--json")  # the same submission with room: both released with one scontrol
    assert ok.returncode == 0, ok.stderr
    ids = [row["job_id"] for row in json.loads(ok.stdout)]
    try:
        for job_id in ids:  # released (a held job has priority 0 and reason JobHeldUser), waiting for --begin
            line = job_line(job_id)
            assert "JobState=PENDING" in line and " Priority=0 " not in line and "JobHeldUser" not in line, line
        listed = json.loads(gt(tmp_path, "jobs", "--json", "--no-refresh").stdout)
        assert sorted(r["job_id"] for r in listed) == sorted(ids)  # none of the failed attempt's rows
    finally:
        subprocess.run(["scancel", *ids], capture_output=True)
