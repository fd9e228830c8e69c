"""RunPod runs that survive the user and the network, against the project's fake v2 API and a real loopback
sshd playing the pod (real ssh, real rsync). The pod's training is ``tests/support/pod_trainer.py`` (the
job-folder contract at a chosen step rate), so each scenario acts at a known step and takes seconds:

- two concurrent ``up`` of one recipe get two pods, two keys, two folders and both complete; a second
  ``up --name`` of a live run is refused, and ``attach`` follows it;
- Ctrl-C at a late step stops the training, salvages the newest checkpoint and metrics, then terminates;
- sshd cut and stalled for 20 s, then back: the run reconnects and completes with the training's own code;
- sshd killed for good: salvage fails cleanly, the pod is terminated, the run is LOST with the reason;
- a pod that goes to ERROR: its container log is kept in the job folder and `runpod logs` shows it after.

Every test ends with no live pod (the ``fake`` fixture checks) and the API key in no file.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import ERROR_LOG_LINE, FakeRunPod, LoopbackSshd

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
CANARY = "rpa_CANARY_survive_5c4b3a29181706"
SELFTEST = ROOT / "recipes" / "selftest.yaml"
CLI = [sys.executable, "-m", "gputrain.cli.main"]


@pytest.fixture
def sshd(tmp_path):
    if LoopbackSshd.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("sshd missing: apt-get install -y openssh-server rsync")
        pytest.skip("sshd missing (apt-get install -y openssh-server)")
    pod_env = {"PYTHON": str(SUPPORT / "pod_python"), "POD_REAL_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    server = LoopbackSshd(tmp_path / "sshd", env=pod_env).start()
    yield server
    server.stop()


@pytest.fixture
def fake(sshd, tmp_path, monkeypatch):
    def install_key(body):  # what the image's run.sh does with PUBLIC_KEY
        sshd.authorize(body["env"]["PUBLIC_KEY"])

    server = FakeRunPod(api_key=CANARY, ssh_port=sshd.port, ssh_user=sshd.user, cost_per_hour=7.2,
                        on_create=install_key).start()
    monkeypatch.setenv("GPUTRAIN_RUNPOD_API_URL", server.base_url)
    monkeypatch.setenv("RUNPOD_API_KEY", CANARY)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    yield server
    server.stop()
    assert server.live_pods() == [], "a pod was left running"
    _assert_no_key_in_files(tmp_path)


def _assert_no_key_in_files(tmp_path: Path) -> None:
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def _up_argv(tmp_path: Path, steps: int, step_s: float, *extra: str) -> list[str]:
    return [*CLI, "runpod", "up", str(SELFTEST), "--gpu", "B200", "--gpus", "8", "--yes", "--image",
            "me/gputrain:test",
            "--poll", "0.05", "--ready-timeout", "60", "--logs-dir", str(tmp_path / "logs"),
            "--remote-dir", str(tmp_path / "remote"), "--set", f"env.RECIPE_POD_STEPS='{steps}'",
            "--set", f"env.RECIPE_POD_STEP_S='{step_s}'", "--set", "env.RECIPE_POD_SAVE_EVERY='12'", *extra]


def _rows(tmp_path: Path) -> list[sqlite3.Row]:
    with sqlite3.connect(tmp_path / "home" / "jobs.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM jobs WHERE backend = 'runpod' ORDER BY id").fetchall()


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _wait_for_pod_step(tmp_path: Path, step: int, timeout: float = 120) -> Path:
    """The pod-side job folder (this machine plays the pod) once its training has logged ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for metrics in (tmp_path / "remote").glob("*/job/metrics.jsonl"):
            if (steps := _steps(metrics)) and steps[-1] >= step:
                return metrics.parent
        time.sleep(0.05)
    raise AssertionError(f"the pod's training never reached step {step}")


def test_concurrent_ups_get_their_own_pod_key_and_folders(fake, tmp_path):
    env = {**os.environ}
    procs = [subprocess.Popen(_up_argv(tmp_path, 16, 0.1), env=env, cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert "reusing pod" not in err and "taking over" not in err
    created = [b for m, p, _, b in fake.requests if m == "POST" and p == "/v2/pods"]
    names = {b["name"] for b in created}
    assert len(created) == 2 and len(names) == 2
    assert len({b["env"]["PUBLIC_KEY"] for b in created}) == 2  # one ssh key per run
    assert len({b["env"]["GPUTRAIN_OWNER"] for b in created}) == 2  # each pod names its one owner
    rows = _rows(tmp_path)
    assert {r["job_id"] for r in rows} == names
    assert [(r["state"], r["exit_code"]) for r in rows] == [("COMPLETED", 0), ("COMPLETED", 0)]
    dirs = {r["job_dir"] for r in rows}
    assert len(dirs) == 2
    for job_dir in map(Path, dirs):
        assert _steps(job_dir / "metrics.jsonl") == list(range(1, 17))  # no step trained twice into it
        assert (job_dir / "result.json").is_file()
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == sorted(names)
    assert not any((tmp_path / "home" / "runpod").iterdir())  # both keys forgotten, each by its own run


def test_reusing_a_live_name_is_refused_and_attach_follows_it(fake, tmp_path):
    first = subprocess.Popen(_up_argv(tmp_path, 40, 0.1, "--name", "gputrain-shared"), cwd=tmp_path,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_pod_step(tmp_path, 2)
        second = subprocess.run(_up_argv(tmp_path, 40, 0.1, "--name", "gputrain-shared"), cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert "driven by another live gputrain run" in second.stderr
        assert "gputrain runpod attach gputrain-shared" in second.stderr
        follower = subprocess.run([*CLI, "runpod", "attach", "gputrain-shared"], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=300)
        assert "step 40/40" in follower.stdout, follower.stderr
    finally:
        _out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert follower.returncode == 0, follower.stderr
    assert fake.count("POST", "/v2/pods") == 1
    (row,) = _rows(tmp_path)
    assert row["state"] == "COMPLETED"


def test_ctrl_c_at_a_late_step_salvages_the_newest_checkpoint(fake, tmp_path):
    proc = subprocess.Popen(_up_argv(tmp_path, 96, 0.1), cwd=tmp_path, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pod_job = _wait_for_pod_step(tmp_path, 86)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "salvaged:" in err and "terminated" in err, err
    (row,) = _rows(tmp_path)
    job_dir = Path(row["job_dir"])
    newest_on_pod = max(p.name for p in (pod_job / "checkpoints").iterdir() if p.name.startswith("step_"))
    local = sorted(p.name for p in (job_dir / "checkpoints").iterdir())
    assert local == [newest_on_pod] and int(newest_on_pod[5:]) >= 86
    assert (job_dir / "checkpoints" / newest_on_pod / "state.pt").stat().st_size > 4096
    assert _steps(job_dir / "metrics.jsonl")[-1] >= 86
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["state"] == "CANCELLED" and row["state"] == "CANCELLED"
    assert summary["cost"]["source"].startswith("RunPod billed rate")
    assert (job_dir / "container.log").is_file()


def test_second_ctrl_c_skips_the_salvage_but_terminates(fake, tmp_path):
    proc = subprocess.Popen(_up_argv(tmp_path, 96, 0.1, "--salvage-timeout", "120"), cwd=tmp_path, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_for_pod_step(tmp_path, 30)
    assert proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    for line in proc.stderr:
        if "stopping the training and salvaging" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    assert "terminated" in rest
    (row,) = _rows(tmp_path)
    assert row["state"] == "CANCELLED"
    assert not (Path(row["job_dir"]) / "checkpoints").exists()


def test_connection_cut_and_stalled_20s_then_back_reconnects_and_completes(fake, sshd, tmp_path):
    proc = subprocess.Popen(_up_argv(tmp_path, 40, 0.1, "--reconnect-timeout", "90", "--keepalive", "2"),
                            cwd=tmp_path, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_for_pod_step(tmp_path, 10)
    sshd.pause()
    sshd.drop_connections()
    time.sleep(20)
    sshd.resume()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "reconnected to the pod" in err
    (row,) = _rows(tmp_path)
    assert (row["state"], row["exit_code"]) == ("COMPLETED", 0)
    job_dir = Path(row["job_dir"])
    assert (job_dir / "result.json").is_file() and _steps(job_dir / "metrics.jsonl") == list(range(1, 41))
    log = (job_dir / "training_output.log").read_text()
    assert [int(line.split()[1].split("/")[0]) for line in log.splitlines() if line.startswith("step ")] == \
        list(range(1, 41))  # followed from where the cut left it: no line lost, none twice


def test_sshd_killed_salvage_fails_cleanly_pod_terminated_and_run_lost(fake, sshd, tmp_path):
    from gputrain.backends.runpod.up import Up, UpOptions

    said: list[str] = []
    opts = UpOptions(recipe_path=SELFTEST, gpu="B200", gpus=8, image="me/gputrain:test", poll_s=0.05,
                     ready_timeout_s=60, logs_dir=tmp_path / "logs", remote_dir=str(tmp_path / "remote"),
                     overrides=["env.RECIPE_POD_STEPS='100'", "env.RECIPE_POD_STEP_S='0.1'"], reconnect_s=3,
                     salvage_s=10, keepalive_s=1, log_idle_s=0.5)
    killer = threading.Thread(target=lambda: (_wait_for_pod_step(tmp_path, 5), sshd.stop()), daemon=True)
    killer.start()
    outcome = Up(opts, say=said.append).go()
    killer.join(timeout=5)
    text = "\n".join(said)
    assert outcome.state == "LOST" and outcome.exit_code is None
    assert "no ssh connection to pod" in outcome.reason
    assert "salvage failed" in text and "terminated" in text
    (row,) = _rows(tmp_path)
    extra = json.loads(row["extra"])
    assert row["state"] == "LOST" and row["exit_code"] is None and "no ssh connection" in extra["reason"]
    assert extra["terminated"] is True
    assert json.loads((Path(row["job_dir"]) / "runpod.json").read_text())["state"] == "LOST"
    for child in (tmp_path / "remote").glob("*/.gputrain/child.pid"):  # the "pod" outlives its sshd: stop it
        _stop_pod_processes(int(child.read_text()))


def _stop_pod_processes(group: int, timeout: float = 30.0) -> None:
    """What terminating a real pod does to its container: every process gone, before the teardown reads the
    pod's folder. SIGTERM alone let the training checkpoint on its way out while the key scan walked the
    folder (CI rehearsal: a checkpoint folder vanished under ``rglob``), so SIGKILL, and wait for the group."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _live_in_group(group):
            return
        time.sleep(0.05)
    raise AssertionError(f"the pod's processes (group {group}) outlived SIGKILL for {timeout:.0f} s")


def _live_in_group(group: int) -> bool:
    """Whether a process of ``group`` still runs (a zombie waiting for a reaper that may never come, when
    PID 1 of a container does not reap, writes nothing and does not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def test_error_pod_keeps_its_container_log_for_runpod_logs(fake, tmp_path):
    from gputrain.backends.runpod.up import Up, UpOptions
    from gputrain.errors import RunPodError

    fake.mode = "error"
    opts = UpOptions(recipe_path=SELFTEST, gpu="B200", gpus=8, image="me/gputrain:test", poll_s=0.05,
                     ready_timeout_s=20, logs_dir=tmp_path / "logs", remote_dir=str(tmp_path / "remote"),
                     log_idle_s=0.5)
    with pytest.raises(RunPodError, match="went to ERROR") as err:
        Up(opts, say=lambda _: None).go()
    assert "runpod logs" in str(err.value)
    assert fake.live_pods() == []
    (row,) = _rows(tmp_path)
    kept = (Path(row["job_dir"]) / "container.log").read_text()
    assert ERROR_LOG_LINE in kept and "pulling image" in kept
    shown = subprocess.run([*CLI, "runpod", "logs", row["job_id"], "--pod"], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and ERROR_LOG_LINE in shown.stdout, shown.stderr
    plain = subprocess.run([*CLI, "runpod", "logs", row["job_id"]], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and ERROR_LOG_LINE in plain.stdout, plain.stderr


def _kill_up_when_training(tmp_path: Path, step: int) -> str:
    """Start `up`, SIGKILL it (a closed laptop) once the pod's training reached ``step``; the run's name."""
    proc = subprocess.Popen(_up_argv(tmp_path, 40, 0.1), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for_pod_step(tmp_path, step)
    proc.kill()
    proc.wait(timeout=30)
    (row,) = _rows(tmp_path)
    assert row["state"] == "RUNNING"
    return str(row["job_id"])


def test_attach_follows_a_run_whose_up_died_to_the_end(fake, tmp_path):
    name = _kill_up_when_training(tmp_path, 5)
    proc = subprocess.run([*CLI, "runpod", "attach", name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = _rows(tmp_path)
    assert (row["state"], row["exit_code"]) == ("COMPLETED", 0)
    job_dir = Path(row["job_dir"])
    assert (job_dir / "result.json").is_file() and _steps(job_dir / "metrics.jsonl") == list(range(1, 41))
    log = (job_dir / "training_output.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("step ")] == \
        [f"step {n}/40 loss {1 / n:.4f}" for n in range(1, 41)]  # attach went on from where `up` stopped


def test_down_of_a_run_nobody_drives_salvages_then_terminates(fake, tmp_path):
    name = _kill_up_when_training(tmp_path, 14)
    proc = subprocess.run([*CLI, "runpod", "down", name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminated" in proc.stdout and "salvaged into" in proc.stdout
    (row,) = _rows(tmp_path)
    job_dir = Path(row["job_dir"])
    (newest,) = [p.name for p in (job_dir / "checkpoints").iterdir()]
    assert newest >= "step_00000012"
    assert (job_dir / "metrics.jsonl").is_file() and (job_dir / "container.log").is_file()
    assert row["state"] == "CANCELLED"
