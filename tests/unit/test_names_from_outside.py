"""Names from outside are data: pod names, ssh users and hosts from the API, job ids, and what a recipe may
forward; plus a read-only or broken ``$GPUTRAIN_HOME``. Real fake API over HTTP, real ssh, real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputrain.backends.runpod.api import RunPodClient
from gputrain.backends.runpod.pods import Pod
from gputrain.backends.runpod.ssh import PodShell
from gputrain.backends.runpod.up import forwarded_secrets
from gputrain.cli.runpod import app
from gputrain.errors import GputrainError
from gputrain.registry.store import JobRecord, JobRegistry
from tests.conftest import require_tool
from tests.support.cli import gputrain as run_gputrain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

ROOT = Path(__file__).resolve().parents[2]
KEY = "rp_names_canary_7"
GPU = {"id": "NVIDIA B200", "count": 8}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    server = FakeRunPod(api_key=KEY, ssh_port=40022).start()
    monkeypatch.setenv("GPUTRAIN_RUNPOD_API_URL", server.base_url)
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    yield server
    server.stop()


def gputrain(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return run_gputrain(*args, cwd=cwd, env=full)


def test_runpod_down_never_deletes_outside_home_for_an_api_pod_name(fake: FakeRunPod, tmp_path: Path) -> None:
    (tmp_path / "home" / "runpod").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    with RunPodClient(KEY, fake.base_url) as client:
        pod = client.create_pod({"name": "../../victim", "image": "me/x:1", "gpu": GPU, "ports": ["22/tcp"]})
    result = CliRunner().invoke(app, ["down", pod.id])
    assert result.exit_code == 0, result.output
    assert (victim / "keep.txt").read_text() == "precious"
    assert fake.live_pods() == []  # the pod itself is still terminated


def test_an_ssh_user_from_the_api_is_never_an_option(tmp_path: Path) -> None:
    require_tool("ssh")
    canary = tmp_path / "proxy-command-ran"
    data = {"id": "p1", "name": "gputrain-x", "status": "RUNNING",
            "ssh": {"direct": {"host": "127.0.0.1", "port": 9, "username": f"-oProxyCommand=touch {canary}"}}}
    pod = Pod.from_api(data)
    if pod.ssh_direct is not None:  # the old code kept it, and ssh then ran the ProxyCommand
        key = tmp_path / "id"
        key.write_text("")
        PodShell(pod.ssh_direct, key, connect_timeout_s=2).check("true", timeout_s=10)
    assert not canary.exists()
    assert pod.ssh_direct is None and pod.ssh_problem and "not a user name" in pod.ssh_problem
    for host in ("-oProxyCommand=x", "a b", "host\n"):
        bad = Pod.from_api({**data, "ssh": {"direct": {"host": host, "port": 22, "username": "root"}}})
        assert bad.ssh_direct is None and "host" in (bad.ssh_problem or "")
    good = Pod.from_api({**data, "ssh": {"direct": {"host": "10.0.0.7", "port": 22, "username": "root"}}})
    assert good.ssh_direct is not None
    argv = PodShell(good.ssh_direct, tmp_path / "id").ssh_argv("true")
    assert argv[-3:] == ["--", "root@10.0.0.7", "true"]


def test_a_recipe_cannot_forward_launcher_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = tmp_path / "r.yaml"
    base = (ROOT / "recipes" / "selftest.yaml").read_text()
    for name in ("RUNPOD_API_KEY", "SSH_AUTH_SOCK"):
        recipe.write_text(base + f"secrets: [{name}]\n")
        proc = gputrain("validate", str(recipe), cwd=tmp_path)
        assert proc.returncode == 2 and "credential of the launching machine" in proc.stderr, proc.stderr
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", "hf-canary")
    assert forwarded_secrets(["HF_TOKEN", "RUNPOD_API_KEY", "WANDB_API_KEY"]) == ["HF_TOKEN"]
    recipe.write_text(base + "secrets: [HF_TOKEN, WANDB_API_KEY]\n")
    shown = gputrain("plan", str(recipe), "--gpu", "cpu", cwd=tmp_path)
    assert "secrets (by name)    HF_TOKEN, WANDB_API_KEY" in shown.stdout
    assert "hf-canary" not in shown.stdout


def test_job_ids_are_validated_before_any_slurm_command(tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("scancel", "squeue", "scontrol", "sacct"):
        (stubs / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/called.log\n')
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "GPUTRAIN_HOME": str(tmp_path / "home")}
    for args in (["cancel", "--", "--user=root"], ["cancel", "--", "-u"], ["status", "--", "--me"],
                 ["cancel", "4242 --user=root"]):
        proc = gputrain(*args, cwd=tmp_path, env=env)
        assert proc.returncode == 2, proc.stderr
        # not in the registry: refused before any backend is asked (a registry row with such an id is refused
        # by the id check: tests/unit/test_jobs_cli.py)
        assert "known to gputrain" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "called.log").exists()


def _read_only_bind(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a shell line) with ``folder`` mounted read-only (root in a private mount namespace:
    a read-only file system binds root too, unlike permission bits)."""
    require_tool("unshare")
    if os.geteuid() != 0:
        pytest.skip("needs root for a private read-only mount")
    script = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && {command}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUTRAIN_HOME": str(folder)}
    return subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_read_only_home_still_answers_read_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUTRAIN_HOME", str(home))
    JobRegistry().add(JobRecord(job_id="", backend="local", name="seen", state="COMPLETED"))
    py = f"{sys.executable} -m gputrain.cli.main"
    proc = _read_only_bind(home, f"{py} jobs --no-refresh && {py} jobs && {py} status local-1")
    assert proc.returncode == 0, proc.stderr
    assert "local-1" in proc.stdout and "COMPLETED" in proc.stdout
    empty = tmp_path / "empty-home"
    empty.mkdir()
    proc = _read_only_bind(empty, f"{py} jobs --no-refresh")
    assert proc.returncode == 0 and "no jobs yet" in proc.stdout, proc.stderr


def test_a_corrupt_registry_is_one_line_with_its_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "jobs.db").write_bytes(os.urandom(4096))
    proc = gputrain("jobs", "--no-refresh", cwd=tmp_path, env={"GPUTRAIN_HOME": str(home)})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert str(home / "jobs.db") in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_gputrain_error_messages_are_always_one_line() -> None:
    message = str(GputrainError("bad name 'a\nb\x1b]0;x\x07'"))
    assert "\n" not in message and "\x1b" not in message and "\\n" in message
    assert shutil.which("sh")
