"""`gputrain submit/status/jobs/cancel` against the real 2-node Slurm testbed (scripts/slurm-testbed).

Every job is the bundled selftest (real torchrun, gloo on CPU). The fixture brings the testbed up if it is
not (idempotent); without Slurm the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import gputrain as run_gputrain

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scripts" / "slurm-testbed"
RECIPE = ROOT / "recipes" / "selftest.yaml"
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def testbed() -> None:
    up = subprocess.run([str(TESTBED), "up"], capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"slurm testbed did not come up: {up.stderr.strip()[-500:]}")
        pytest.skip(f"slurm testbed unavailable: {up.stderr.strip()[-200:]}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slurm")


def gt(workdir: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> Any:
    full_env = {**os.environ, "GPUTRAIN_HOME": str(workdir / "home"),
                "GPUTRAIN_CONFIG": str(workdir / "clusters.yaml"), **(env or {})}
    proc = run_gputrain(*args, cwd=workdir, env=full_env, timeout=180)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def submit(workdir: Path, *args: str) -> tuple[str, Path]:
    out = json.loads(gt(workdir, "submit", str(RECIPE), "--cluster", "testbed", "--json", *args).stdout)
    return out["job_id"], Path(out["job_dir"])


def status(workdir: Path, job_id: str) -> dict[str, Any]:
    return json.loads(gt(workdir, "status", job_id, "--json").stdout)  # type: ignore[no-any-return]


def wait_for(workdir: Path, job_id: str, states: set[str], timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = status(workdir, job_id)
        if info["state"] in states:
            return info
        time.sleep(2)
    raise AssertionError(f"job {job_id} never reached {states}; last status {info}")


def release_requeued(workdir: Path, job_id: str) -> dict[str, Any]:
    """A requeued job waits ~2 min on BeginTime; let it start now (the testbed's only shortcut), then wait
    for its end.

    Slurm's own wait is what makes a relaunch safe: slurmd revokes the old attempt's credential at the
    requeue with a one-second clock, and a credential made in that same second is revoked too ("Job
    credential revoked", the job FAILED with exit 1 before its script ran: seen once in CI, released 0.3 s
    after the requeue). So release only once Slurm says PENDING, and in a later second than the requeue.
    """
    wait_for(workdir, job_id, {"REQUEUED", "PENDING"}, timeout=120)
    deadline = time.monotonic() + 60
    while "JobState=PENDING" not in scontrol_detail(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
    return wait_for(workdir, job_id, FINAL)


def scontrol_detail(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def batch(testbed: None, workdir: Path) -> dict[str, tuple[str, Path]]:
    """Submit the independent jobs at once so they run side by side on the two nodes."""
    return {
        "single": submit(workdir),  # V100 profile: 2 tasks on one node, --gres=gpu:volta:2
        "multi": submit(workdir, "--nodes", "2", "--gpus", "1"),
        "fail": submit(workdir, "--gpu", "cpu", "--gpus", "1", "--set", "algorithm.fail=true"),
    }


def test_two_tasks_on_one_node_with_volta_gres(batch: dict[str, tuple[str, Path]], workdir: Path) -> None:
    job_id, job_dir = batch["single"]
    assert job_dir.name.startswith(f"selftest_job_{job_id}_")
    info = wait_for(workdir, job_id, FINAL)
    assert (info["state"], info["exit_code"]) == ("COMPLETED", 0), (job_dir / "training_output.log").read_text()
    result = json.loads((job_dir / "result.json").read_text())
    assert result["ok"] and result["world_size"] == 2 and result["slurm_node_ids"] == ["0"]
    assert "#SBATCH --gres=gpu:volta:2" in (job_dir / "job.sbatch").read_text()
    assert "GRES=gpu:volta:2" in scontrol_detail(job_id)  # requested and granted
    log = (job_dir / "training_output.log").read_text()
    assert "all-reduce correct on 2 rank(s)" in log
    assert (job_dir / "plan.json").is_file() and (job_dir / "recipe.resolved.yaml").is_file()


def test_sweep_submits_one_recorded_job_per_value(testbed: None, workdir: Path) -> None:
    out = gt(workdir, "submit", str(RECIPE), "--cluster", "testbed", "--gpu", "cpu", "--gpus", "1", "--json",
             "--sweep", "algorithm.fail=false,true")
    rows = json.loads(out.stdout)
    assert [r["sweep"] for r in rows] == [["algorithm.fail=false"], ["algorithm.fail=true"]]
    assert [wait_for(workdir, r["job_id"], FINAL)["state"] for r in rows] == ["COMPLETED", "FAILED"]
    recorded = {r["job_id"]: r for r in json.loads(gt(workdir, "jobs", "--json", "--no-refresh").stdout)}
    assert [recorded[r["job_id"]]["extra"]["sweep"] for r in rows] == [r["sweep"] for r in rows]


def test_two_nodes_rendezvous_and_all_reduce(batch: dict[str, tuple[str, Path]], workdir: Path) -> None:
    job_id, job_dir = batch["multi"]
    info = wait_for(workdir, job_id, FINAL)
    assert info["state"] == "COMPLETED", (job_dir / "training_output.log").read_text()
    assert info["nodes"] == "n[1-2]"
    result = json.loads((job_dir / "result.json").read_text())
    assert result["world_size"] == 2 and result["slurm_node_ids"] == ["0", "1"]
    assert sorted(r["rank"] for r in result["ranks"]) == [0, 1]
    assert "--rdzv_backend=c10d" in (job_dir / "job.sbatch").read_text()


def test_failing_job_is_failed_with_exit_code(batch: dict[str, tuple[str, Path]], workdir: Path) -> None:
    job_id, job_dir = batch["fail"]
    info = wait_for(workdir, job_id, FINAL)
    assert info["state"] == "FAILED" and info["exit_code"] not in (None, 0)
    log = (job_dir / "training_output.log").read_text()
    assert "RuntimeError: selftest failing on purpose" in log
    listed = json.loads(gt(workdir, "jobs", "--json").stdout)
    assert {j["job_id"]: j["state"] for j in listed}[job_id] == "FAILED"
    # the job runs `python -m gputrain.cli.main logs JOB --summary --final` at its end
    summary = (job_dir / "job_summary.txt").read_text()
    # the worker's exception is the root cause, not torchrun's ChildFailedError that follows it
    assert "RuntimeError: selftest failing on purpose" in summary, summary


def test_cancel_running_job(testbed: None, workdir: Path) -> None:
    job_id, _ = submit(workdir, "--gpu", "cpu", "--gpus", "1",
                       "--set", "train.max_steps=100", "--set", "algorithm.sleep_seconds=200")
    wait_for(workdir, job_id, {"RUNNING"})
    assert "cancelled job" in gt(workdir, "cancel", job_id).stdout
    info = wait_for(workdir, job_id, FINAL, timeout=60)
    assert info["state"] == "CANCELLED"


def test_preempted_job_requeues_and_resumes(testbed: None, workdir: Path) -> None:
    # 0.5 s a step (#26): the USR1 lands ~2 s after step 3 is seen, with 13 s to spare; the resumed run's
    # remaining steps were the Slurm suite's longest sleep at 1 s a step
    job_id, job_dir = submit(workdir, "--gpu", "cpu", "--gpus", "2",
                             "--set", "train.max_steps=30", "--set", "algorithm.sleep_seconds=15")
    metrics = job_dir / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(1)
    assert metrics.exists(), (job_dir / "training_output.log").read_text()
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
    info = release_requeued(workdir, job_id)
    log = (job_dir / "training_output.log").read_text()
    assert info["state"] == "COMPLETED", log
    assert info["restarts"] == 1
    result = json.loads((job_dir / "result.json").read_text())
    assert result["restart_count"] == 1 and result["steps"] == 30 and result["checked_steps"] == 30
    assert result["resumed_from_step"] >= 3
    assert result["steps_this_run"] == 30 - result["resumed_from_step"]
    preempted = json.loads((job_dir / "PREEMPTED.restart-1").read_text())
    assert preempted["step"] == result["resumed_from_step"] and preempted["signal"] == "SIGUSR1"
    assert "resumed from checkpoint" in log


def _no_job_recorded(workdir: Path, logs: Path) -> None:
    assert json.loads(gt(workdir, "jobs", "--json", "--no-refresh").stdout) == []
    assert not logs.exists() or list(logs.iterdir()) == []


def test_submit_errors_are_one_line_and_record_nothing(testbed: None, tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text(
        "badpart:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: volta\n  partition: nope\n"
        "badgres:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: tesla\n  partition: debug\n"
    )
    logs = tmp_path / "logs"
    cases = {
        "badpart": ({}, "partition 'nope'"),
        "badgres": ({}, "no node offers gpu:tesla:2"),
        "testbed": ({"PATH": "/nonexistent"}, "sbatch not found on PATH"),
    }
    for cluster, (env, expected) in cases.items():
        proc = gt(tmp_path, "submit", str(RECIPE), "--cluster", cluster, env=env, check=False)
        assert proc.returncode != 0
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr
        _no_job_recorded(tmp_path, logs)


def test_unreachable_controller(testbed: None, tmp_path: Path) -> None:
    conf = Path(os.environ.get("GPUTRAIN_TESTBED_DIR", "/tmp/gputrain-slurm")) / "etc" / "slurm.conf"
    # MessageTimeout 3: the client retries a refused controller that long per command (the testbed's 30 s would
    # make this wait half a minute for the same error)
    replace = {"SlurmctldPort": "SlurmctldPort=1", "MessageTimeout": "MessageTimeout=3"}
    bad = tmp_path / "slurm.conf"
    bad.write_text("".join(replace.get(ln.split("=", 1)[0], ln) + "\n" for ln in conf.read_text().splitlines()))
    proc = gt(tmp_path, "submit", str(RECIPE), "--cluster", "testbed", env={"SLURM_CONF": str(bad)},
              check=False)
    assert proc.returncode == 1 and "controller unreachable" in proc.stderr, proc.stderr  # the world failed
    _no_job_recorded(tmp_path, tmp_path / "logs")
