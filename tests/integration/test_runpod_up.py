"""``gputrain runpod up`` for real against the project's fake v2 API, with this machine as the pod: a real
sshd on a loopback port (Debian's openssh-server, throw-away host and user keys), real rsync uploads, a real
torchrun training of a recipe's ``cpu`` profile, real downloads and termination. After every run — success,
API faults, a pod that errors or never gets ready, Ctrl-C during upload — the fake holds no live pod.

Needs ``sshd`` (apt-get install -y openssh-server rsync). The live test at the bottom runs only with a
real RUNPOD_API_KEY: it lists pods and sends an invalid create (refused, so nothing is rented).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputrain.backends.runpod.api import RunPodCapacityError, RunPodClient
from gputrain.backends.runpod.up import Up, UpOptions
from gputrain.errors import RunPodError
from tests.integration.conftest import SMALL_GNN_TRAINING

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from runpod_fake import FakeRunPod, LoopbackSshd

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CANARY = "rpa_CANARY_9f8e7d6c5b4a39281706"
SELFTEST = ROOT / "recipes" / "selftest.yaml"
CLI = [sys.executable, "-m", "gputrain.cli.main"]


def _training_recipe() -> Path:
    """The GNN recipe's cpu profile when its entrypoint is installed, else the selftest recipe."""
    for recipe, module in (("gnn_coloring.yaml", "gputrain.train.gnn_coloring"),
                           ("selftest.yaml", "gputrain.train.selftest")):
        spec = importlib.util.find_spec(module)
        is_package = spec is not None and spec.submodule_search_locations is not None
        if spec is not None and (not is_package or importlib.util.find_spec(f"{module}.__main__")):
            return ROOT / "recipes" / recipe
    pytest.fail("neither gputrain.train.gnn_coloring nor gputrain.train.selftest is installed")


@pytest.fixture
def pod_machine(tmp_path):
    if LoopbackSshd.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("sshd missing: apt-get install -y openssh-server rsync")
        pytest.skip("sshd missing (apt-get install -y openssh-server)")
    # The pod runs the gputrain under test (as the image built from it would), not whatever is installed.
    sshd = LoopbackSshd(tmp_path / "sshd", env={"PYTHONPATH": str(ROOT)}).start()
    yield sshd
    sshd.stop()


@pytest.fixture
def fake(pod_machine, tmp_path, monkeypatch):
    def install_key(body):  # what the image's run.sh does with PUBLIC_KEY
        if "PUBLIC_KEY" in body.get("env", {}):
            pod_machine.authorize(body["env"]["PUBLIC_KEY"])

    server = FakeRunPod(api_key=CANARY, ssh_port=pod_machine.port, ssh_user=pod_machine.user,
                        cost_per_hour=5.99, on_create=install_key).start()
    monkeypatch.setenv("GPUTRAIN_RUNPOD_API_URL", server.base_url)
    monkeypatch.setenv("RUNPOD_API_KEY", CANARY)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    yield server
    server.stop()
    assert server.live_pods() == [], "a pod was left running"


def _opts(tmp_path, **kw):
    args = dict(recipe_path=SELFTEST, gpu="B200", gpus=8, image="me/gputrain:test", poll_s=0.05,
                ready_timeout_s=20, logs_dir=tmp_path / "logs", remote_dir=str(tmp_path / "remote"))
    args.update(kw)
    return UpOptions(**args)


def _registry_row(tmp_path):
    with sqlite3.connect(tmp_path / "home" / "jobs.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM jobs ORDER BY id DESC LIMIT 1").fetchone()


#: The pod's training made small (#26): this test is about the pod's life (upload, train, export, summary,
#: download, terminate), not what the model learns, which ``test_gnn_run.py`` holds the full ``cpu`` profile to.
#: Still trains, writes ``model.onnx`` and ``metrics.jsonl`` on the pod and brings them back: about 35 CPU-s
#: less than the profile's own run.
SMALL_TRAINING = {"gnn_coloring.yaml": list(SMALL_GNN_TRAINING)}


def test_up_end_to_end_trains_downloads_and_terminates(fake, tmp_path):
    recipe = _training_recipe()
    small = [arg for value in SMALL_TRAINING.get(recipe.name, []) for arg in ("--set", value)]
    data = tmp_path / "training_data"
    data.mkdir()
    (data / "graphs.txt").write_text("not used by the generated-data recipes, but uploaded\n")
    env = {**os.environ, "WANDB_API_KEY": "wandb-canary-5150"}
    proc = subprocess.run(
        [*CLI, "runpod", "up", str(recipe), "--gpu", "cpu", "--gpus", "2", "--yes",
         "--image", "me/gputrain:test", "--data", str(data), "--poll", "0.05", "--ready-timeout", "60",
         "--logs-dir", str(tmp_path / "logs"), "--remote-dir", str(tmp_path / "remote"),
         "--set", "secrets=[WANDB_API_KEY]", *small, "--json"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    (job_dir,) = (tmp_path / "logs").iterdir()
    job = json.loads(proc.stdout)  # --json (#31): the whole of stdout is one object, the log went to stderr
    assert (job["state"], job["exit_code"], job["job_dir"]) == ("COMPLETED", 0, str(job_dir)), job
    assert job["job_id"] and job["pod_id"] and job["pod_live"] is False
    assert (job_dir / "result.json").is_file(), sorted(p.name for p in job_dir.iterdir())
    if recipe.name == "gnn_coloring.yaml":
        assert (job_dir / "model.onnx").is_file() and (job_dir / "metrics.jsonl").is_file()
    log = (job_dir / "training_output.log").read_text()
    assert log and "secret WANDB_API_KEY is not set" not in log  # it reached the training's environment
    assert (job_dir / "job_summary.txt").is_file()  # written on the pod by `gputrain logs --summary`
    (remote,) = (tmp_path / "remote").iterdir()  # the run's own folder on the pod, named after its pod
    assert (remote / "data" / "training_data" / "graphs.txt").is_file()
    summary = json.loads((job_dir / "runpod.json").read_text())
    assert summary["terminated"] is True and summary["state"] == "COMPLETED" and summary["cost_usd"] >= 0
    assert "cost so far $" in proc.stderr
    row = _registry_row(tmp_path)
    assert row["backend"] == "runpod" and row["state"] == "COMPLETED" and row["exit_code"] == 0
    # One pod: a CPU pod (the cpu profile), created once, terminated once, key files gone.
    (created,) = [b for m, p, _, b in fake.requests if m == "POST" and p == "/v2/pods"]
    assert created["cpu"]["vcpuCount"] >= 4 and "gpu" not in created
    assert fake.count("DELETE", r"/v2/pods/[^/]+") == 1
    assert not (tmp_path / "home" / "runpod" / row["job_id"]).exists()
    # The secret reached training through ssh's stdin only, never the pod's env.
    assert "WANDB_API_KEY" not in created["env"]
    _assert_no_canary(tmp_path, output, fake, extra=["wandb-canary-5150"])


def _assert_no_canary(tmp_path, output, fake, extra=()):
    """The API key never appears in output, job files, registry, remote files or the pod's env."""
    needles = [CANARY, *extra]
    for needle in needles:
        assert needle not in output
    for path in tmp_path.rglob("*"):
        if path.is_file() and "sshd" not in path.parts:
            data = path.read_bytes()
            for needle in needles:
                assert needle.encode() not in data, f"{needle} leaked into {path}"
    for _, _, _, body in fake.requests:
        if isinstance(body, dict):
            assert CANARY not in json.dumps(body)


def test_a_kept_pod_is_taken_over_by_name_and_each_run_otherwise_gets_its_own(fake, tmp_path):
    fake.mode = "never_ready"
    opts = _opts(tmp_path, keep=True, ready_timeout_s=0.5, name="gputrain-kept")
    with pytest.raises(RunPodError, match="not ready"):
        Up(opts).run()
    assert len(fake.live_pods()) == 1
    said: list[str] = []
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, ready_timeout_s=0.5, name="gputrain-kept"), say=said.append).run()
    assert fake.count("POST", "/v2/pods") == 1 and any("taking over pod" in line for line in said)
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, ready_timeout_s=0.5)).run()  # no --name: a new pod, never the kept one
    assert fake.count("POST", "/v2/pods") == 2


def test_a_pod_owned_from_another_machine_is_not_taken_over(fake, tmp_path):
    body = {"name": "gputrain-theirs", "image": "x", "gpu": {"id": "NVIDIA B200", "count": 8},
            "env": {"GPUTRAIN_OWNER": "someone-elses-laptop/0badc0de"}}
    with RunPodClient(CANARY, fake.base_url) as client:
        pod = client.create_pod(body)
        with pytest.raises(RunPodError, match="belongs to a run on 'someone-elses-laptop'"):
            Up(_opts(tmp_path, name="gputrain-theirs")).run()
        assert [p["id"] for p in fake.live_pods()] == [pod.id]
        client.delete_pod(pod.id)


def test_two_live_pods_with_our_name_are_an_error(fake, tmp_path):
    body = {"name": "gputrain-dup", "image": "x", "gpu": {"id": "NVIDIA B200", "count": 8}}
    with RunPodClient(CANARY, fake.base_url) as client:
        pods = [client.create_pod(body) for _ in range(2)]
        with pytest.raises(RunPodError, match="2 live pods are named gputrain-dup"):
            Up(_opts(tmp_path, name="gputrain-dup")).run()
        assert len(fake.live_pods()) == 2  # not ours to delete without being asked
        assert fake.count("POST", "/v2/pods") == 2
        for pod in pods:
            client.delete_pod(pod.id)


def test_pod_that_goes_to_error_is_terminated(fake, tmp_path):
    fake.mode = "error"
    with pytest.raises(RunPodError, match="went to ERROR"):
        Up(_opts(tmp_path)).run()
    assert fake.count("DELETE", r"/v2/pods/[^/]+") == 1
    assert _registry_row(tmp_path)["state"] == "FAILED"


def test_pod_never_ready_hits_the_deadline_and_is_terminated(fake, tmp_path):
    fake.mode = "never_ready"
    with pytest.raises(RunPodError, match=r"not ready within 1 s \(status STARTING"):
        Up(_opts(tmp_path, ready_timeout_s=1)).run()


def test_rate_limits_and_server_errors_are_ridden_out(fake, tmp_path):
    fake.mode = "never_ready"
    fake.fail_next("GET", "/v2/pods", 429, retry_after=1)
    fake.fail_next("POST", "/v2/pods", 429, retry_after=1)
    fake.fail_next("GET", r"/v2/pods/[^/]+", 500, times=2)
    fake.fail_next("DELETE", r"/v2/pods/[^/]+", 503)
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, ready_timeout_s=3)).run()
    assert fake.count("POST", "/v2/pods") == 2 and fake.count("DELETE", r"/v2/pods/[^/]+") == 2


def test_lost_create_answer_is_found_by_name_and_cleaned_up(fake, tmp_path):
    fake.mode = "never_ready"
    fake.fail_next("POST", "/v2/pods", 201, drop=True)
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, ready_timeout_s=0.5)).run()
    assert fake.count("POST", "/v2/pods") == 1


def test_bad_key_is_one_line_and_creates_nothing(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "not-the-key")
    with pytest.raises(RunPodError) as err:
        Up(_opts(tmp_path)).run()
    assert "401" in str(err.value) and "not-the-key" not in str(err.value) and "\n" not in str(err.value)
    assert fake.pods == {}


def test_capacity_error_is_plain_and_other_cloud_is_tried(fake, tmp_path):
    fake.no_capacity.update({"SECURE", "COMMUNITY"})
    with pytest.raises(RunPodCapacityError) as err:
        Up(_opts(tmp_path, data_centers=["US-TX-3", "EU-RO-1"])).run()
    text = str(err.value)
    assert "no 8 x B200-192GB available" in text and "US-TX-3" in text and "EU-RO-1" in text
    assert "--other-cloud" in text
    fake.no_capacity = {"SECURE"}
    fake.mode = "never_ready"
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, other_cloud=True, ready_timeout_s=0.3)).run()
    clouds = [b["cloud"] for m, p, _, b in fake.requests if m == "POST" and p == "/v2/pods"]
    assert clouds == ["SECURE", "SECURE", "SECURE", "COMMUNITY"]


def test_failed_termination_names_the_pod_and_the_command(fake, tmp_path):
    fake.mode = "never_ready"
    fake.fail_next("DELETE", r"/v2/pods/[^/]+", 500, times=50)
    said: list[str] = []
    with pytest.raises(RunPodError, match="not ready"):
        Up(_opts(tmp_path, ready_timeout_s=0.3, name="gputrain-stuck"), say=said.append).run()
    (pod,) = fake.live_pods()
    text = "\n".join(said)
    assert f"could not terminate pod {pod['id']}" in text and "gputrain runpod down gputrain-stuck" in text
    assert json.loads(_registry_row(tmp_path)["extra"])["terminated"] is False
    fake.faults.clear()
    with RunPodClient(CANARY, fake.base_url) as client:
        client.delete_pod(pod["id"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_upload_terminates_the_pod(fake, tmp_path, signum):
    data = tmp_path / "big"
    data.mkdir()
    (data / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    proc = subprocess.Popen(
        [*CLI, "runpod", "up", str(SELFTEST), "--gpu", "B200", "--gpus", "8", "--yes",
         "--image", "me/gputrain:test", "--data", str(data), "--bwlimit", "100", "--poll", "0.05",
         "--logs-dir", str(tmp_path / "logs"), "--remote-dir", str(tmp_path / "remote")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "uploading data" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signum)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, "".join(seen) + rest
    assert f"interrupted by {signal.Signals(signum).name}" in rest and "terminated" in rest
    assert fake.live_pods() == []
    assert _registry_row(tmp_path)["state"] == "CANCELLED"
    _assert_no_canary(tmp_path, "".join(seen) + rest, fake)


@pytest.mark.optional(env="RUNPOD_API_KEY", hint="the live RunPod API; costs nothing, creates no pod")
def test_live_api_lists_pods_and_rejects_a_bad_body():
    from gputrain.backends.runpod.api import RunPodClient, load_api_key

    with RunPodClient(load_api_key(), os.environ.get("GPUTRAIN_RUNPOD_API_URL")) as client:
        assert isinstance(client.list_pods(), list)
        with pytest.raises(RunPodError, match="422|400"):
            client.create_pod({"name": "gputrain-live-check", "image": "x", "bogus": 1})
