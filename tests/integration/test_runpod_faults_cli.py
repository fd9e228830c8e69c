"""``runpod up`` before it spends money and when the pod never starts, ``runpod list`` without a key, against
the fake v2 API over real HTTP (no ssh needed: nothing here gets as far as the pod's sshd).

- without ``--yes`` it shows the plan's cost and asks on a terminal (a real pty), and never waits without one;
- a pod stuck in PROVISIONING or going to ERROR ends in one line with a next step that works when followed;
- a malformed answer while the pod starts (a cost of "0.50/h", an HTML 502 page with status 200) is one line
  naming the field or the page's title, and the pod is terminated;
- ``runpod list`` shows the registry's runs without RUNPOD_API_KEY.
"""

from __future__ import annotations

import os
import pty
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod

pytestmark = pytest.mark.integration

KEY = "rp_faults_canary_1234"
ROOT = Path(__file__).resolve().parents[2]
SELFTEST = ROOT / "recipes" / "selftest.yaml"
CLI = [sys.executable, "-m", "gputrain.cli.main"]


@pytest.fixture
def fake(tmp_path):
    server = FakeRunPod(api_key=KEY, ssh_port=40022).start()
    yield server
    server.stop()
    assert server.live_pods() == [], "a pod was left running"


def _env(fake, tmp_path, **extra):
    env = {**os.environ, "GPUTRAIN_RUNPOD_API_URL": fake.base_url, "RUNPOD_API_KEY": KEY,
           "GPUTRAIN_HOME": str(tmp_path / "home"), **extra}
    env.pop("CI", None)
    return env


def _up(tmp_path, *extra):
    return [*CLI, "runpod", "up", str(SELFTEST), "--gpu", "B200", "--gpus", "8", "--image", "me/x:1", "--poll",
            "0.05", "--ready-timeout", "0.5", "--logs-dir", str(tmp_path / "logs"), *extra]


def _on_pty(argv, env, cwd, answer):
    """Run ``argv`` with a real terminal as stdin, answering ``answer`` once it asks."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            text=True)
    os.close(follower)
    os.write(leader, answer.encode())
    out, err = proc.communicate(timeout=120)
    os.close(leader)
    return proc.returncode, out, err


def test_up_without_a_terminal_shows_the_cost_and_refuses_without_yes(fake, tmp_path):
    proc = subprocess.run(_up(tmp_path), capture_output=True, text=True, env=_env(fake, tmp_path), cwd=tmp_path,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert re.search(r"8 x B200-192GB \(SECURE cloud\).*catalog \$\d+\.\d\d/h", proc.stderr)
    assert proc.stderr.strip().splitlines()[-1].startswith("error: runpod up rents a paid pod")
    assert "--yes" in proc.stderr.strip().splitlines()[-1]
    assert fake.count("POST", "/v2/pods") == 0 and not (tmp_path / "logs").exists()


def test_up_on_a_terminal_asks_and_no_creates_nothing(fake, tmp_path):
    code, _, err = _on_pty(_up(tmp_path), _env(fake, tmp_path), tmp_path, "n\n")
    assert code == 2 and "create this pod? [y/N]" in err and "not confirmed: no pod was created" in err
    assert fake.count("POST", "/v2/pods") == 0 and not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_up_on_a_terminal_yes_creates_the_pod_and_list_needs_no_key_for_it(fake, tmp_path):
    fake.mode = "never_ready"
    env = _env(fake, tmp_path)
    code, _, err = _on_pty(_up(tmp_path), env, tmp_path, "y\n")
    assert code == 1 and "create this pod? [y/N]" in err and "not ready within" in err
    assert fake.count("POST", "/v2/pods") == 1
    with sqlite3.connect(tmp_path / "home" / "jobs.db") as db:
        (name,) = db.execute("SELECT job_id FROM jobs").fetchone()
    del env["RUNPOD_API_KEY"]
    env["HOME"] = str(tmp_path)  # no ~/.runpod/config.toml either
    proc = subprocess.run([*CLI, "runpod", "list"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout and "FAILED" in proc.stdout
    assert "RUNPOD_API_KEY is not set" in proc.stderr and "live status" in proc.stderr


@pytest.mark.slow
def test_pod_stuck_provisioning_is_terminated_with_a_next_step(fake, tmp_path):
    fake.mode = "stuck_provisioning"
    proc = subprocess.run(_up(tmp_path, "--yes"), capture_output=True, text=True, env=_env(fake, tmp_path),
                          cwd=tmp_path, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "status PROVISIONING" in last and "RunPod found no machine" in last
    assert "--other-cloud" in last and "--data-center" in last and "terminated" in proc.stderr
    assert fake.count("DELETE", r"/v2/pods/[^/]+") == 1


@pytest.mark.slow
@pytest.mark.parametrize("log_kept", [True, False])
def test_error_pod_hint_to_its_log_is_given_only_when_following_it_works(fake, tmp_path, log_kept):
    fake.mode = "error"
    if not log_kept:
        fake.fail_next("GET", r"/v2/pods/[^/]+/logs", 404, times=50)
    env = _env(fake, tmp_path)
    proc = subprocess.run(_up(tmp_path, "--yes", "--ready-timeout", "5"), capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "went to ERROR while starting" in last, proc.stderr
    hint = re.search(r"`(gputrain runpod logs \S+ --pod)`", last)
    if not log_kept:
        assert hint is None and "RunPod gave no container log" in last
        return
    assert hint is not None
    followed = subprocess.run([*CLI, *hint.group(1).split()[1:]], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
    assert followed.returncode == 0 and "CUDA driver version is insufficient" in followed.stdout, followed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("raw", [
    '{"id": "x", "name": "n", "status": "RUNNING", "cost": "0.50/h"}',
    "<html><head><title>502 Bad Gateway</title></head><body>" + "<p>cloudflare</p>" * 50 + "</body></html>",
], ids=["cost-string", "html-page"])
def test_malformed_answer_while_starting_is_one_line_and_the_pod_is_terminated(fake, tmp_path, raw):
    fake.fail_next("GET", r"/v2/pods/[0-9a-f]+", 200, raw=raw, content_type="application/json")
    proc = subprocess.run(_up(tmp_path, "--yes"), capture_output=True, text=True, env=_env(fake, tmp_path),
                          cwd=tmp_path, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith("error: RunPod API get pod") and "<" not in last and "cloudflare" not in last
    assert ("'cost' is '0.50/h', not a number" if "cost" in raw else "HTML page (502 Bad Gateway)") in last
    assert fake.count("DELETE", r"/v2/pods/[^/]+") == 1
