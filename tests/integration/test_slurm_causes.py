"""Cancel, preemption, time limit and set-up failures told apart on the real 2-node Slurm testbed.

Each cause has its own requeue rule (gputrain.contract.jobstate), and the registry (`status`, `jobs`) and the
job's own summary agree on the end state. Jobs are the bundled selftest (real torchrun, gloo on CPU).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_slurm_testbed import (  # noqa: F401
    FINAL,
    RECIPE,
    gt,
    release_requeued,
    status,
    testbed,
    wait_for,
    workdir,
)
from tests.support.cli import gputrain as run_gputrain

pytestmark = pytest.mark.integration

PROFILES = """
tb_usr2:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
  signal: USR2
  signal_seconds: 30
tb_short:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
  max_time: "00:02:00"
  signal_seconds: 100
tb_badsetup:
  gpu: V100-32GB
  gpus_per_node: 2
  gres_type: volta
  partition: debug
  memory_gb: 1
  cpus_per_gpu: 1
  setup: ["echo set-up starts", "no_such_module_command load anaconda"]
"""


@pytest.fixture(scope="module")
def profiles(testbed: None, workdir: Path) -> Path:  # noqa: F811
    (workdir / "clusters.yaml").write_text(PROFILES)
    return workdir


def submit_to(cwd: Path, cluster: str, *args: str) -> tuple[str, Path]:
    out = json.loads(gt(cwd, "submit", str(RECIPE), "--cluster", cluster, "--json", *args).stdout)
    return out["job_id"], Path(out["job_dir"])


def wait_steps(job_dir: Path, steps: int, timeout: float = 240) -> None:
    """Until the job has logged ``steps`` steps. The requeue tests' selftests take 0.5 s a step (#26; 1 s
    before): the stop lands a second or two after step 3 is seen, with 8 s to spare, and the resumed run's
    remaining steps, which the Slurm suite's one worker sat through, take half as long."""
    metrics = job_dir / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= steps:
            return
        time.sleep(1)
    raise AssertionError((job_dir / "training_output.log").read_text())


def agreed_state(cwd: Path, job_id: str, job_dir: Path) -> str:
    """The one end state that `status`, `jobs` and the job's own summary.json all give."""
    info = status(cwd, job_id)
    listed = {j["job_id"]: j for j in json.loads(gt(cwd, "jobs", "--json").stdout)}
    summary = json.loads((job_dir / "summary.json").read_text())
    assert info["state"] == listed[job_id]["state"] == summary["state"], (info, listed[job_id], summary)
    return str(info["state"])


def _worker_exit_codes(log: str) -> set[str]:
    """The exit codes torchrun reports for its workers (``exitcode  : 75 (pid: 123)``)."""
    return {line.split(":")[1].split()[0] for line in log.splitlines() if line.strip().startswith("exitcode")}


def restarts(job_id: str) -> int:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return int(out.split("Restarts=")[1].split()[0])


def node_failures(log: str) -> int:
    """Restarts Slurm itself made: a testbed slurmd slow to answer under load is marked failed, the job is
    cancelled "DUE TO NODE FAILURE" and requeued by Slurm (seen once in CI at 2 cores). Such a restart is
    Slurm's, not the cause under test, and the log names it; the cause's own requeue is still counted."""
    return log.count("DUE TO NODE FAILURE")


def assert_completed_after_one_requeue(info: dict[str, Any], log: str) -> None:
    """COMPLETED, with exactly one restart from the cause under test (plus any the log shows Slurm made)."""
    assert info["state"] == "COMPLETED" and info["restarts"] == 1 + node_failures(log), log
    assert log.count(": requeueing (restart ") == 1, log  # the job script requeued once, for that cause


def test_scancel_ends_cancelled_and_is_never_requeued(profiles: Path) -> None:
    """A plain `scancel` (SIGTERM to every process) used to make the workers checkpoint, write PREEMPTED and
    the job script requeue the job: it came back RUNNING at restart 1."""
    job_id, job_dir = submit_to(profiles, "testbed", "--gpu", "cpu", "--gpus", "1",
                                "--set", "train.max_steps=100", "--set", "algorithm.sleep_seconds=200")
    wait_steps(job_dir, 2)
    subprocess.run(["scancel", "--", job_id], check=True)
    info = wait_for(profiles, job_id, FINAL, timeout=90)
    time.sleep(3)  # a requeue would show within a second or two of the script's end
    assert info["state"] == "CANCELLED" and restarts(job_id) == 0
    assert "CANCELLED" in subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                                         text=True).stdout
    log = (job_dir / "training_output.log").read_text()
    assert "cancelled: not requeueing" in log and "requeueing (restart" not in log, log
    assert agreed_state(profiles, job_id, job_dir) == "CANCELLED"


def test_gputrain_cancel_requeue_checkpoints_requeues_and_completes(profiles: Path) -> None:
    job_id, job_dir = submit_to(profiles, "testbed", "--gpu", "cpu", "--gpus", "1",
                                "--set", "train.max_steps=20", "--set", "algorithm.sleep_seconds=10")
    wait_steps(job_dir, 3)
    out = gt(profiles, "cancel", job_id, "--requeue").stdout
    assert "requeue" in out
    info = release_requeued(profiles, job_id)
    log = (job_dir / "training_output.log").read_text()
    assert_completed_after_one_requeue(info, log)
    assert "requested: requeueing (restart 1" in log
    request = json.loads((job_dir / "STOP_REQUEST.restart-1").read_text())
    assert request["cause"] == "requested"
    result = json.loads((job_dir / "result.json").read_text())
    assert result["checked_steps"] == 20 and result["resumed_from_step"] >= 3
    assert agreed_state(profiles, job_id, job_dir) == "COMPLETED"


def test_usr2_preemption_requeues_and_resumes(profiles: Path) -> None:
    """The signal is the profile's (USR2 here, like submitit's default); the workers are told once, through
    the stop request, and torchrun (which dies of an unhandled USR1/USR2) never sees it."""
    job_id, job_dir = submit_to(profiles, "tb_usr2", "--gpu", "cpu", "--gpus", "2",
                                "--set", "train.max_steps=20", "--set", "algorithm.sleep_seconds=10")
    assert "#SBATCH --signal=B:USR2@30" in (job_dir / "job.sbatch").read_text()
    wait_steps(job_dir, 3)
    subprocess.run(["scancel", "--signal=USR2", "--batch", "--", job_id], check=True)
    info = release_requeued(profiles, job_id)
    log = (job_dir / "training_output.log").read_text()
    assert_completed_after_one_requeue(info, log)
    assert "preemption: requeueing (restart 1; 1 of 3 for preemption)" in log
    preempted = json.loads((job_dir / "PREEMPTED.restart-1").read_text())
    assert preempted["signal"] == "SIGUSR2" and preempted["cause"] == "preemption"
    assert "SignalException" not in log and "exitcode  : -" not in log, log  # no launcher died of it


def test_setup_line_failure_is_fatal_with_its_reason(profiles: Path) -> None:
    """A failing set-up line used to be ignored: the job went on to `python: command not found` (exit 127)
    with no summary."""
    job_id, job_dir = submit_to(profiles, "tb_badsetup", "--gpu", "cpu", "--gpus", "1")
    info = wait_for(profiles, job_id, FINAL, timeout=120)
    log = (job_dir / "training_output.log").read_text()
    assert info["state"] == "FAILED" and info["exit_code"] == 127, log
    assert "[gputrain] error: set-up line 2 failed (exit 127): no_such_module_command load anaconda" in log
    assert "world_size" not in log  # the training never started
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["state"] == "FAILED" and "set-up line 2 failed" in json.dumps(summary)


@pytest.mark.slow
def test_time_limit_ends_timeout_checkpointed_and_not_requeued(profiles: Path) -> None:
    """Slurm's warning signal near the time limit: checkpoint, no requeue (max_timeout_requeues 0), and
    TIMEOUT everywhere; it used to requeue like a preemption and say "PREEMPTED (exit 1)"."""
    job_id, job_dir = submit_to(profiles, "tb_short", "--gpu", "cpu", "--gpus", "1",
                                "--set", "train.max_steps=400", "--set", "algorithm.sleep_seconds=400")
    info = wait_for(profiles, job_id, FINAL, timeout=240)
    log = (job_dir / "training_output.log").read_text()
    assert info["state"] == "TIMEOUT" and restarts(job_id) == 0, log
    assert "time_limit: not requeueing (limit 0 for time_limit reached)" in log
    assert json.loads((job_dir / "PREEMPTED").read_text())["cause"] == "time_limit"
    assert (job_dir / "TIMEOUT").is_file() and any((job_dir / "checkpoints").glob("step_*"))
    assert agreed_state(profiles, job_id, job_dir) == "TIMEOUT"


def test_two_node_preemption_during_a_large_checkpoint_resumes_and_completes(profiles: Path) -> None:
    """2 nodes x 1 rank, 256 MiB per rank in the stop's checkpoint. Before, srun delivered USR1 to torchrun
    (exit 138) and --kill-on-bad-exit killed the other node's worker while it saved. The resumed run checks
    every rank's payload byte for byte: the save that started completed on both nodes."""
    job_id, job_dir = submit_to(profiles, "testbed", "--nodes", "2", "--gpus", "1",
                                "--set", "train.max_steps=12", "--set", "algorithm.sleep_seconds=12",
                                "--set", "algorithm.checkpoint_mib=256")
    script = (job_dir / "job.sbatch").read_text()
    assert "--kill-on-bad-exit=0" in script and "--kill-on-bad-exit=1" not in script
    wait_steps(job_dir, 3)
    subprocess.run(["scancel", "--signal=USR1", "--batch", "--", job_id], check=True)
    info = release_requeued(profiles, job_id)
    log = (job_dir / "training_output.log").read_text()
    assert_completed_after_one_requeue(info, log)
    preempted = json.loads((job_dir / "PREEMPTED.restart-1").read_text())
    result = json.loads((job_dir / "result.json").read_text())
    assert result["resumed_from_step"] == preempted["step"] and result["slurm_node_ids"] == ["0", "1"]
    assert "checkpoint saved in" in log
    assert _worker_exit_codes(log) == {"75"}, log  # both nodes' workers checkpointed; none was killed
    print(f"stop checkpoint of 2 x 256 MiB saved in {preempted['save_seconds']} s")


def test_signal_before_the_workers_have_handlers_is_deferred(profiles: Path) -> None:
    """USR1 to every process of the job (`scancel --full`) as soon as it runs, while torchrun and the workers
    are still starting: it used to kill them (no PREEMPTED, job FAILED). Now launchers ignore it, a worker
    keeps it, the batch script's stop request is read at the first step: checkpoint, requeue, complete."""
    job_id, job_dir = submit_to(profiles, "testbed", "--nodes", "2", "--gpus", "1",
                                "--set", "train.max_steps=4", "--set", "algorithm.sleep_seconds=2")
    wait_for(profiles, job_id, {"RUNNING"}, timeout=120)
    subprocess.run(["scancel", "--full", "--signal=USR1", "--", job_id], check=True)
    info = release_requeued(profiles, job_id)
    log = (job_dir / "training_output.log").read_text()
    assert_completed_after_one_requeue(info, log)
    assert _worker_exit_codes(log) <= {"75"} and "User defined signal" not in log, log
    assert json.loads((job_dir / "PREEMPTED.restart-1").read_text())["cause"] == "preemption"


def test_jobs_asks_the_controller_once_for_all_pending_jobs(profiles: Path) -> None:
    """`jobs` used to run one scontrol per pending job; squeue's one answer has their states and reasons."""
    import os
    import shutil

    ids = [submit_to(profiles, "testbed", "--gpu", "cpu", "--gpus", "1", "--begin", "now+1hours")[0]
           for _ in range(3)]
    log, bin_dir = profiles / "calls.log", profiles / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("squeue", "scontrol", "sacct"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\nexec "{shutil.which(tool)}" "$@"\n')
        (bin_dir / tool).chmod(0o755)
    try:
        env = {**os.environ, "GPUTRAIN_HOME": str(profiles / "home"),
               "GPUTRAIN_CONFIG": str(profiles / "clusters.yaml"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        out = run_gputrain("jobs", "--json", "--state", "PENDING", cwd=profiles, env=env)
        assert out.returncode == 0, out.stderr
        listed = {j["job_id"]: j for j in json.loads(out.stdout)}
        assert all(listed[i]["state"] == "PENDING" and "reason" in listed[i]["extra"] for i in ids), listed
        calls = log.read_text().splitlines()
        assert [c.split()[0] for c in calls] == ["squeue"], calls
    finally:
        for job_id in ids:
            gt(profiles, "cancel", job_id)


def test_four_point_sweep_is_one_throttled_array_and_one_cancel_ends_it(profiles: Path) -> None:
    """A --sweep used to be one sbatch per point with nothing tying them together."""
    rows = json.loads(gt(profiles, "submit", str(RECIPE), "--cluster", "testbed", "--gpu", "cpu", "--gpus", "1",
                         "--json", "--sweep", "train.seed=0,1,2,3", "--max-parallel", "2",
                         "--set", "train.max_steps=50", "--set", "algorithm.sleep_seconds=100").stdout)
    sweep_id = rows[0]["sweep_id"]
    assert [r["job_id"] for r in rows] == [f"{sweep_id}_{i}" for i in range(4)]
    assert {r["sweep_id"] for r in rows} == {sweep_id}
    script = Path(rows[0]["job_dir"], "job.sbatch").read_text()
    assert "#SBATCH --array=0-3%2\n" in script
    assert [json.loads(Path(r["job_dir"], "plan.json").read_text())["recipe"]["train"]["seed"] for r in rows] \
        == [0, 1, 2, 3]
    wait_steps(Path(rows[0]["job_dir"]), 1)
    listed = json.loads(gt(profiles, "status", sweep_id, "--json").stdout)
    states = [p["state"] for p in listed["points"]]
    assert states.count("RUNNING") <= 2 and "PENDING" in states, states  # %2: two at a time
    assert len(json.loads(gt(profiles, "jobs", "--sweep", sweep_id, "--json").stdout)) == 4
    assert "cancelled sweep" in gt(profiles, "cancel", sweep_id).stdout
    for row in rows:
        assert wait_for(profiles, row["job_id"], FINAL, timeout=90)["state"] == "CANCELLED"
    # the sweep summary: one row per point with its values and the named metric (the point that ran has it)
    table = json.loads(gt(profiles, "jobs", "--sweep", sweep_id, "--metric", "busbw_gbps", "--json").stdout)
    assert table["metric"] == "busbw_gbps"
    assert [p["point"] for p in table["points"]] == [f"train.seed={i}" for i in range(4)]
    assert table["points"][0]["busbw_gbps last"] != "" and {p["state"] for p in table["points"]} == {"CANCELLED"}
    assert json.loads(gt(profiles, "logs", sweep_id, "--json").stdout)["points"][0]["job"] == f"{sweep_id}_0"
    queue = subprocess.run(["squeue", "-h", "-r", "-j", sweep_id], capture_output=True, text=True).stdout
    assert queue.strip() == ""
