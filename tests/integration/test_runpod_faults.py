"""Faults from the field (#30 points 8, 9, 13, 14) on the RunPod fake with a real loopback sshd, each ending
in the right state, with a last line that says what happened and what to do, the README's exit codes, no
traceback, no pod left live and no half-written file. How each fault is made:

- a lost create: the fake drops the create's connection and makes the pod a second later (``late_s``);
  ``--lost-create-timeout`` keeps the search short;
- a failed termination: DELETE answers 429, then 500s (``fail_next``);
- an eviction: the fake sets the pod EXITED (volume kept) or TERMINATED, the pod's sessions are cut and its
  training killed (``evict``, ``drop_connections``, ``killpg``); ``--retry 1`` relaunches it on a new pod
  from the newest salvaged checkpoint;
- a full local disk: the job folder and ``$GPUTRAIN_HOME`` on size-limited tmpfs mounts (root), the pod's
  job folder holding a file larger than the first, the second filled up while the run trains.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_runpod_survive import (  # noqa: F401
    CLI,
    _rows,
    _up_argv,
    _wait_for_pod_step,
    fake,
    sshd,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _kill_training(tmp_path: Path) -> None:
    for child in (tmp_path / "remote").glob("*/.gputrain/child.pid"):
        try:
            os.killpg(int(child.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _last(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_lost_create_found_late_and_failed_termination_exit_1_with_the_billing_line(fake, tmp_path):  # noqa: F811
    fake.fail_next("POST", "/v2/pods", 201, drop=True, late_s=1.0)
    fake.fail_next("DELETE", r"/v2/pods/[^/]+", 429, retry_after=0)
    fake.fail_next("DELETE", r"/v2/pods/[^/]+", 500, times=50)
    proc = subprocess.run(_up_argv(tmp_path, 4, 0.05, "--lost-create-timeout", "20"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    last = _last(proc.stderr)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert fake.count("POST", "/v2/pods") == 1  # the late pod was found, not created twice
    (pod,) = fake.live_pods()
    assert "the training completed" in last and f"pod {pod['id']} could not be terminated" in last
    assert "may still be billing" in last
    (row,) = _rows(tmp_path)
    extra = json.loads(row["extra"])
    assert extra["live"] is True and "may still be billing" in extra["reason"]  # not COMPLETED-and-silent
    command = last.split("`")[1]  # the line's own advice, followed
    fake.faults.clear()
    down = subprocess.run([*CLI, *command.split()[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and f"pod {pod['id']}" in down.stdout, down.stderr


@pytest.mark.parametrize("how", ["EXITED", "TERMINATED"])
def test_evicted_pod_is_salvaged_only_when_it_can_be_and_says_which(fake, sshd, tmp_path, how):  # noqa: F811
    proc = subprocess.Popen(_up_argv(tmp_path, 200, 0.05, "--volume", "20", "--salvage-timeout", "60"),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_pod_step(tmp_path, 14)
    (pod,) = fake.live_pods()
    fake.evict(pod["id"], how)
    sshd.drop_connections()
    _kill_training(tmp_path)
    _, err = proc.communicate(timeout=300)
    last = _last(err)
    assert proc.returncode == 1, err[-3000:]
    assert last.startswith("error: the run ended LOST")
    assert f"went to {how}" in last if how == "EXITED" else "is gone (terminated outside this run)" in last
    (row,) = _rows(tmp_path)
    job_dir = Path(row["job_dir"])
    assert row["state"] == "LOST" and fake.live_pods() == []
    if how == "EXITED":  # started again: its volume held the run's folder
        assert "starting it again to salvage" in err, err
        assert "salvaged into" in last and "checkpoints/step_" in last and "metrics.jsonl" in last, err
        assert any((job_dir / "checkpoints").iterdir())
    else:
        assert "nothing salvaged from pod" in err and "it was terminated" in err
        assert "nothing was salvaged" in last and "salvaged into" not in last
        assert not (job_dir / "checkpoints").exists()


def test_retry_relaunches_an_evicted_run_from_its_newest_salvaged_checkpoint(fake, sshd, tmp_path):  # noqa: F811
    proc = subprocess.Popen(_up_argv(tmp_path, 60, 0.05, "--retry", "1", "--volume", "20"), cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_pod_step(tmp_path, 26)
    (pod,) = fake.live_pods()
    fake.evict(pod["id"], "EXITED")  # stopped, its volume kept: salvaged, then a new pod
    sshd.drop_connections()
    _kill_training(tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    created = [b for m, p, _, b in fake.requests if m == "POST" and p == "/v2/pods"]
    assert len(created) == 2 and fake.live_pods() == []
    (row,) = _rows(tmp_path)
    job_dir = Path(row["job_dir"])
    assert row["state"] == "COMPLETED" and (job_dir / "result.json").is_file()
    record = json.loads((job_dir / "runpod.json").read_text())
    first, second = record["attempts"]
    assert first["state"] == "LOST" and first["pod_id"] == pod["id"] and first["resumed_from"] is None
    assert second["state"] == "COMPLETED" and second["resumed_from"].startswith("step_")
    resumed = int(second["resumed_from"][5:])
    assert resumed >= 24  # the newest checkpoint the first pod had (every 12 steps) was salvaged and used
    log = (job_dir / "training_output.log").read_text()
    assert f"resumed from {second['resumed_from']}" in log and "step 60/60" in log
    summary = json.loads((job_dir / "summary.json").read_text())
    assert [a["state"] for a in summary["runpod"]["attempts"]] == ["LOST", "COMPLETED"]
    # The text summary, as written by the run and as `gputrain logs JOB --summary` rebuilds it: one row per pod.
    shown = subprocess.run([*CLI, "logs", row["job_id"], "--summary"], capture_output=True, text=True, cwd=tmp_path,
                           timeout=60)
    for text in ((job_dir / "job_summary.txt").read_text(), shown.stdout):
        rows = [line for line in text.splitlines() if line.startswith("attempt")]
        assert len(rows) == 2, text
        assert f"1: pod {pod['id']} LOST" in rows[0] and "from the start" in rows[0], rows
        assert " COMPLETED" in rows[1] and f"from checkpoint {second['resumed_from']}" in rows[1], rows


def _tmpfs(path: Path, size: str) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    return path


@pytest.fixture
def full_disks(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the full-disk test mounts a tmpfs: run it as root")
        pytest.skip("mounting a tmpfs needs root")
    logs, home = _tmpfs(tmp_path / "small_logs", "1m"), _tmpfs(tmp_path / "small_home", "1m")
    monkeypatch.setenv("GPUTRAIN_HOME", str(home))
    yield logs, home
    for mount in (logs, home):
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_during_salvage_leaves_no_truncated_file_and_ctrl_c_exits_130(
        fake, tmp_path, full_disks):  # noqa: F811
    logs, home = full_disks
    argv = _up_argv(tmp_path, 400, 0.05)
    argv[argv.index("--logs-dir") + 1] = str(logs)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pod_job = _wait_for_pod_step(tmp_path, 14)
    (pod_job / "model.onnx").write_bytes(os.urandom(3 * 1024 * 1024))  # more than the local disk holds
    filler = home / "filler"
    with open(filler, "wb") as fh:  # the registry's disk is full from now on
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert "No space left on device" in err, err
    assert "could not record the end state in the job registry" in err
    assert fake.live_pods() == []
    (job_dir,) = logs.iterdir()
    assert not (job_dir / "model.onnx").exists()  # no truncated copy under the real name
    assert not [p for p in job_dir.rglob("*") if p.name.startswith(".model.onnx")]
    filler.unlink()  # space freed: the next look records how the run ended instead of RUNNING for ever
    listed = subprocess.run([*CLI, "runpod", "list"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    (row,) = _rows_at(home)
    assert row["state"] == "CANCELLED", listed.stdout
    assert "CANCELLED" in listed.stdout


def _rows_at(home: Path) -> list:
    import sqlite3

    with sqlite3.connect(home / "jobs.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM jobs WHERE backend = 'runpod' ORDER BY id").fetchall()
