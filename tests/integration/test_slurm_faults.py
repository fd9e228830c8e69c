"""Slurm faults from the field (#30 points 15, 16, 17) on the real 2-node testbed.

- a job Slurm accepts but can never run (``sbatch_extra: --mem=900G``; more nodes than the partition has)
  is refused before submission with Slurm's own reason (``sbatch --test-only``), exit 2, nothing queued or
  registered;
- with the controller unreachable (this process's ``SLURM_CONF`` points at a port nothing listens on, so the
  shared testbed is not stopped), ``logs`` of a job the registry still calls PENDING shows the job's output
  instead of "PENDING: no output yet";
- a node that fails under a running job (``scontrol update nodename=<its node> state=down reason=...``; the
  testbed's ``ReturnToService=2`` brings it back at once, and the test resumes it in any case): ``status``
  names NODE_FAIL and the node, not only REQUEUED/BeginTime.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.test_slurm_testbed import RECIPE, gt, testbed, workdir  # noqa: F401

pytestmark = pytest.mark.integration

PROFILES = """
tb_huge_mem:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
  sbatch_extra: ["--mem=900G"]
tb_slow:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
  setup: ["echo set-up starts", "sleep 300"]
tb_plain:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
"""


@pytest.fixture(scope="module")
def profiles(testbed: None, workdir: Path) -> Path:  # noqa: F811
    (workdir / "clusters.yaml").write_text(PROFILES)
    return workdir


def _registered(cwd: Path) -> int:
    db = cwd / "home" / "jobs.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])


@pytest.mark.parametrize("args", [("--cluster", "tb_huge_mem"), ("--cluster", "tb_plain", "--nodes", "3")],
                         ids=["mem-900G", "3-nodes-of-2"])
def test_a_job_that_can_never_run_is_refused_with_slurms_reason(profiles: Path, args: tuple[str, ...]) -> None:
    # A name of its own: the queue may hold another test's job in transition (a node-failure requeue being
    # cancelled leaves and re-enters squeue), so "nothing new in the queue" would test the neighbours.
    name = f"never-runs-{len(args)}"
    recipe = profiles / f"{name}.yaml"
    recipe.write_text(RECIPE.read_text().replace("name: selftest", f"name: {name}", 1))
    rows = _registered(profiles)
    proc = gt(profiles, "submit", str(recipe), *args, check=False)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
    assert last.startswith("error: Slurm would never run this job")
    assert "Requested node configuration is not available" in last and "nothing was submitted" in last
    queued = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, timeout=30)
    assert queued.returncode == 0 and queued.stdout.split() == [], queued
    assert _registered(profiles) == rows


@pytest.mark.slow
def test_logs_shows_output_while_the_controller_is_down_and_the_registry_says_pending(profiles: Path) -> None:
    import json

    out = json.loads(gt(profiles, "submit", str(RECIPE), "--cluster", "tb_plain", "--gpu", "cpu", "--gpus", "1",
                        "--json").stdout)
    job_id, job_dir = out["job_id"], Path(out["job_dir"])
    try:
        deadline = time.monotonic() + 180
        log = job_dir / "training_output.log"
        while time.monotonic() < deadline and not (log.exists() and log.stat().st_size > 0):
            time.sleep(1)
        first = log.read_text(errors="replace").splitlines()[0]
        conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
        dead = profiles / "dead_slurm.conf"  # the same cluster, its controller on a port nobody listens on
        dead.write_text("\n".join("SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
                                  for line in conf.splitlines()) + "\n")
        proc = gt(profiles, "logs", job_id, env={"SLURM_CONF": str(dead)}, check=False)
        assert "Traceback" not in proc.stderr
        assert "no output yet" not in proc.stdout, proc.stdout
        assert proc.returncode == 0 and first in proc.stdout, proc.stderr
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=30)


def _job_field(job_id: str, field: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         timeout=30).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")


@pytest.mark.slow
def test_a_node_failing_under_a_running_job_is_named_in_status(profiles: Path) -> None:
    import json

    out = json.loads(gt(profiles, "submit", str(RECIPE), "--cluster", "tb_slow", "--gpu", "cpu", "--gpus", "1",
                        "--json").stdout)
    job_id, job_dir = out["job_id"], Path(out["job_dir"])
    node = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (_job_field(job_id, "JobState") == "RUNNING"
                                                   and (node := _job_field(job_id, "NodeList"))):
            time.sleep(1)
        assert node, f"job {job_id} never ran"
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=gputrain-test-node-fail"],
                       check=True, timeout=30)
        log = job_dir / "training_output.log"
        while time.monotonic() < deadline and "DUE TO NODE FAILURE" not in log.read_text(errors="replace"):
            time.sleep(0.5)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30,
                       capture_output=True)
        info = json.loads(gt(profiles, "status", job_id, "--json").stdout)
        assert info["state"] == "REQUEUED", info
        assert "NODE_FAIL" in info["reason"] and f"node {node}" in info["reason"], info
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=30)
        if node:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30,
                           capture_output=True)
