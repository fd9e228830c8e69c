"""``gputrain runpod list/status/down/logs`` against the fake API (real HTTP on 127.0.0.1) and a temporary
registry; ``up`` refuses to start without a key from the environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputrain.backends.runpod.api import RunPodClient
from gputrain.cli.runpod import app
from gputrain.registry.store import JobRecord, JobRegistry
from tests.support.cli import gputrain as run_gputrain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

KEY = "rp_cli_canary_42"
GPU = {"id": "NVIDIA B200", "count": 8}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    server = FakeRunPod(api_key=KEY, ssh_port=40022).start()
    monkeypatch.setenv("GPUTRAIN_RUNPOD_API_URL", server.base_url)
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    yield server
    server.stop()


def _pod(fake, name):
    with RunPodClient(KEY, fake.base_url) as client:
        return client.create_pod({"name": name, "image": "me/x:1", "gpu": GPU, "ports": ["22/tcp"]})


def _register(tmp_path, name, state="RUNNING"):
    job_dir = tmp_path / "logs" / f"selftest_job_{name}"
    job_dir.mkdir(parents=True)
    (job_dir / "training_output.log").write_text("step 1 loss 0.5\nstep 2 loss 0.25\n")
    JobRegistry().add(JobRecord(job_id=name, backend="runpod", name=name, recipe="selftest", job_dir=str(job_dir),
                                state=state, gpu="B200-192GB", gpus_per_node=8, nodes=1))


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_down_all_terminates_ours_and_orphans_but_not_foreign_pods(fake, tmp_path):
    _register(tmp_path, "gputrain-mine-1")
    _pod(fake, "gputrain-mine-1")
    orphan = _pod(fake, "gputrain-orphan-2")
    _pod(fake, "my-notebook")
    result = run("down", "--all")
    assert result.exit_code == 0, result.output
    assert f"pod {orphan.id} (gputrain-orphan-2) terminated" in result.output
    assert [p["name"] for p in fake.live_pods()] == ["my-notebook"]
    assert JobRegistry().get("gputrain-mine-1").state == "CANCELLED"


def test_list_shows_registered_and_orphan_pods(fake, tmp_path):
    _register(tmp_path, "gputrain-mine-1")
    mine = _pod(fake, "gputrain-mine-1")
    _pod(fake, "gputrain-orphan-2")
    _pod(fake, "my-notebook")
    out = run("list").output
    assert mine.id in out and "gputrain-orphan-2" in out and "orphan" in out
    assert "my-notebook" not in out
    assert "my-notebook" in run("list", "--all").output


def test_status_shows_state_cost_and_ssh(fake, tmp_path):
    _register(tmp_path, "gputrain-mine-1")
    pod = _pod(fake, "gputrain-mine-1")
    with RunPodClient(KEY, fake.base_url) as client:
        for _ in range(3):
            client.get_pod(pod.id)
    result = run("status", "gputrain-mine-1")
    assert result.exit_code == 0, result.output
    assert f"{pod.id} RUNNING on 8 x NVIDIA B200" in result.output
    assert "$3.99/h" in result.output and "-p 40022" in result.output


def test_down_of_a_gone_pod_is_fine(fake, tmp_path):
    _register(tmp_path, "gputrain-gone-1", state="COMPLETED")
    result = run("down", "gputrain-gone-1")
    assert result.exit_code == 0 and "nothing to terminate" in result.output
    assert JobRegistry().get("gputrain-gone-1").state == "COMPLETED"


def test_down_needs_a_name_or_all(fake):
    result = run("down")
    assert result.exit_code != 0 and "NAME or --all" in str(result.exception)


@pytest.mark.slow  # several CLI processes against the fake: 3 s
def test_logs_prints_the_job_log_or_the_pod_log(fake, tmp_path):
    _register(tmp_path, "gputrain-mine-1", state="COMPLETED")
    assert run("logs", "gputrain-mine-1").output == "step 1 loss 0.5\nstep 2 loss 0.25\n"
    _pod(fake, "gputrain-mine-1")
    assert run("logs", "gputrain-mine-1", "--pod").output.strip().endswith("container started")


def test_up_without_a_key_fails_in_one_line_before_anything_happens(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUTRAIN_HOME": str(tmp_path / "home"),
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "selftest.yaml"
    proc = run_gputrain("runpod", "up", str(recipe), "--gpu", "B200", "--image", "x/y:1", env=env, cwd=tmp_path)
    assert proc.returncode == 2  # a user error: the key is the user's to set
    assert proc.stderr.strip().splitlines() == [
        "error: RUNPOD_API_KEY is not set: export it (or run `runpodctl config` to write ~/.runpod/config.toml); "
        "it is never accepted as a flag"
    ]
    assert not (tmp_path / "logs").exists() and not (tmp_path / "home").exists()
